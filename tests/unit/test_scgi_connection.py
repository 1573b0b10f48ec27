"""The SCGI and uwsgi connection, request and gateway over socketpairs, on both backends: what
the two protocols share (one connection, two codecs) runs once per protocol through the
``harness`` fixture: responses byte for byte (flup's for SCGI), wsgi.input bounded by
CONTENT_LENGTH, sendfile for file_wrapper, PATH_INFO, the 500 page, and every kind of bad input
(a clear log line, the connection closed, the next one served). SCGI only: scriptName rules,
allowedServers, the header netstring; uwsgi only: test_uwsgi_connection.py.
"""
import gzip
import hashlib
import io
import logging
import re
import socket
import tempfile
import threading

import pytest

from flupfast import connection as connection_module
from flupfast.gateway import ERROR_BODY
from flupfast.protocols.uwsgi import encode_request as uwsgi_request
from flupfast.server import NoDefault, scgi_base
from tests.scgi_client import encode_request, read_all, request_bytes
from tests.unit.connection_harness import backend_fixture, echo, hello, read_until_reset
from tests.unit.scgi_harness import SCGIHarness as Harness
from tests.unit.scgi_harness import environ_app, protocol_fixture


use_backend = backend_fixture(*Harness.twins)
harness = protocol_fixture()


def test_hello_is_flups_response_byte_for_byte_and_the_connection_closes(harness):
    """SCGI: flup's response; uwsgi: the same after an HTTP status line."""
    h = harness(hello)
    raw = h.raw(h.request_bytes('/'), shut=False)
    assert raw == (h.head + b'200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\n'
                   b'Hello world!\n')
    h.join()
    assert h.served == [1]


def test_environ(harness):
    """uwsgi's environ is SCGI's, without the SCGI variable nginx's uwsgi_params do not send."""
    h = harness(environ_app)
    _, _, body = h.request('/a/b?x=1', extra=[('HTTPS', 'on')])
    env = eval(body)
    assert env == {'PATH_INFO': '/a/b', 'QUERY_STRING': 'x=1', 'SCRIPT_NAME': '',
                   'REQUEST_URI': '/a/b?x=1', 'REQUEST_METHOD': 'GET', 'CONTENT_LENGTH': '0',
                   'SCGI': '1' if harness is Harness else None, 'wsgi.url_scheme': 'https',
                   'wsgi.multithread': True, 'wsgi.multiprocess': False,
                   'wsgi.run_once': False, 'errors is stderr': True, 'file_wrapper': True}


