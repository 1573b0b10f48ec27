"""The drop-in claim, shown: each scenario is written once and run against real flup 1.0.3 and
against flupfast, each in its own process (tests/integration/flup_launcher.py, the same command
line, the probe app tests/apps/probe.py), over FastCGI, SCGI and AJP13 in thread, fork and
single mode, with the same protocol bytes (tests/*_client.py).

Where the two agree the scenario asserts equality. Where they differ on purpose, the scenario
names the compat/known_differences.py key(s) it depends on (``@differs``); it then records
flup's behaviour (a crash, a hang, a wrong answer: every wait is bounded) by asserting it, and
asserts flupfast's correct behaviour: an answer per protocol, a log line, and the server still
serving the next request. flup has no SCGI or AJP single mode; there its thread mode stands in.

One server per (implementation, protocol, mode) serves all the scenarios of that pair; the
signal scenarios start their own servers, side by side.
"""
import concurrent.futures
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from compat import differential as d
from compat.differential import HUNG, CLOSED, RESET, Answer, differs, deviates, on_both, same
from compat.known_differences import DIFFERENCES
from flupfast import gateway
from flupfast.protocols import fastcgi as f
from tests import ajp_client, fcgi_client, scgi_client
from tests.apps import probe
from tests.waiting import wait_at_most, wait_until

pytestmark = pytest.mark.timeout(120)

# Known differences no scenario here can show, each with the reason.
NOT_DIFFERENTIAL = {
    'wsgi-errors-tee-bytes': 'the probe app never writes to wsgi.errors; '
                             'tests/unit/test_fastcgi_connection.py covers the tee',
    'scgi-file-wrapper': 'the probe app does not use wsgi.file_wrapper (an addition; '
                         'tests/unit/test_scgi_connection.py covers it)',
    'ajp-response-framing': 'the packets on the wire are the same; the difference is '
                            'copies and send calls, measured in bench/',
    'fastcgi-nagle': 'a difference in time only (bench/ measures it); timing assertions '
                     'do not belong in tests',
    'linear-streams': 'a difference in time only (bench/ measures it)',
    'fastcgi-multiplexed-input': 'a difference in memory use only',
    'fastcgi-multiplexed-overloaded': 'needs thread creation to fail inside the server',
    'start-response-checks': 'needs the servers under python -O and an app that breaks '
                             'the WSGI rules; the probe app follows them',
    'prefork-sock-timeout': "flup's effect is on the listening socket's blocking mode, "
                            'which a client cannot see',
    'threadpool-job-exceptions': 'needs a connection job that raises past its own error '
                                 'handling, which no protocol input reaches',
}

# Known differences of flup's other modules (plain CGI, Paste, the clients, the protocol
# helpers) whose side-by-side evidence lives in their own tests: key -> that test file. An
# entry may come before its key is merged into the list; it counts only once it is there.
SHOWN_ELSEWHERE = {
    'cgi-server-bytes': 'tests/unit/test_cgi_server.py',
    'cgi-server-errors': 'tests/unit/test_cgi_server.py',
    'cgi-environ-latin1': 'tests/unit/test_cgi_server.py',
    'paste-factory-py3': 'tests/unit/test_paste_factory.py',
    'flup-clients': 'tests/unit/test_clients.py',
    'connection-internals': 'compat/test_api_surface.py',
    'flup-adapters-strict': 'tests/unit/test_flup_adapters.py',
    'threadpool-start-capped': 'tests/unit/test_threadpool.py',
    'reload-keeps-listening-socket': 'tests/integration/test_library_reload.py',
    'unix-bind-not-a-socket': 'tests/unit/test_listen.py',
    'ajp-header-name-dropped': 'tests/unit/test_ajp_codec.py',
    # Reliability (docs/reliability.md): shown against flupfast's processes under fault.
    'threaded-pool-full': 'tests/reliability/test_faults.py',
    'threaded-stop-idle-connection': 'tests/reliability/test_faults.py',
    'prefork-pool-full': 'tests/reliability/test_faults.py',
    'prefork-shutdown-drain': 'tests/reliability/test_faults.py',
    'prefork-kept-connection-released': 'tests/integration/test_apache_ajp.py',
    'request-timeout-watchdog': 'tests/reliability/test_faults.py',
    'fastcgi-refused-peer-logged': 'tests/reliability/test_access.py',
    'allowed-servers-everywhere': 'tests/reliability/test_access.py',
}

NO_ANSWER = (CLOSED, RESET)


def matrix_id(param):
    return '%s-%s' % param if isinstance(param, tuple) else str(param)


@pytest.fixture(scope='module', params=d.MATRIX, ids=matrix_id)
def pair(request, tmp_path_factory):
    """{'flup': Backend, 'flupfast': Backend} for one (protocol, mode), shared by the
    module's scenarios (pytest groups the tests by this parameter)."""
    protocol, mode = request.param
    backends = d.start_pair(protocol, mode, tmp_path_factory.mktemp('%s-%s' % request.param))
    yield backends
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda backend: backend.stop(), backends.values()))


def protocol_of(pair):
    return pair['flupfast'].protocol


def mode_of(pair):
    return pair['flupfast'].mode


def over(*protocols):
    """Run a scenario on the pairs of these protocols only (the shared servers)."""
    cases = [case for case in d.MATRIX if case[0] in protocols]
    return pytest.mark.parametrize('pair', cases, indirect=True, ids=[matrix_id(c) for c in cases])


def assert_still_serving(pair, impls=('flup', 'flupfast')):
    for impl in impls:
        assert pair[impl].serves(), '%s stopped serving:\n%s' % (impl, pair[impl].log()[-3000:])


# ------------------------------------------------------------------------------------------
# What the app sees

HEADERS = [('Host', 'example.org'), ('User-Agent', 'probe/1.0'), ('X-Custom', 'a b')]


def environ_of(backend, uri='/environ/x?a=1&b=%20', whole=False, **kw):
    """The probe's environ view without its pid; unless ``whole``, also without what
    test_environ checks apart: the type of wsgi.input over SCGI (flup's is a StringIO when
    there is no body) and wsgi.multithread where flup's thread mode stands in for single."""
    answer = backend.request(uri, headers=HEADERS, **kw)
    assert isinstance(answer, Answer) and answer.status == 200, answer
    return comparable(answer.json(), backend, whole)


def comparable(env, backend, whole=False):
    assert isinstance(env.pop('probe.pid'), int)
    if not whole:
        if backend.protocol == 'scgi':
            del env['wsgi.input.type']
        if backend.protocol != 'fcgi' and backend.mode == 'single':
            del env['wsgi.multithread']
    return env


@differs('scgi-bounded-input')
def test_environ(pair):
    """The environ the app sees, key by key (only the pid differs); over SCGI a request
    without body gets flup's text StringIO as wsgi.input, a bytes stream from us."""
    results = on_both(pair, lambda b: environ_of(b, whole=True))
    flup, ours = results['flup'], results['flupfast']
    if protocol_of(pair) != 'fcgi' and mode_of(pair) == 'single':
        # flup's thread mode stands in: only the concurrency flags may differ.
        assert (flup['wsgi.multithread'], flup['wsgi.multiprocess']) == (True, False)
        assert (ours['wsgi.multithread'], ours['wsgi.multiprocess']) == (False, False)
        for env in results.values():
            del env['wsgi.multithread']
    if protocol_of(pair) == 'scgi':
        assert flup.pop('wsgi.input.type') == 'StringIO'
        assert ours.pop('wsgi.input.type') == 'InputStream'
    assert flup == ours
    assert ours['PATH_INFO'] == '/environ/x'


@differs('scgi-lingering-close')
def test_environ_with_body(pair):
    """POST with a body the app does not read: the same environ; over SCGI flup closes with
    the body unread, so the peer gets a reset instead of the answer."""
    results = on_both(pair, lambda b: b.request('/environ', method='POST', body=b'x' * 5000))
    if protocol_of(pair) == 'scgi':
        flup, ours = deviates('scgi-lingering-close', results)
        assert flup in NO_ANSWER
        env = ours.json()
        assert env['CONTENT_LENGTH'] == '5000'
        assert env['wsgi.input.type'] == 'InputStream'
        return
    same({impl: comparable(answer.json(), pair[impl]) for impl, answer in results.items()})