@pytest.mark.parametrize('size', [0, 1, 65536, 3 << 20])
def test_upload_is_read_whole_and_exactly(harness, size):
    data = bytes(range(256)) * (size // 256) + b'x' * (size % 256)
    h = harness(echo)
    status, _, body = h.request('/', method='POST', body=data)
    assert status == b'200 OK'
    assert body == hashlib.sha256(data).hexdigest().encode() + b' %d' % size


@pytest.mark.parametrize('reader', ['read', 'readline', 'iter', 'read_more'])
def test_input_ends_at_content_length_while_the_socket_stays_open(harness, reader):
    # flup hands the app the socket: here each reader would wait for the web server to
    # give up, because the last line has no newline and the socket is not closed.
    def app(environ, start_response):
        stream = environ['wsgi.input']
        if reader == 'read':
            data = stream.read()
        elif reader == 'readline':
            lines = []
            while True:
                line = stream.readline()
                if not line:
                    break
                lines.append(line)
            data = b'|'.join(lines)
        elif reader == 'iter':
            data = b'|'.join(stream)
        else:
            data = stream.read(1000) + stream.read(5)
        start_response('200 OK', [])
        return [data]
    h = harness(app)
    _, _, body = h.request('/', method='POST', body=b'one\ntwo\nno newline')
    expected = {'read': b'one\ntwo\nno newline', 'read_more': b'one\ntwo\nno newline',
                'readline': b'one\n|two\n|no newline', 'iter': b'one\n|two\n|no newline'}
    assert body == expected[reader]
    h.join()


@pytest.mark.parametrize('arrival', ['with_header', 'after_the_app_reads'])
@pytest.mark.parametrize('reader', ['read', 'readline', 'read_sized'])
def test_input_never_reads_past_content_length_when_more_bytes_follow(harness, arrival,
                                                                     reader):
    # A web server (or a confused one) may send bytes beyond CONTENT_LENGTH: the app reads
    # exactly CONTENT_LENGTH bytes, whether the extra came in the header's receive or in the
    # receive the app's read makes. (Extra bytes left unread in the kernel make the close a
    # reset, which may cost the peer the response: what the app read is recorded instead.)
    reading = threading.Event()
    seen = []

    def app(environ, start_response):
        stream = environ['wsgi.input']
        reading.set()
        if reader == 'read':
            seen.append(stream.read())
        elif reader == 'readline':
            seen.extend(iter(stream.readline, b''))
        else:
            seen.extend([stream.read(3), stream.read(100), stream.read(100)])
        start_response('200 OK', [])
        return [b'done']
    h = harness(app)
    wire = harness.request_bytes('/', method='POST', body=b'he\nllo')
    assert wire.endswith(b'he\nllo')
    with h.connect() as sock:
        if arrival == 'with_header':
            sock.sendall(wire + b'EXTRA\nMORE')
        else:
            sock.sendall(wire[:-6])
            assert reading.wait(10)
            sock.sendall(wire[-6:] + b'EXTRA\nMORE')
        try:
            read_all(sock)
        except ConnectionResetError:
            pass
    h.join()
    assert seen == {'read': [b'he\nllo'], 'readline': [b'he\n', b'llo'],
                    'read_sized': [b'he\n', b'llo', b'']}[reader]


def test_a_result_of_two_items_arrives_whole_without_a_content_length(harness):
    def app(environ, start_response):
        start_response('200 OK', [('content-type', 'text/plain')])
        return [b'abc', b'def']
    raw = harness(app).raw(harness.request_bytes('/'), shut=False)
    assert raw == harness.head + b'200 OK\r\ncontent-type: text/plain\r\n\r\nabcdef'


def test_body_split_into_many_sends(harness):
    h = harness(echo)
    wire = harness.request_bytes('/', method='POST', body=b'abc' * 1000)
    with h.connect() as sock:
        for i in range(0, len(wire), 7):
            sock.sendall(wire[i:i + 7])
        _, _, body = harness.parse(read_all(sock))
    assert body.endswith(b' 3000')


def test_unread_body_does_not_destroy_the_response(harness):
    # A 4 MiB body the app never reads, over TCP (a socketpair loses nothing on close). A plain
    # close with unread bytes in the receive queue sends a reset and drops what of the response
    # is still in our send queue. So the client's receive buffer is kept small, the response
    # larger than it, and the client reads only after the server's connection has ended: only
    # the lingering close (drain until the peer's FIN, then close) gets the response out whole.
    response = b'r' * (192 << 10)

    def app(environ, start_response):
        start_response('200 OK', [])
        return [response]
    h = harness(app)
    with socket.create_server(('127.0.0.1', 0)) as listener:
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 10)
        client.settimeout(10)
        client.connect(listener.getsockname())
        ours, _ = listener.accept()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 512 << 10)  # the response fits
    conn = harness.connection_class(ours, '', h.server, None)
    served = threading.Thread(target=conn.run, daemon=True)
    served.start()
    with client:
        sender = threading.Thread(target=harness._send, daemon=True,
                                  args=(client, harness.request_bytes('/', method='POST',
                                                              body=b'z' * (4 << 20)), True))
        sender.start()
        served.join(10)
        assert not served.is_alive(), 'connection thread hung'
        sender.join(10)
        try:
            raw = read_all(client)
        except ConnectionResetError:
            raw = b'reset'
    assert raw.endswith(response) and raw.startswith(harness.head + b'200 OK\r\n')


def test_client_gone_mid_body_is_one_warning_and_no_traceback(harness, caplog):
    h = harness(echo)
    wire = harness.request_bytes('/', method='POST', body=b'x' * 100, content_length=1000)
    with caplog.at_level(logging.DEBUG, logger=harness.logger):
        raw = h.raw(wire, shut=True)
        h.join()
    assert raw == b''
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert 'still to come' in warnings[0].getMessage()
    assert warnings[0].exc_info is None


def test_request_and_its_time_are_logged_as_flup_does(harness, caplog):
    h = harness(hello)
    with caplog.at_level(logging.DEBUG, logger=harness.logger):
        h.request('/app/x', script_name='/app', path_info='/x')
        h.join()
    lines = [r.getMessage() for r in caplog.records if r.name == harness.logger]
    assert lines[0] == 'GET /app/x'
    assert re.fullmatch(r'GET /app/x done \(\d+\.\d{3} secs\)', lines[-1]), lines