@over('fcgi', 'scgi')
@differs('fastcgi-path-info-decoded-script-name', 'scgi-path-info-decoded-script-name')
def test_path_info_under_a_decoded_script_name(pair):
    """nginx's stock fastcgi_params / Apache mod_proxy_scgi: SCRIPT_NAME is the decoded path,
    no PATH_INFO. flup cuts the raw REQUEST_URI at len(SCRIPT_NAME)."""
    uri = '/environ/caf%C3%A9/a%20b%21'
    decoded = '/environ/caf\xc3\xa9/a b!'  # latin-1 str of the UTF-8 bytes, as CGI passes it
    if protocol_of(pair) == 'fcgi':
        key = 'fastcgi-path-info-decoded-script-name'
        results = on_both(pair, lambda b: environ_of(b, uri, params={'SCRIPT_NAME': decoded}))
    else:
        key = 'scgi-path-info-decoded-script-name'
        results = on_both(pair, lambda b: environ_of(b, uri, script_name=decoded))
    flup, ours = deviates(key, results)
    assert flup['PATH_INFO'] == uri[len(decoded):]  # a fragment of the raw URI
    assert ours['PATH_INFO'] == ''
    assert flup['SCRIPT_NAME'] == ours['SCRIPT_NAME'] == decoded


@over('fcgi', 'scgi')
def test_path_info_from_request_uri(pair):
    """No PATH_INFO and an undecoded SCRIPT_NAME prefix: both cut the raw URI (undecoded)."""
    uri = '/app/environ/a%20b'
    if protocol_of(pair) == 'fcgi':
        results = on_both(pair, lambda b: environ_of(b, uri, params={'SCRIPT_NAME': '/app'}))
    else:
        results = on_both(pair, lambda b: environ_of(b, uri, script_name='/app'))
    assert same(results)['PATH_INFO'] == '/environ/a%20b'


# ------------------------------------------------------------------------------------------
# What the web server gets back

@pytest.mark.parametrize('uri', ['/', '/stream?chunks=3&size=5', '/str', '/head', '/write',
                                 '/download?size=0', '/nowhere'])
def test_response_bytes(pair, uri):
    """Status, header order and case, body, and the Content-Length rule (added only for a
    one-element result: '/', not the generator, write() or the empty body)."""
    answer = same(on_both(pair, lambda b: b.request(uri)))
    if uri in ('/', '/str'):
        assert answer.header('Content-Length') == str(len(answer.body))
    elif uri in ('/stream?chunks=3&size=5', '/write'):
        assert answer.header('Content-Length') is None


def test_head_request(pair):
    same(on_both(pair, lambda b: b.request('/head', method='HEAD')))


@differs('ajp-500-status')
def test_error_page(pair):
    """The 500 page, byte for byte; over AJP flup sends it with status 200."""
    results = on_both(pair, lambda b: b.request('/error'))
    if protocol_of(pair) == 'ajp':
        flup, ours = deviates('ajp-500-status', results)
        assert (flup.status, flup.reason) == (200, 'Internal Server Error')
        assert (ours.status, ours.reason) == (500, 'Internal Server Error')
        assert (flup.headers, flup.body) == (ours.headers, ours.body)
        answer = ours
    else:
        answer = same(results)
    assert answer.header('Content-Type') == 'text/html'
    assert b'<h1>Unhandled Exception</h1>' in answer.body


# What an attacker puts in a URL for an app that copies its query into Location.
SPLITTING_QUERY = '%0d%0aSet-Cookie:%20admin=1'


@differs('response-head-checked')
def test_response_splitting_refused(pair):
    """/redirect copies the decoded query into Location: flup hands the web server a header
    of the client's making; flupfast answers the 500 page and logs the header's name (never
    its value); both keep serving."""
    marks = {impl: backend.mark() for impl, backend in pair.items()}
    results = on_both(pair, lambda b: b.request('/redirect?' + SPLITTING_QUERY))
    flup, ours = deviates('response-head-checked', results)
    if protocol_of(pair) == 'ajp':
        # AJP frames each header by length: the CR LF reach the web server inside the value.
        assert flup.header('Location') == '/x\r\nSet-Cookie: admin=1'
    else:
        assert (flup.status, flup.header('Set-Cookie')) == (302, 'admin=1')
    assert (ours.status, ours.header('Set-Cookie'), ours.header('Location')) == (500, None, None)
    assert b'<h1>Unhandled Exception</h1>' in ours.body
    named = "Value of header b'Location' contains a control character"
    backend = pair['flupfast']
    if protocol_of(pair) == 'fcgi':  # the traceback goes to FCGI_STDERR, the web server's log
        log = ours.extra['stderr'].decode('latin-1')
    else:
        wait_until(lambda: named in backend.log_since(marks['flupfast']), 5)
        log = backend.log_since(marks['flupfast'])
    assert named in log and 'admin=1' not in log
    assert_still_serving(pair)


def rss_kib(pid):
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1])
    raise AssertionError('no VmRSS for %d' % pid)


@pytest.mark.parametrize('uri', ['/bigheader?size=1048576', '/headers?count=10000'],
                         ids=['1mib-header', '10000-headers'])
@differs('ajp-500-status')
def test_huge_response_head(pair, uri):
    """A 1 MiB header and 10,000 headers: FastCGI and SCGI send them, as flup does; over AJP
    both answer the error page (the head cannot fit an AJP packet), flup with status 200. The
    server's memory does not grow with the number of such requests, and it keeps serving."""
    results = on_both(pair, lambda b: b.request(uri))
    ours = results['flupfast']
    if protocol_of(pair) == 'ajp':
        flup, ours = deviates('ajp-500-status', results)
        assert (flup.status, flup.body) == (200, gateway.ERROR_BODY), flup
        assert (ours.status, ours.body) == (500, gateway.ERROR_BODY), ours
    else:
        assert same(results).status == 200
        if 'size' in uri:
            assert ours.header('X-Big') == 'b' * (1 << 20)
        else:
            assert len([n for n, _ in ours.headers if n.startswith('X-Header-')]) == 10000
    backend = pair['flupfast']
    if mode_of(pair) != 'fork':  # prefork spreads the requests over children that come and go
        for _ in range(4):
            backend.request(uri)
        # A leak of the head (1 MiB or more a request) grows every batch by 10 MiB; the
        # allocator's per-thread arenas grow only while new pool threads take requests.
        growth = []
        for _ in range(4):
            before = rss_kib(backend.pid)
            for _ in range(10):
                backend.request(uri)
            growth.append(rss_kib(backend.pid) - before)
        assert min(growth) < 4 * 1024, growth
    assert_still_serving(pair)


@differs('truncated-response-signalled')
def test_error_after_first_chunk(pair):
    """An exception after the first chunk: no error page. flup ends the request as if the
    response were whole (END_REQUEST, END_RESPONSE with reuse, or a plain close); flupfast
    ends the TCP connection without that end (a reset, or for AJP a close), which the web
    server reports as a failed backend."""
    def outcome(answer):  # what tells the web server the response is whole
        if not isinstance(answer, d.Answer):
            return answer
        return answer.status, answer.body, answer.extra.get('end'), answer.extra.get('reuse')
    results = {impl: outcome(answer) for impl, answer
               in on_both(pair, lambda b: b.request('/error-after')).items()}
    flup, ours = deviates('truncated-response-signalled', results)
    end = {'fcgi': (0, f.FCGI_REQUEST_COMPLETE), 'ajp': None}.get(protocol_of(pair))
    reuse = True if protocol_of(pair) == 'ajp' else None
    assert flup == (200, probe.ERROR_AFTER_FIRST, end, reuse)
    # A reset, a close, or the part sent without its end (read before the reset arrived).
    assert ours in (RESET, CLOSED, (200, probe.ERROR_AFTER_FIRST, None, None)), ours
    assert same(on_both(pair, lambda b: b.request('/'))).body == probe.HELLO