@pytest.mark.parametrize('uri_keys, shown', [
    ((('REQUEST_URI', '/up?q'), ('PATH_INFO', '/p')), '/up?q'),
    ((('PATH_INFO', '/p'),), '/p'),  # no REQUEST_URI: the path
    ((), ''),
], ids=['request-uri', 'path-info', 'neither'])
def test_client_gone_warning_names_the_request(use_backend, caplog, uri_keys, shown):
    pairs = [('CONTENT_LENGTH', '1000'), ('SCGI', '1'), ('REQUEST_METHOD', 'POST'),
             ('SERVER_NAME', 'localhost'), ('SERVER_PORT', '80')] + list(uri_keys)
    h = Harness(echo)
    with caplog.at_level(logging.WARNING, logger='scgi-wsgi'):
        h.raw(encode_request(pairs, b'x' * 100), shut=True)
        h.join()
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.startswith('POST %s: ' % shown) and 'still to come' in warning, warning


def test_app_error_gives_flups_500_page(harness, caplog):
    def boom(environ, start_response):
        raise ValueError('boom')
    h = harness(boom)
    with caplog.at_level(logging.ERROR, logger=harness.logger):
        status, headers, body = h.request('/')
    assert status == b'500 Internal Server Error'
    assert headers == [(b'Content-Type', b'text/html')]
    assert body == ERROR_BODY
    assert any(r.getMessage() == 'Exception caught from handler' and r.exc_info
               for r in caplog.records)


def _late(environ, start_response):
    start_response('200 OK', [('Content-Type', 'text/plain')])
    yield b'first'
    raise RuntimeError('late')


@pytest.mark.parametrize('tcp', [True, False], ids=['tcp', 'unix'])
def test_error_after_the_first_chunk(harness, caplog, tcp):
    """SCGI (and uwsgi) ends at EOF: over TCP the failed response ends with a reset, which nginx and
    Apache report as a failed backend; over a Unix socket nothing can say it, the response
    ends at EOF as in flup (``truncated-response-signalled``). The traceback is logged once."""
    h = harness(_late)
    with caplog.at_level(logging.ERROR, logger=harness.logger):
        with h.connect(tcp=tcp) as ours:
            ours.sendall(harness.request_bytes('/'))
            received, reset = read_until_reset(ours)
        h.join()
    outcome = 'reset' if reset else 'eof'
    assert outcome == ('reset' if tcp else 'eof')
    assert received.endswith(b'first') or (tcp and not received)
    assert [rec.getMessage() for rec in caplog.records if rec.exc_info] == [
        'Exception caught from handler']


def test_error_after_the_first_chunk_reads_the_body_then_resets(harness, monkeypatch):
    """mod_proxy_scgi sends the whole body before it reads the answer: the reset waits until
    the rest of the body is read (a reset meeting the sender mid-send loses the response),
    and no longer: CONTENT_LENGTH, not the drain's time limit, ends the wait."""
    monkeypatch.setattr(connection_module, 'RESET_DRAIN_SECONDS', 60)
    body = bytes(range(256)) * (16 << 10)  # 4 MiB: far more than the socket buffers hold
    h = harness(_late)
    with h.connect(tcp=True) as ours:
        ours.sendall(harness.request_bytes('/', method='POST', body=body))  # fails if reset mid-body
        # The write side stays open, as a web server's does: only the length ends the drain.
        _, reset = read_until_reset(ours)  # a socket timeout here: the drain did not stop
    h.join()
    assert reset


def test_debug_error_page_shows_the_traceback(harness):
    def boom(environ, start_response):
        raise ValueError('visible boom')
    h = harness(boom, debug=True)
    status, _, body = h.request('/')
    assert status == b'500 Internal Server Error'
    assert b'visible boom' in body


def test_write_callable_and_generator(harness):
    def app(environ, start_response):
        write = start_response('200 OK', [('X-A', 'b')])
        write(b'written ')
        yield b'yielded'
    h = harness(app)
    status, headers, body = h.request('/')
    assert (status, headers, body) == (b'200 OK', [(b'X-A', b'b')], b'written yielded')


def test_file_wrapper_uses_sendfile_for_a_regular_file(harness, tmp_path, monkeypatch):
    path = tmp_path / 'big.bin'
    content = bytes(range(256)) * 4096 * 3  # 3 MiB
    path.write_bytes(content)
    sent = []
    real = connection_module.Connection.send_file

    def spy(self, filelike):
        sent.append(filelike.tell())
        return real(self, filelike)
    monkeypatch.setattr(connection_module.Connection, 'send_file', spy)

    def app(environ, start_response):
        f = open(path, 'rb')
        f.seek(100)  # the file is sent from its current position
        start_response('200 OK', [('Content-Length', str(len(content) - 100))])
        return environ['wsgi.file_wrapper'](f, 65536)
    h = harness(app)
    status, headers, body = h.request('/')
    assert status == b'200 OK' and body == content[100:]
    assert sent == [100]


def test_file_wrapper_over_a_non_file_iterates(harness, monkeypatch):
    monkeypatch.setattr(connection_module.Connection, 'send_file',
                        lambda self, f: pytest.fail('sendfile on a BytesIO'))

    def app(environ, start_response):
        start_response('200 OK', [])
        return environ['wsgi.file_wrapper'](io.BytesIO(b'in memory ' * 1000), 100)
    h = harness(app)
    assert h.request('/')[2] == b'in memory ' * 1000


class _Window:
    """A reader of ``length`` bytes of a file from ``start`` (an HTTP Range reader), the rest
    of the file's attributes (fileno, tell) passed through."""

    def __init__(self, f, start, length):
        f.seek(start)
        self._f, self._left = f, length

    def read(self, n=-1):
        n = self._left if n < 0 else min(n, self._left)
        data = self._f.read(n)
        self._left -= len(data)
        return data

    def __getattr__(self, name):
        return getattr(self._f, name)


def _gzip_of(path, data):
    with gzip.open(path, 'wb') as f:
        f.write(data)
    return lambda: gzip.open(path, 'rb')


@pytest.mark.parametrize('case', ['window', 'gzip', 'proc', 'text'])
def test_file_wrapper_sends_what_reading_gives(harness, tmp_path, case):
    """sendfile sends the descriptor's bytes; anything that reads otherwise is iterated
    (found in review: a range reader sent the whole file past its Content-Length, a gzip file
    its compressed bytes, /proc nothing)."""
    path = tmp_path / 'f'
    if case == 'window':
        path.write_bytes(b'PUBLIC--' + b'PRIVATE-' * 4)
        opener, expected = (lambda: _Window(open(path, 'rb'), 0, 8)), b'PUBLIC--'
    elif case == 'gzip':
        expected = b'plain text\n' * 100
        opener = _gzip_of(path, expected)
    elif case == 'proc':
        opener = lambda: open('/proc/self/cmdline', 'rb')  # noqa: E731 (size 0 on stat)
        expected = None
    else:  # a text file behind a wrapper that is no TextIOBase: empty, nothing to send
        opener, expected = (lambda: tempfile.NamedTemporaryFile('w+')), b''

    def app(environ, start_response):
        start_response('200 OK', [])
        return environ['wsgi.file_wrapper'](opener())
    status, _, body = harness(app).request('/')
    assert status == b'200 OK'
    assert body == expected if expected is not None else body


@pytest.mark.parametrize('kw, expected', [
    # nginx's stock scgi_params: no PATH_INFO, no SCRIPT_NAME: flup's raw cut, kept.
    (dict(uri='/environ/a%2Fb/c%20d?q=1'), ('', '/environ/a%2Fb/c%20d')),
    # Apache mod_proxy_scgi: SCRIPT_NAME is the decoded path, no PATH_INFO. flup gives '0d'.
    (dict(uri='/environ/a%2Fb/c%20d', script_name='/environ/a/b/c d'),
     ('/environ/a/b/c d', '')),
    # A site that splits the prefix itself.
    (dict(uri='/app/x%20y', script_name='/app', path_info='/x y'), ('/app', '/x y')),
    (dict(uri='/app/x%20y', script_name='/app'), ('/app', '/x%20y')),
])
def test_path_info(harness, kw, expected):
    h = harness(environ_app)
    env = eval(h.request(**kw)[2])
    assert (env['SCRIPT_NAME'], env['PATH_INFO']) == expected


def test_mismatched_script_name_warns_and_cuts_as_flup(harness, caplog):
    h = harness(environ_app)
    with caplog.at_level(logging.WARNING, logger=harness.logger):
        env = eval(h.request('/abc/def', script_name='/zzzz')[2])
    assert env['PATH_INFO'] == 'def'  # flup's blind cut at len(SCRIPT_NAME)
    assert 'SCRIPT_NAME does not match request URI' in caplog.text