@differs('fastcgi-maxwrite')
def test_large_response(pair):
    """The same bytes; FastCGI STDOUT records of 8184 bytes (flup) or 65528 (ours)."""
    size = 200000
    results = on_both(pair, lambda b: b.request('/download?size=%d' % size))
    answer = same(results)
    assert answer.body == probe.pattern_bytes(size)
    if protocol_of(pair) == 'fcgi':
        records = {impl: a.extra['records'].count(f.FCGI_STDOUT) for impl, a in results.items()}
        flup, ours = deviates('fastcgi-maxwrite', records)
        assert flup >= size // 8184 + 1 > ours


@pytest.mark.parametrize('mode', ['read', 'read65536', 'readline', 'iter', 'readline65536'])
@differs('scgi-bounded-input', 'readline-size')
def test_upload(pair, mode):
    """An upload (300 KiB opening with a 150 KiB line) read whole, in 64 KiB pieces, by lines,
    by iteration, by readline(65536).

    SCGI: flup's wsgi.input runs past the body, so every mode that reads to the end hangs
    until the web server gives up (here: until we half-close, after HANG seconds); the other
    modes repeat the same hang and run on FastCGI and AJP only. FastCGI: flup's
    readline(65536) returns more than 65536 bytes (the probe fails: a 500 page); its AJP
    stream has the same code, but these chunk sizes do not trigger it."""
    protocol = protocol_of(pair)
    if protocol == 'scgi' and mode != 'read':
        pytest.skip('over SCGI every mode hangs on flup as read() does')
    body = probe.pattern_bytes(300 * 1024)
    digest = hashlib.sha256(body).hexdigest()

    def scenario(backend):
        if protocol != 'scgi':
            return backend.request('/upload?mode=' + mode, method='POST', body=body)
        conn = backend.connect(timeout=d.patience(backend))
        try:
            first = conn.request('/upload?mode=' + mode, method='POST', body=body)
            if first != HUNG:
                return first
            conn.sock.shutdown(socket.SHUT_WR)
            conn.sock.settimeout(d.IO_TIMEOUT)
            return HUNG, conn.read()
        finally:
            conn.close()

    results = on_both(pair, scenario)
    ours = results['flupfast']
    assert ours.status == 200 and ours.json()['sha256'] == digest
    if protocol == 'scgi':
        flup, _ = deviates('scgi-bounded-input', results)
        assert flup[0] == HUNG and flup[1].json()['sha256'] == digest  # after our EOF
    elif mode == 'readline65536' and protocol == 'fcgi':
        flup, _ = deviates('readline-size', results)
        assert flup.status == 500 and b'Unhandled Exception' in flup.body
    else:
        assert results['flup'].json()['sha256'] == digest


# ------------------------------------------------------------------------------------------
# Connections: keep-alive, reuse, unread bodies, who may connect

def test_connection_reuse(pair):
    """FastCGI: three KEEP_CONN requests on one connection, which stays open, then one
    without, after which the server closes it. SCGI: one request per connection. AJP: the
    connection is reused (END_RESPONSE reuse=1) and stays open."""
    protocol = protocol_of(pair)

    def scenario(backend):
        conn = backend.connect()
        seen = []
        try:
            if protocol == 'scgi':
                seen.append(conn.request('/'))
                seen.append(conn.at_eof())
                return seen
            for i in range(3):
                if protocol == 'fcgi':
                    answer = conn.request('/', keep_conn=True, request_id=i + 1)
                else:
                    answer = conn.request('/')
                seen.append((answer.status, answer.body, answer.extra.get('reuse'),
                             answer.extra.get('end')))
            seen.append(conn.at_eof(0.3))
            if protocol == 'fcgi':
                answer = conn.request('/', request_id=9)
                seen.append((answer.status, answer.extra['end']))
                seen.append(conn.at_eof())
            return seen
        finally:
            conn.close()

    seen = same(on_both(pair, scenario))
    if protocol == 'fcgi':
        assert seen[3] is False and seen[-1] is True
    elif protocol == 'ajp':
        assert seen[0][2] is True and seen[3] is False


@differs('scgi-lingering-close')
def test_unread_body(pair):
    """The app reads 10 bytes of a 300 KiB body. FastCGI (KEEP_CONN) and AJP: the next request
    on the same connection is served. SCGI: flup closes with the body unread (a reset that
    can destroy its answer); we half-close and drain, so the answer arrives."""
    protocol = protocol_of(pair)
    body = probe.pattern_bytes(300 * 1024)

    def scenario(backend):
        conn = backend.connect()
        try:
            if protocol == 'fcgi':
                first = conn.request('/upload?limit=10', body=body, keep_conn=True)
                second = conn.request('/', keep_conn=True, request_id=2)
            elif protocol == 'ajp':
                first = conn.request('/upload?limit=10', method='POST', body=body)
                second = conn.request('/')
            else:
                first = conn.request('/upload?limit=10', method='POST', body=body)
                return first if first in (HUNG, CLOSED, RESET) else json.loads(first.body)['length']
            return (json.loads(first.body)['length'], second.status, second.body)
        finally:
            conn.close()

    results = on_both(pair, scenario)
    if protocol == 'scgi':
        flup, ours = results['flup'], results['flupfast']
        assert ours == 10
        # flup's reset races its answer: on loopback the answer is usually lost.
        assert flup in (10, RESET)
    else:
        assert same(results) == (10, 200, probe.HELLO)


def test_rejected_peer(pair):
    """A peer outside allowedServers / FCGI_WEB_SERVER_ADDRS is closed without an answer
    (SCGI and AJP log flup's warning); the server keeps serving."""
    marks = {impl: backend.mark() for impl, backend in pair.items()}

    def scenario(backend):
        conn = backend.connect(source=d.OTHER_PEER, timeout=5)
        try:
            try:
                conn.send({'fcgi': fcgi_client.request_bytes('/'),
                           'scgi': scgi_client.request_bytes('/'),
                           'ajp': ajp_client.request_bytes('GET', '/')}[backend.protocol])
            except (BrokenPipeError, ConnectionResetError):
                return 'no answer'
            return 'no answer' if conn.at_eof(5) else 'answered or hung'
        finally:
            conn.close()

    assert same(on_both(pair, scenario)) == 'no answer'
    if protocol_of(pair) != 'fcgi':
        for impl, backend in pair.items():
            wait_until(lambda: 'Server connection from 127.0.0.2 disallowed'
                       in backend.log_since(marks[impl]), 5,
                       what="the 'disallowed' line of " + impl)
    assert_still_serving(pair)


# ------------------------------------------------------------------------------------------
# FastCGI protocol surface and malformed records

def fcgi_raw(backend, data, request_id=1, timeout=d.IO_TIMEOUT):
    conn = backend.connect(timeout=timeout)
    try:
        conn.send(data)
        return conn.read(request_id)
    finally:
        conn.close()


def records_of(backend, data, quiet=d.IO_TIMEOUT):
    """All records the server sends back for ``data``, sent before our half-close (until
    EOF or ``quiet`` seconds)."""
    conn = backend.connect(timeout=quiet)
    raw = b''
    try:
        conn.send(data)
        conn.sock.shutdown(socket.SHUT_WR)
        while True:
            try:
                chunk = conn.sock.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not chunk:
                break
            raw += chunk
    finally:
        conn.close()
    out = []
    pos = 0
    while len(raw) - pos >= 8:
        _, kind, rid, length, padding = struct.unpack_from('!BBHHBx', raw, pos)
        out.append((kind, rid, raw[pos + 8:pos + 8 + length]))
        pos += 8 + length + padding
    return out


@over('fcgi')
@differs('fastcgi-get-values')
def test_fcgi_get_values(pair):
    names = [(f.FCGI_MAX_CONNS, ''), (f.FCGI_MAX_REQS, ''), (f.FCGI_MPXS_CONNS, '')]
    wire = f.encode_record(f.FCGI_GET_VALUES, 0, f.encode_params(names))
    results = on_both(pair, lambda b: records_of(b, wire))
    flup, ours = deviates('fastcgi-get-values', results)
    assert flup == [(f.FCGI_GET_VALUES_RESULT, 0, b'')]
    assert [(kind, rid) for kind, rid, _ in ours] == [(f.FCGI_GET_VALUES_RESULT, 0)]
    values = dict(f.decode_params(ours[0][2]))
    assert set(values) == {f.FCGI_MAX_CONNS, f.FCGI_MAX_REQS, f.FCGI_MPXS_CONNS}
    assert values[f.FCGI_MPXS_CONNS] == '0'
    if mode_of(pair) == 'single':
        assert values[f.FCGI_MAX_CONNS] == values[f.FCGI_MAX_REQS] == '1'
    assert_still_serving(pair)


@over('fcgi')
@differs('fastcgi-abort-request')
def test_fcgi_abort_request_mid_body(pair):
    """ABORT_REQUEST while the app reads a body the web server will not finish (1 MiB
    declared, 64 KiB sent): flup waits for STDIN that never comes; flupfast answers
    END_REQUEST(REQUEST_COMPLETE) at once, with no output, and serves the next request on the
    KEEP_CONN connection."""
    head, _ = fcgi_client.request_bytes('/upload?mode=read', body=b'x', keep_conn=True,
                                        split=True, params={'CONTENT_LENGTH': str(1 << 20)})
    wire = (head + f.encode_record(f.FCGI_STDIN, 1, bytes(65528))
            + f.encode_record(f.FCGI_STDIN, 1, bytes(8)) + f.encode_record(f.FCGI_ABORT_REQUEST, 1))

    def scenario(backend):
        conn = backend.connect(timeout=d.patience(backend))
        try:
            conn.send(wire)
            first = conn.read()
            conn.sock.settimeout(d.IO_TIMEOUT)
            if first == HUNG:
                # Let flup's request end (our EOF ends its read) before the next scenario.
                conn.sock.shutdown(socket.SHUT_WR)
                return first, conn.read() is not HUNG
            return first, conn.request('/', keep_conn=True).body
        finally:
            conn.close()
    flup, ours = deviates('fastcgi-abort-request', on_both(pair, scenario))
    assert flup == (HUNG, True)
    assert ours == (('end', (0, f.FCGI_REQUEST_COMPLETE)), probe.HELLO)


@over('fcgi')
def test_fcgi_unknown_management_record(pair):
    """An unknown type with request id 0: FCGI_UNKNOWN_TYPE, then the connection goes on."""
    wire = f.encode_record(42, 0, b'12345678')
    answer = same(on_both(pair, lambda b: records_of(b, wire)))
    assert answer == [(f.FCGI_UNKNOWN_TYPE, 0, bytes([42]) + bytes(7))]


@over('fcgi')
def test_fcgi_unknown_role_and_second_request(pair):
    """A role not served: END_REQUEST(UNKNOWN_ROLE) without STDOUT. A second BEGIN_REQUEST on
    a non-multiplexed connection: END_REQUEST(CANT_MPX_CONN) for it; the first is served."""
    role = fcgi_client.request_bytes('/', role=f.FCGI_AUTHORIZER)
    same(on_both(pair, lambda b: fcgi_raw(b, role)))
    assert on_both(pair, lambda b: fcgi_raw(b, role))['flup'] == ('end', (0, f.FCGI_UNKNOWN_ROLE))
    # The app reads its body, so the server reads records while request 1 is active.
    begin, rest = fcgi_client.request_bytes('/upload?mode=read', body=b'abc', split=True)
    wire = begin + f.encode_begin_request(2) + rest

    def scenario(backend):
        conn = backend.connect()
        try:
            conn.send(wire)
            return conn.read(2), conn.read(1)
        finally:
            conn.close()
    results = on_both(pair, scenario)
    for refused, served in results.values():
        assert refused == ('end', (0, f.FCGI_CANT_MPX_CONN))
        assert served.status == 200 and served.json()['length'] == 3


@over('fcgi')
@differs('fastcgi-params-split')
def test_fcgi_params_split_across_records(pair):
    """A name-value pair straddling two PARAMS records (allowed: record boundaries carry no
    meaning). flup decodes each record alone and mangles the pair."""
    env = dict(fcgi_client.DEFAULT_PARAMS, REQUEST_URI='/environ', QUERY_STRING='',
               HTTP_X_SPLIT='value-across-records')
    stream = f.encode_params(env.items())
    cut = stream.index(b'value-across') + 5
    wire = (f.encode_begin_request(1) + f.encode_record(f.FCGI_PARAMS, 1, stream[:cut])
            + f.encode_record(f.FCGI_PARAMS, 1, stream[cut:]) + f.encode_record(f.FCGI_PARAMS, 1)
            + f.encode_record(f.FCGI_STDIN, 1))
    results = on_both(pair, lambda b: fcgi_raw(b, wire, timeout=d.patience(b)))
    flup, ours = deviates('fastcgi-params-split', results)
    assert ours.json()['HTTP_X_SPLIT'] == 'value-across-records'
    assert not isinstance(flup, Answer) or flup.status != 200 or (
        flup.json().get('HTTP_X_SPLIT') != 'value-across-records')
    assert_still_serving(pair)


# case -> (bytes, what flup does with them, the fault our log line names or None)
FCGI_MALFORMED = {
    'http-request': (b'GET / HTTP/1.1\r\nHost: x\r\n\r\n', 'closes',
                     'unsupported FastCGI version 71'),
    'bad-version': (bytes([2]) + fcgi_client.request_bytes('/')[1:], 'serves',
                    'unsupported FastCGI version 2'),
    'truncated-header': (fcgi_client.request_bytes('/')[:5], 'closes', None),
    'truncated-params': (fcgi_client.request_bytes('/', split=True)[0][:-12], 'closes', None),
    'params-length-past-record': (f.encode_begin_request(1) + f.encode_record(
        f.FCGI_PARAMS, 1, b'\x04\x7fNAME' + b'v' * 8) + f.encode_record(f.FCGI_PARAMS, 1)
        + f.encode_record(f.FCGI_STDIN, 1), 'serves', 'runs past the end of PARAMS'),
    'stdin-for-unknown-request': (f.encode_record(f.FCGI_STDIN, 7, b'data'), 'closes', None),
}


@over('fcgi')
@pytest.mark.parametrize('case', sorted(FCGI_MALFORMED))
@differs('fastcgi-strict-records')
def test_fcgi_malformed(pair, case):
    """Malformed FastCGI input, then our half-close: flupfast answers nothing, closes with a
    log line naming the fault (a record cut by the peer's close is no fault) and serves on.
    flup closes too, or serves what a strict parser rejects: a record of another version,
    a name-value pair running past its record (the request runs with default params)."""
    data, flup_does, fault = FCGI_MALFORMED[case]
    marks = {impl: backend.mark() for impl, backend in pair.items()}
    results = on_both(pair, lambda b: records_of(b, data))
    ours = results['flupfast']
    assert ours == []
    log = pair['flupfast'].log_since(marks['flupfast'])
    if fault:
        wait_until(lambda: fault in pair['flupfast'].log_since(marks['flupfast']), 5)
        log = pair['flupfast'].log_since(marks['flupfast'])
        assert 'FastCGI protocol error' in log
    assert 'Traceback' not in log
    if flup_does == 'serves':
        flup, _ = deviates('fastcgi-strict-records', results)
        assert (f.FCGI_END_REQUEST, 1, bytes(8)) in flup
    else:
        assert results['flup'] == []
    assert_still_serving(pair)


# ------------------------------------------------------------------------------------------
# SCGI netstrings

def scgi_pairs(*pairs):
    return b''.join(name + b'\0' + value + b'\0' for name, value in pairs)


def netstring(block, length=None):
    return (b'%d' % len(block) if length is None else length) + b':' + block + b','