def test_configured_script_name_is_deprecated_and_applied(use_backend):
    h = Harness(environ_app, scriptName='/app')
    with pytest.warns(DeprecationWarning, match='Configured SCRIPT_NAME is deprecated'):
        environ = {'SCRIPT_NAME': '', 'PATH_INFO': '/app/x', 'REQUEST_URI': '/app/x'}
        h.server._sanitizeEnv(environ)
    assert (environ['SCRIPT_NAME'], environ['PATH_INFO']) == ('/app', '/x')


def test_wsgi_script_name_variable(use_backend):
    server = scgi_base.BaseSCGIServer(hello)
    environ = {'WSGI_SCRIPT_NAME': 'None', 'REQUEST_URI': '/a'}
    with pytest.warns(DeprecationWarning, match='WSGI_SCRIPT_NAME'):
        server._sanitizeEnv(environ)
    assert 'PATH_INFO' not in environ and 'SCRIPT_NAME' not in environ  # cgi2scgi: untouched
    environ = {'WSGI_SCRIPT_NAME': '/a', 'SCRIPT_NAME': '/a/b', 'REQUEST_URI': '/a/b'}
    with pytest.warns(DeprecationWarning):
        server._sanitizeEnv(environ)
    assert (environ['SCRIPT_NAME'], environ['PATH_INFO']) == ('/a', '/b')


def test_allowed_servers(caplog):
    base = scgi_base.BaseSCGIServer(hello)
    assert base._allowedServers == ['127.0.0.1']  # the base's default; front ends say None
    with caplog.at_level(logging.WARNING, logger='scgi-wsgi'):
        assert base._isClientAllowed(('127.0.0.1', 5000))
        assert not base._isClientAllowed(('10.1.2.3', 5000))
        # flup admits every IPv6 peer (it only checks 2-tuples); we check the address.
        assert not base._isClientAllowed(('::1', 5000, 0, 0))
        assert base._isClientAllowed('')  # a Unix-socket peer: file permissions decide
    assert caplog.text.count('disallowed') == 2
    assert 'Server connection from 10.1.2.3 disallowed' in caplog.text
    open_base = scgi_base.BaseSCGIServer(hello, allowedServers=None)
    assert open_base._isClientAllowed(('10.1.2.3', 1))


def netstring(data):
    return b'%d:%s,' % (len(data), data)


BAD_REQUESTS = [
    (b'GET / HTTP/1.1\r\nHost: x\r\n\r\n', 'expected digits then ":"'),
    (b'01:x,', 'leading zero'),
    (b'123456789:', 'more than 7 digits'),
    (b'3:abc;', 'not terminated by ","'),
    (b'2000000:', 'exceeds the 1048576-byte cap'),
    (netstring(b'SCGI\x001\x00A\x00b\x00'), 'missing CONTENT_LENGTH'),
    (netstring(b'SCGI\x001\x00CONTENT_LENGTH\x000\x00'), 'is not the first header'),
    (netstring(b'CONTENT_LENGTH\x000\x00SCGI\x002\x00'), 'unsupported SCGI version'),
    (netstring(b'CONTENT_LENGTH\x00x\x00SCGI\x001\x00'), 'invalid CONTENT_LENGTH'),
    (netstring(b'CONTENT_LENGTH\x000\x00SCGI\x001\x00CONTENT_LENGTH\x001\x00'),
     'conflicting CONTENT_LENGTH'),
    (b'10:CONTENT_LE', 'closed inside the header netstring'),
]
UWSGI_BAD_REQUESTS = [
    (b'GET / HTTP/1.1\r\nHost: x\r\n\r\n', 'modifier1 71 is not served (only 0, a WSGI '
                                          'request)'),
    (uwsgi_request({'REQUEST_METHOD': 'GET'}, modifier1=5), 'modifier1 5 is not served'),
    (b'\x00\x04\x00\x00\x01\x00A\x01', 'vars block ends inside the value size'),
    (b'\x00\x03\x00\x00\x05\x00A', 'key of 5 bytes runs past the vars block'),
    (b'\x00\x06\x00\x00\x00\x00\x01\x00xy', 'empty var name'),
    (uwsgi_request({'CONTENT_LENGTH': 'x'}), "invalid CONTENT_LENGTH 'x'"),
    (uwsgi_request([('CONTENT_LENGTH', '0'), ('CONTENT_LENGTH', '1')]),
     'conflicting CONTENT_LENGTH'),
    (b'\x00\x10\x00\x00\x0e\x00CONTENT_', 'closed inside the uwsgi packet header or vars'),
    (b'\x00\x10', 'closed inside the uwsgi packet header or vars'),
]