GOOD = [(b'CONTENT_LENGTH', b'0'), (b'SCGI', b'1'), (b'REQUEST_METHOD', b'GET'),
        (b'REQUEST_URI', b'/'), (b'SCRIPT_NAME', b''), (b'SERVER_NAME', b'localhost'),
        (b'SERVER_PORT', b'80'), (b'SERVER_PROTOCOL', b'HTTP/1.1')]

def check_malformed(pair, data, flup_does, key):
    """Send ``data`` to both, then half-close. flupfast: no answer, exactly one "Protocol
    error" log line and no traceback. flup, by ``flup_does``: 'closes' (no answer either),
    'serves' (answers 200: the difference ``key``) or the name of the exception whose
    traceback it logs. Both serve the next request."""
    marks = {impl: backend.mark() for impl, backend in pair.items()}
    results = on_both(pair, lambda b: b.exchange(data))
    flup, ours = results['flup'], results['flupfast']
    assert ours in NO_ANSWER
    wait_until(lambda: 'Protocol error' in pair['flupfast'].log_since(marks['flupfast']), 5)
    log = pair['flupfast'].log_since(marks['flupfast'])
    assert log.count('Protocol error') == 1 and 'Traceback' not in log
    if flup_does == 'serves':
        deviates(key, results)
        assert isinstance(flup, Answer) and flup.status == 200
    else:
        assert flup in NO_ANSWER
    if flup_does not in ('serves', 'closes'):
        wait_until(lambda: flup_does in pair['flup'].log_since(marks['flup']), 5)
    assert_still_serving(pair)


# case -> (bytes, what flup does with them)
SCGI_MALFORMED = {
    'http-request': (b'GET / HTTP/1.1\r\nHost: x\r\n\r\n', 'closes'),
    'non-digit-length': (netstring(scgi_pairs(*GOOD), b'2x'), 'closes'),
    'missing-comma': (netstring(scgi_pairs(*GOOD))[:-1] + b';', 'closes'),
    'truncated-header': (netstring(scgi_pairs(*GOOD))[:20], 'closes'),
    'no-content-length': (netstring(scgi_pairs(*GOOD[1:])), 'closes'),
    'bad-content-length': (netstring(scgi_pairs((b'CONTENT_LENGTH', b'x'), *GOOD[1:])),
                           'closes'),
    'odd-pair-count': (netstring(scgi_pairs(*GOOD) + b'DANGLING\0'), 'closes'),
    'leading-zero-length': (netstring(scgi_pairs(*GOOD), b'0%d' % len(scgi_pairs(*GOOD))),
                            'serves'),
    'signed-length': (netstring(scgi_pairs(*GOOD), b'+%d' % len(scgi_pairs(*GOOD))), 'serves'),
    'content-length-not-first': (netstring(scgi_pairs(*(GOOD[1:] + GOOD[:1]))), 'serves'),
    'scgi-version-2': (netstring(scgi_pairs(GOOD[0], (b'SCGI', b'2'), *GOOD[2:])), 'serves'),
    # A repeated CONTENT_LENGTH that disagrees with the first: flup takes the last, which
    # is not the length that framed the body.
    'conflicting-content-length': (netstring(scgi_pairs(*GOOD) + scgi_pairs(
        (b'CONTENT_LENGTH', b'3'))), 'serves'),
    # flup tries recv(99999999999): a MemoryError traceback in its log.
    'huge-length': (b'99999999999:', 'MemoryError'),
    # 2**63: past any body a web server can send (AJP13 and the FastCGI servers' limit too).
    'content-length-over-2-63': (netstring(scgi_pairs((b'CONTENT_LENGTH', b'%d' % 2 ** 63),
                                                      *GOOD[1:])), 'serves'),
}


@over('scgi')
def test_scgi_repeated_names(pair):
    """nginx before 1.23 sends one pair per header line: two Cookie and two X-Forwarded-For
    lines arrive as repeated HTTP_COOKIE and HTTP_X_FORWARDED_FOR. Both keep the last value
    and give the app the same environ."""
    repeats = [('HTTP_COOKIE', 'a=1'), ('HTTP_X_FORWARDED_FOR', '10.0.0.1'),
               ('HTTP_COOKIE', 'b=2'), ('HTTP_X_FORWARDED_FOR', '10.0.0.2')]
    results = on_both(pair, lambda b: environ_of(b, extra=repeats))
    env = same(results)
    assert (env['HTTP_COOKIE'], env['HTTP_X_FORWARDED_FOR']) == ('b=2', '10.0.0.2')
    assert_still_serving(pair)


@over('scgi')
def test_scgi_without_scgi_header(pair):
    """nginx sends SCGI=1 only through the stock scgi_params: a site's own scgi_param list
    may lack it. Both serve the request with the same environ."""
    pairs = [(n, b'/environ' if n == b'REQUEST_URI' else v) for n, v in GOOD if n != b'SCGI']
    results = on_both(pair, lambda b: b.exchange(netstring(scgi_pairs(*pairs))))
    env = same({impl: comparable(answer.json(), pair[impl])
                for impl, answer in results.items()})
    assert 'SCGI' not in env
    assert (env['REQUEST_METHOD'], env['PATH_INFO']) == ('GET', '/environ')
    assert_still_serving(pair)


@over('scgi')
@pytest.mark.parametrize('case', sorted(SCGI_MALFORMED))
@differs('scgi-netstring-strict')
def test_scgi_malformed(pair, case):
    """Bad netstrings and headers, then our half-close: flupfast answers nothing, logs one
    line naming the fault and serves on. flup closes too, crashes the connection on a huge
    length, or serves what a strict parser rejects (leading zeros, signs, any header order,
    a second CONTENT_LENGTH that contradicts the first, an SCGI version other than 1)."""
    check_malformed(pair, *SCGI_MALFORMED[case], key='scgi-netstring-strict')


# ------------------------------------------------------------------------------------------
# AJP13 packets

def ajp_conversation(backend, *steps):
    """Send each (wire, rest) on one connection; the list of outcomes, stopping at the first
    that is not an Answer."""
    conn = backend.connect(timeout=d.patience(backend))
    out = []
    try:
        for wire, rest in steps:
            try:
                outcome = conn.exchange(wire, rest)
            except (BrokenPipeError, ConnectionResetError):
                outcome = RESET
            out.append(outcome)
            if not isinstance(outcome, Answer) and not isinstance(outcome, tuple):
                break
    finally:
        conn.close()
    return out


@over('ajp')
def test_ajp_cping(pair):
    """CPING is answered with CPONG, then a request is served on the same connection."""
    outcome = same(on_both(pair, lambda b: ajp_conversation(
        b, (ajp_client.CPING, b''), (ajp_client.request_bytes('GET', '/'), b''))))
    assert outcome[1].body == probe.HELLO


@over('ajp')
@differs('ajp-secret-stored-method', 'ajp-method-baseline-control')
@pytest.mark.parametrize('case', ['patch', 'secret', 'baseline-control'])
def test_ajp_method_and_attributes(pair, case):
    """PATCH (method 0xFF + stored_method), the secret attribute (mod_proxy_ajp secret=) and
    method code 26: flup closes the connection on the first two and names the third
    BASELINE_CONTROL."""
    if case == 'patch':
        wire = ajp_client.request_bytes('PATCH', '/environ')
    elif case == 'secret':
        wire = ajp_client.request_bytes('GET', '/environ', attributes=[('secret', 's3cret')])
    else:
        wire = ajp_client.request_bytes(26, '/environ')
    results = on_both(pair, lambda b: ajp_conversation(b, (wire, b''))[0])
    key = 'ajp-method-baseline-control' if case == 'baseline-control' else (
        'ajp-secret-stored-method')
    flup, ours = deviates(key, results)
    env = ours.json()
    if case == 'baseline-control':
        assert flup.json()['REQUEST_METHOD'] == 'BASELINE_CONTROL'
        assert env['REQUEST_METHOD'] == 'BASELINE-CONTROL'
    else:
        assert flup in NO_ANSWER
        assert env['REQUEST_METHOD'] == ('PATCH' if case == 'patch' else 'GET')
        assert 's3cret' not in ours.body.decode()
    assert_still_serving(pair)


@over('ajp')
@differs('ajp-chunked-body')
def test_ajp_chunked_body(pair):
    """A body without Content-Length (chunked upload): we pull it with GET_BODY_CHUNK until
    the empty chunk; flup takes the body packets for new requests and drops the connection."""
    data = probe.pattern_bytes(20000)
    wire = ajp_client.packet(ajp_client.forward_request(
        'POST', '/upload', headers=[('Transfer-Encoding', 'chunked')],
        attributes=[('query_string', 'mode=read')])) + ajp_client.body_packet(data[:8000])

    def scenario(backend):
        conn = backend.connect(timeout=d.patience(backend))
        try:
            conn.send(wire)
            # Our side answers GET_BODY_CHUNKs with the rest, then the empty chunk.
            answer = conn.exchange(b'', data[8000:])
            return answer
        except (BrokenPipeError, ConnectionResetError):
            return RESET
        finally:
            conn.close()
    results = on_both(pair, scenario)
    flup, ours = deviates('ajp-chunked-body', results)
    assert not isinstance(flup, Answer) or flup.json()['length'] != len(data)
    assert ours.json()['sha256'] == hashlib.sha256(data).hexdigest()
    assert_still_serving(pair)


@over('ajp')
@differs('ajp-repeated-headers')
def test_ajp_repeated_headers(pair):
    wire = ajp_client.request_bytes('GET', '/environ', headers=[('X-Dup', 'one'),
                                                                ('X-Dup', 'two')])
    results = on_both(pair, lambda b: ajp_conversation(b, (wire, b''))[0].json()['HTTP_X_DUP'])
    flup, ours = deviates('ajp-repeated-headers', results)
    assert (flup, ours) == ('two', 'one, two')


@over('ajp')
@differs('ajp-null-strings')
def test_ajp_null_strings(pair):
    """A header and an attribute sent as AJP null strings (length 0xFFFF): flup puts them in
    environ as ''; flupfast leaves them out (the five fixed fields stay '' in both)."""
    wire = ajp_client.request_bytes('GET', '/environ', headers=[('X-Null', None)],
                                    attributes=[('remote_user', None)])
    results = on_both(pair, lambda b: comparable(ajp_conversation(b, (wire, b''))[0].json(), b))
    flup, ours = deviates('ajp-null-strings', results)
    assert (flup.pop('HTTP_X_NULL'), flup.pop('REMOTE_USER')) == ('', '')
    assert flup == ours and ours['REMOTE_HOST'] == ''


# case -> (bytes, what flup does with them)
AJP_MALFORMED = {
    'http-request': (b'GET / HTTP/1.1\r\nHost: x\r\n\r\n', 'closes'),
    'unknown-packet-type': (ajp_client.packet(b'\x63'), 'closes'),
    'truncated-packet': (ajp_client.request_bytes('GET', '/')[:-3], 'closes'),
    'truncated-forward-request': (ajp_client.packet(ajp_client.forward_request('GET', '/')[:9]),
                                  'closes'),
    # flup indexes its method table with the code: an IndexError traceback in its log.
    'method-out-of-table': (ajp_client.request_bytes(99, '/'), 'IndexError'),
    'content-length-signed': (ajp_client.packet(ajp_client.forward_request(
        'POST', '/environ', headers=[('Content-Length', '+5')])) + ajp_client.body_packet(
        b'hello'), 'serves'),
    'bytes-after-attributes': (ajp_client.packet(ajp_client.forward_request(
        'GET', '/environ') + b'junk'), 'serves'),
}


@over('ajp')
@pytest.mark.parametrize('case', sorted(AJP_MALFORMED))
@differs('ajp-strict-packets')
def test_ajp_malformed(pair, case):
    """Bad AJP packets, then our half-close: flupfast closes the connection with one log line
    naming the fault and serves on; flup closes too, with a traceback for a method code past
    its table, or serves what a strict parser rejects."""
    check_malformed(pair, *AJP_MALFORMED[case], key='ajp-strict-packets')


@over('ajp')
@differs('ajp-upload-speed')
def test_ajp_upload_pulls(pair):
    """An upload past the first chunk: the GET_BODY_CHUNK sizes asked for."""
    body = probe.pattern_bytes(100000)
    results = on_both(pair, lambda b: b.request('/upload?mode=read', method='POST', body=body))
    for answer in results.values():
        assert answer.json()['sha256'] == hashlib.sha256(body).hexdigest()
    asked = {impl: answer.extra['get_body'] for impl, answer in results.items()}
    flup, ours = deviates('ajp-upload-speed', asked)
    assert max(flup) == 0xFFFF  # more than a packet can carry (the web server sends less)
    assert max(ours) <= 0xFFFF - 2


# ------------------------------------------------------------------------------------------
# Signals: what run() returns and how each server stops. Each batch starts its own servers,
# all side by side, signals them together and records, for each, when it exited: on the
# signal, after the peer closed its kept connection, after a request woke it, or never (then
# it is killed).

ON_SIGNAL, AFTER_PEER_CLOSED, AFTER_REQUEST, NEVER = (
    'on the signal', 'after the peer closed', 'after a request', 'never (killed)')

SIGNAL_BATCHES = {
    # name: (signal, kept connection?, the (protocol, mode)s it covers)
    'SIGHUP': (signal.SIGHUP, False, d.MATRIX),
    'SIGTERM': (signal.SIGTERM, False, d.MATRIX),
    'SIGINT': (signal.SIGINT, False, [(p, m) for p, m in d.MATRIX if m != 'fork']),
    'SIGTERM-kept-connection': (signal.SIGTERM, True, [(p, m) for p, m in d.MATRIX
                                                       if m != 'fork']),
}


def open_kept_connection(backend):
    """A connection the web server keeps open after a request (FastCGI KEEP_CONN, AJP), or
    for SCGI one that has sent nothing yet."""
    conn = backend.connect()
    if backend.protocol == 'fcgi':
        assert conn.request('/', keep_conn=True).body == probe.HELLO
    elif backend.protocol == 'ajp':
        assert conn.request('/').body == probe.HELLO
    return conn


def run_returned(log):
    lines = [line for line in log.splitlines() if line.startswith('flup_launcher: run() returned')]
    return lines[-1].rsplit(' ', 1)[1] if lines else None


@pytest.fixture(scope='module', params=sorted(SIGNAL_BATCHES))
def signalled(request, tmp_path_factory):
    """{(impl, protocol, mode): (exit stage, what run() returned, exit status, log)}."""
    signum, kept, cases = SIGNAL_BATCHES[request.param]
    log_dir = tmp_path_factory.mktemp(request.param)
    backends = {}
    for protocol, mode in cases:
        for impl in d.IMPLS:
            key = (impl, protocol, d.flup_mode(protocol, mode) if impl == 'flup' else mode)
            if key not in backends:
                backends[key] = d.Backend(impl, protocol, mode, log_dir)
    outcomes = {}
    conns = {}
    try:
        for backend in backends.values():
            backend.wait_ready()
        if kept:
            conns = {key: open_kept_connection(b) for key, b in backends.items()}
        for backend in backends.values():
            if backend.mode == 'fork':
                # Children are up before the signal; flup's whole pool (maxSpare), or its
                # parent may still be spawning, and then checks its flag and stops at once.
                up = d.FORK_KWARGS['maxSpare'] if backend.impl == 'flup' else 1
                wait_at_most(lambda: len(backend.children()) >= up, d.STOP_GRACE)
            os.kill(backend.pid, signum)
        ours = [b for b in backends.values() if b.impl == 'flupfast']
        wait_at_most(lambda: not any(b.alive() for b in ours), d.STOP_GRACE)
        # flup polls its flags once a second: it gets as long as we took, and 3 s more.
        wait_at_most(lambda: not any(b.alive() for b in backends.values()), 3.0)
        stages = [(ON_SIGNAL, None)]
        if kept:
            stages.append((AFTER_PEER_CLOSED, lambda key, b: conns[key].close()))
        stages.append((AFTER_REQUEST, lambda key, b: b.poke()))
        pending = dict(backends)
        for stage, action in stages:
            if action:
                for key, backend in pending.items():
                    action(key, backend)
                wait_at_most(lambda: not any(b.alive() for b in pending.values()), 3.0)
            for key, backend in list(pending.items()):
                if not backend.alive():
                    outcomes[key] = (stage, backend.server.proc.returncode)
                    del pending[key]
        for key, backend in pending.items():
            outcomes[key] = (NEVER, None)
    finally:
        for conn in conns.values():
            conn.close()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda b: b.stop(), backends.values()))
    return {key: outcome + (run_returned(backends[key].log()), backends[key].log())
            for key, outcome in outcomes.items()}