@pytest.mark.parametrize('harness, data, message',
                         [('scgi',) + bad for bad in BAD_REQUESTS] +
                         [('uwsgi',) + bad for bad in UWSGI_BAD_REQUESTS], indirect=['harness'])
def test_bad_input_is_logged_the_connection_closed_and_the_next_served(harness, caplog, data,
                                                                      message):
    h = harness(hello)
    with caplog.at_level(logging.DEBUG, logger=harness.logger):
        assert h.raw(data, shut=True) == b''  # no response: nothing sensible to answer
        h.join()
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1 and message in errors[0].getMessage(), caplog.text
    assert errors[0].getMessage().startswith('Protocol error')
    assert errors[0].exc_info is None
    assert h.request('/')[2] == b'Hello world!\n'


def test_header_netstring_gathered_over_several_receives(use_backend, monkeypatch, caplog):
    """A netstring split across receives is gathered; cut short, the error says how much came.
    The second part is sent only once the server has tried to decode the first alone."""
    from flupfast import _impl
    tried = threading.Event()
    decode = _impl.decode_scgi_request

    def spy(data):
        decoded = decode(data)
        if decoded is None:
            tried.set()
        return decoded
    monkeypatch.setattr(_impl, 'decode_scgi_request', spy)
    if use_backend.name == 'cy':  # the compiled request path calls its module's own by name
        from flupfast import _speedups
        monkeypatch.setattr(_speedups, 'decode_request', spy)
    wire = request_bytes('/', method='POST', body=b'hello')
    h = Harness(echo)
    with h.connect() as ours:
        ours.sendall(wire[:10])
        assert tried.wait(10)
        ours.sendall(wire[10:])
        assert read_all(ours).endswith(b' 5')
    tried.clear()
    with caplog.at_level(logging.ERROR, logger='scgi-wsgi'):
        with h.connect() as ours:
            ours.sendall(wire[:10])
            assert tried.wait(10)
            ours.shutdown(socket.SHUT_WR)
            assert read_all(ours) == b''
        h.join()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        "Protocol error 'connection closed inside the header netstring (10 bytes received)'"]


def test_a_connection_closed_before_any_byte_is_quiet(harness, caplog):
    h = harness(hello)
    with caplog.at_level(logging.DEBUG, logger=harness.logger):
        assert h.raw(b'', shut=True) == b''
        h.join()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_front_end_signatures_and_defaults():
    import inspect
    from flupfast.server import scgi, scgi_fork, scgi_single
    sig = inspect.signature(scgi.WSGIServer.__init__)
    assert sig.parameters['bindAddress'].default == ('localhost', 4000)
    assert sig.parameters['allowedServers'].default is None
    assert sig.parameters['scriptName'].default is NoDefault
    assert sig.parameters['loggingLevel'].default == logging.INFO
    assert 'timeout' in inspect.signature(scgi_fork.WSGIServer.__init__).parameters
    assert 'timeout' not in sig.parameters
    assert inspect.signature(scgi_single.WSGIServer.__init__).parameters[
        'allowedServers'].default is None
    base = inspect.signature(scgi_base.BaseSCGIServer.__init__)
    assert base.parameters['allowedServers'].default is NoDefault
    assert scgi_base.LoggerName == 'scgi-wsgi'
    with pytest.raises(TypeError):
        scgi.WSGIServer(hello, timeout=3)  # flup's thread pool rejects unknown keywords


def test_a_flup_style_request_takes_any_file_like_output():
    """flup's ``Request(conn, environ, input, output)`` with flup's own kind of output (a
    file-like object, not flupfast's stream): built, and its 500 page written through it."""
    a, b = socket.socketpair()
    try:
        server = scgi_base.BaseSCGIServer(hello)
        conn = scgi_base.Connection(a, '', server)
        out = io.BytesIO()
        req = scgi_base.Request(conn, {'REQUEST_METHOD': 'GET'}, io.BytesIO(), out)
        assert req.status_prefix == b'Status: '
        server.error(req)
        assert out.getvalue().startswith(b'Status: 500 ')
    finally:
        a.close()
        b.close()