# flup's stage where it is not ON_SIGNAL, by (batch, protocol, flup's mode).
FLUP_LATE = {
    ('SIGHUP', 'fcgi', 'fork'): AFTER_REQUEST,
    ('SIGHUP', 'scgi', 'fork'): AFTER_REQUEST,
    ('SIGHUP', 'ajp', 'fork'): AFTER_REQUEST,
    ('SIGTERM', 'fcgi', 'fork'): AFTER_REQUEST,
    ('SIGTERM', 'scgi', 'fork'): AFTER_REQUEST,
    ('SIGTERM', 'ajp', 'fork'): AFTER_REQUEST,
    ('SIGTERM-kept-connection', 'fcgi', 'thread'): AFTER_PEER_CLOSED,
    ('SIGTERM-kept-connection', 'fcgi', 'single'): AFTER_PEER_CLOSED,
    ('SIGTERM-kept-connection', 'scgi', 'thread'): AFTER_PEER_CLOSED,
}


@pytest.mark.parametrize('protocol, mode', d.MATRIX, ids=['%s-%s' % pm for pm in d.MATRIX])
@differs('prefork-signals', 'single-mode-stop-idle', 'threaded-stop-kept-connection')
def test_signals(signalled, request, protocol, mode):
    """SIGHUP: run() returns True; SIGINT/SIGTERM: False. flupfast acts on the signal at
    once in every mode, also with a kept connection open. flup's prefork parent ignores
    signals while idle (until a request wakes it); its threaded FastCGI and SCGI servers and
    its FastCGI single mode wait for a kept connection until the web server closes it."""
    batch = request.node.callspec.params['signalled']
    signum, kept, cases = SIGNAL_BATCHES[batch]
    if (protocol, mode) not in cases:
        pytest.skip('%s is not sent in %s mode' % (batch, mode))
    expected_ret = 'True' if signum == signal.SIGHUP else 'False'
    stage, status, ret, log = signalled['flupfast', protocol, mode]
    assert (stage, status, ret) == (ON_SIGNAL, 0, expected_ret), log[-3000:]
    assert 'Traceback' not in log
    # flup's side is a record, not our contract: when it stops depends on where its loop was
    # when the signal came (a loaded machine moves that), so a late flup may also stop on the
    # signal or, slower than the stages' waits, not at all; what it returns is still checked.
    flup_run_mode = d.flup_mode(protocol, mode)
    stage, status, ret, log = signalled['flup', protocol, flup_run_mode]
    late = FLUP_LATE.get((batch, protocol, flup_run_mode))
    assert stage in ((ON_SIGNAL, late, NEVER) if late else (ON_SIGNAL,)), log[-3000:]
    if stage != NEVER:
        assert (status, ret) == (0, expected_ret), log[-3000:]


# ------------------------------------------------------------------------------------------
# Prefork pools (the shared FastCGI fork pair: minSpare 1, maxSpare 2, maxChildren 4)

@pytest.mark.parametrize('pair', [('fcgi', 'fork')], indirect=True, ids=['fcgi-fork'])
@differs('prefork-pool-growth')
def test_prefork_pool_grows_under_load(pair):
    """Four slow requests at once: flupfast's pool grows to maxChildren=4 and serves them
    side by side; flup's stays at maxSpare=2 (the rest wait their turn). The pool is
    protocol-blind, so FastCGI stands for all three."""
    def scenario(backend):
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = [pool.submit(backend.request, '/sleep?ms=2500', timeout=30)
                       for _ in range(4)]
            most = 0  # children seen at once while the requests run
            while most < 4 and not all(answer.done() for answer in answers):
                most = max(most, len(backend.children()))
                time.sleep(0.05)
            bodies = [answer.result().body for answer in answers]
        return most, bodies
    results = on_both(pair, scenario)
    (flup_most, flup_bodies), (ours_most, ours_bodies) = deviates('prefork-pool-growth', results)
    assert flup_bodies == ours_bodies == [b'slept 2500\n'] * 4
    assert (flup_most, ours_most) == (2, 4)


@differs('prefork-max-requests')
def test_prefork_max_requests_counts_requests(tmp_path):
    """maxRequests=2 with one child: three KEEP_CONN requests on one connection. flup counts
    the connection once and serves all three from one child; flupfast closes the connection
    after two, and a fresh connection is served by a new child."""
    one_child = {'minSpare': 1, 'maxSpare': 1, 'maxChildren': 1, 'maxRequests': 2}
    pair = d.start_pair('fcgi', 'fork', tmp_path, kwargs=one_child)

    def scenario(backend):
        conn = backend.connect()
        try:
            seen = []
            for i in range(3):
                answer = conn.request('/environ', keep_conn=True, request_id=i + 1)
                seen.append(answer.json()['probe.pid'] if isinstance(answer, Answer) else answer)
        finally:
            conn.close()
        later = backend.request('/environ').json()['probe.pid']
        return seen, later
    try:
        results = on_both(pair, scenario)
    finally:
        for backend in pair.values():
            backend.stop()
    (flup_seen, _), (ours_seen, ours_later) = deviates('prefork-max-requests', results)
    assert flup_seen[0] == flup_seen[1] == flup_seen[2]
    assert ours_seen[0] == ours_seen[1] and ours_seen[2] in (CLOSED, RESET)
    assert ours_later != ours_seen[0]


# ------------------------------------------------------------------------------------------
# Constructor keyword arguments

KWARGS_CASES = [
    ('fcgi', {'timeout': 1}), ('fcgi', {'bogus': 1}), ('fcgi', {'maxThreads': 4}),
    ('fcgi_fork', {'minSpare': 0}), ('fcgi_fork', {'minSpare': 3, 'maxSpare': 2}),
    ('fcgi_fork', {'sockTimeout': -1}), ('fcgi_fork', {'sockTimeout': 'x'}),
    ('fcgi_fork', {'bogus': 1}), ('fcgi_fork', {'maxThreads': 4}),
    ('fcgi_fork', {'multithreaded': True, 'timeout': 5}),
    ('fcgi_single', {'bogus': 1}), ('fcgi_single', {'timeout': 1}),
    ('scgi', {'timeout': 1}), ('scgi', {'maxChildren': 2}), ('scgi_fork', {'minSpare': 0}),
    ('scgi_fork', {'maxRequests': 3}), ('ajp', {'umask': 0o22}), ('ajp', {'maxThreads': 2}),
    ('ajp_fork', {'maxSpare': 0}), ('ajp_fork', {'umask': 0o22}),
]

KWARGS_SCRIPT = '''
import importlib, json, sys
package, cases = sys.argv[1], json.loads(sys.argv[2])
out = []
for module, kwargs in cases:
    cls = importlib.import_module('%s.server.%s' % (package, module)).WSGIServer
    try:
        cls(None, **kwargs)
        out.append(None)
    except (TypeError, ValueError) as exc:
        out.append([type(exc).__name__, str(exc)])
print(json.dumps(out))
'''


def constructor_outcomes(impl):
    proc = subprocess.run([sys.executable, '-c', KWARGS_SCRIPT, impl, json.dumps(KWARGS_CASES)],
                          capture_output=True, cwd=d.ROOT, timeout=60,
                          env=dict(os.environ, PYTHONPATH=d.ROOT))
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stdout)


def test_constructor_kwargs_raise_the_same_errors():
    """The same TypeError/ValueError (ValueError with flup's message) for the same keyword
    arguments, and silence where flup accepts them (fcgi_single ignores any)."""
    results = {impl: constructor_outcomes(impl) for impl in d.IMPLS}
    for (module, kwargs), flup, ours in zip(KWARGS_CASES, results['flup'], results['flupfast']):
        what = '%s.WSGIServer(None, **%r)' % (module, kwargs)
        if flup is None or ours is None:
            assert flup == ours, what
        else:
            assert flup[0] == ours[0], (what, flup, ours)
            if flup[0] == 'ValueError':
                assert flup[1] == ours[1], what


# ------------------------------------------------------------------------------------------
# One-shot processes: CGI, the debug page, bind failures

CGI_ENV = {'GATEWAY_INTERFACE': 'CGI/1.1', 'REQUEST_METHOD': 'GET', 'SCRIPT_NAME': '/cgi',
           'PATH_INFO': '/', 'QUERY_STRING': '', 'SERVER_NAME': 'localhost',
           'SERVER_PORT': '80', 'SERVER_PROTOCOL': 'HTTP/1.1'}


@differs('cgi-detection')
def test_fcgi_script_run_as_cgi():
    """A FastCGI script started as plain CGI (stdin is not a socket): flup crashes with
    ENOTSOCK on Python >= 3.8; flupfast answers the request on stdout."""
    results = {impl: d.run_once(impl, ['--protocol', 'fcgi', d.PROBE], env=CGI_ENV)
               for impl in d.IMPLS}
    flup, ours = results['flup'], results['flupfast']
    assert flup.returncode != 0 and b'OSError' in flup.stderr and not flup.stdout
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.startswith(b'Status: 200 OK\r\n') and ours.stdout.endswith(probe.HELLO)


@differs('debug-page-cgitb')
def test_debug_page_over_cgi():
    """debug=True and an app that raises, in forced CGI mode (one request, no server): a 500
    HTML page with the traceback. flup builds it with cgitb, gone in Python 3.13, where its
    request dies without an answer."""
    env = dict(CGI_ENV, PATH_INFO='/error', FCGI_FORCE_CGI='Y',
               PYTHONWARNINGS='ignore::DeprecationWarning')
    results = {impl: d.run_once(impl, ['--protocol', 'fcgi', '--kwargs', '{"debug": true}',
                                       d.PROBE], env=env) for impl in d.IMPLS}
    ours = results['flupfast']
    assert ours.stdout.startswith(b'Status: 500 Internal Server Error\r\nContent-Type: text/html')
    assert b'RuntimeError' in ours.stdout
    flup = results['flup']
    if sys.version_info >= (3, 13):
        assert b'ModuleNotFoundError' in flup.stderr and not flup.stdout
    else:
        assert flup.stdout.startswith(
            b'Status: 500 Internal Server Error\r\nContent-Type: text/html')
        assert b'RuntimeError' in flup.stdout


@pytest.mark.parametrize('protocol', ['scgi', 'ajp'])
@differs('scgi-ajp-bind-failure')
def test_bind_failure(protocol):
    """The address is taken: flup's log call raises TypeError (e[1] on an OSError);
    flupfast logs flup's intended line and run() returns False."""
    with socket.socket() as taken:
        taken.bind(('127.0.0.1', 0))
        taken.listen(1)
        args = ['--protocol', protocol, '--bind', '127.0.0.1:%d' % taken.getsockname()[1],
                d.PROBE]
        results = {impl: d.run_once(impl, args) for impl in d.IMPLS}
    flup, ours = (results[impl].stderr.decode() for impl in d.IMPLS)
    assert 'TypeError' in flup and 'run() returned' not in flup
    assert 'Failed to bind socket (Address already in use), exiting' in ours
    assert 'run() returned False' in ours and 'Traceback' not in ours


@differs('ajp-ipv6-unix')
def test_ajp_on_a_unix_socket(tmp_path):
    """flup's AJP server binds IPv4 only: a Unix socket path fails; flupfast listens on it."""
    backends = {impl: d.Backend(impl, 'ajp', 'thread', tmp_path,
                                bind=str(tmp_path / ('%s.sock' % impl))) for impl in d.IMPLS}
    try:
        started = {impl: backend.wait_started() for impl, backend in backends.items()}
        assert started == {'flup': False, 'flupfast': True}
        assert 'Traceback' in backends['flup'].log()
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(d.IO_TIMEOUT)
            sock.connect(backends['flupfast'].address)
            sock.sendall(ajp_client.CPING)
            assert sock.recv(16) == b'AB\x00\x01\x09'
    finally:
        for backend in backends.values():
            backend.stop()


@differs('scgi-allowed-servers-ipv6')
def test_scgi_allowed_servers_checks_ipv6(tmp_path):
    """allowedServers=['127.0.0.1'] and a peer on ::1: flup admits it (any address that is
    not a 2-tuple passes), flupfast refuses it with flup's warning."""
    try:
        with socket.socket(socket.AF_INET6) as probe_sock:
            probe_sock.bind(('::1', 0))
    except OSError:
        pytest.skip('no IPv6 loopback')
    pair = {impl: d.Backend(impl, 'scgi', 'thread', tmp_path, bind='::1') for impl in d.IMPLS}
    try:
        for backend in pair.values():
            backend.wait_ready()
        results = on_both(pair, lambda b: b.request('/', timeout=5))
        flup, ours = deviates('scgi-allowed-servers-ipv6', results)
        assert flup.status == 200 and ours in NO_ANSWER
        wait_until(lambda: 'Server connection from ::1 disallowed' in pair['flupfast'].log(), 5)
    finally:
        for backend in pair.values():
            backend.stop()


# ------------------------------------------------------------------------------------------
# The list itself

def test_every_known_difference_is_shown_or_excused():
    """Each compat/known_differences.py key is named by a scenario here (@differs), or is in
    NOT_DIFFERENTIAL with the reason no scenario can show it, or in SHOWN_ELSEWHERE with the
    test file that shows it; keys are unique."""
    keys = [difference.key for difference in DIFFERENCES]
    assert len(keys) == len(set(keys))
    assert set(NOT_DIFFERENTIAL) <= set(keys)
    assert all(reason.strip() for reason in NOT_DIFFERENTIAL.values())
    elsewhere = {key for key in SHOWN_ELSEWHERE if key in keys}
    for key in elsewhere:
        assert os.path.exists(os.path.join(d.ROOT, SHOWN_ELSEWHERE[key])), key
    excuses = [set(d.REFERENCED), set(NOT_DIFFERENTIAL), elsewhere]
    for i, first in enumerate(excuses):
        for second in excuses[i + 1:]:
            assert not first & second, 'counted twice: %s' % sorted(first & second)
    missing = set(keys) - set().union(*excuses)
    assert not missing, 'known differences no scenario shows: %s' % sorted(missing)


@differs('prefork-signals')
def test_prefork_sigusr1(tmp_path):
    """SIGUSR1 asks a prefork server to replace its children. flup's parent crashes with a
    TypeError at its next wake-up (it sends a str to a socket); flupfast replaces the
    children and serves on."""
    pair = d.start_pair('fcgi', 'fork', tmp_path)
    try:
        before = {impl: set(b.children()) for impl, b in pair.items()}
        for backend in pair.values():
            os.kill(backend.pid, signal.SIGUSR1)
        for backend in pair.values():
            backend.poke()  # wakes flup's parent, which then crashes
        flup, ours = pair['flup'], pair['flupfast']
        assert flup.wait_exit(d.STOP_GRACE) is not None
        assert 'TypeError' in flup.log()
        wait_until(lambda: ours.children() and not set(ours.children()) & before['flupfast'],
                   d.STOP_GRACE)
        assert ours.alive() and ours.serves()
    finally:
        for backend in pair.values():
            backend.stop()
