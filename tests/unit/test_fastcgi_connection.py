"""The FastCGI connection, request and gateway over a socketpair, on both backends: the
protocol surface (KEEP_CONN, GET_VALUES, CANT_MPX_CONN, UNKNOWN_TYPE, roles, multiplexing),
flup's WSGI behaviour, and every kind of bad input (a clear log line, no hang, no crash).
"""
import hashlib
import logging
import socket
import struct
import sys
import threading
import time

import pytest

from flupfast.gateway import ERROR_BODY
from flupfast.protocols import fastcgi as f
from flupfast.server import fcgi_base
from tests.fcgi_client import read_response, request_bytes
from tests.unit.connection_harness import (FASTCGI_TWINS, ConnectionHarness, backend_fixture, echo,
                                          environ_app_showing, hello, read_to_eof,
                                          read_until_reset)


use_backend = backend_fixture(*FASTCGI_TWINS)


class Harness(ConnectionHarness):
    """A BaseFCGIServer whose connections run in threads over socketpairs."""

    unix_address = None

    def __init__(self, app, **kwargs):
        super().__init__(fcgi_base.BaseFCGIServer(app, **kwargs))

    @property
    def connection_class(self):
        return self.server._connectionClass

    def request(self, uri='/', **kw):
        with self.connect() as sock:
            sock.sendall(request_bytes(uri, **kw))
            return read_response(sock)


environ_app = environ_app_showing(
    'PATH_INFO', 'QUERY_STRING', 'SCRIPT_NAME', 'REQUEST_URI', 'X', 'SERVER_NAME',
    'wsgi.url_scheme', 'wsgi.multithread', 'wsgi.multiprocess', 'wsgi.run_once')


def test_hello_records_in_order(use_backend):
    harness = Harness(hello)
    resp = harness.request('/')
    assert resp.status == 200
    assert resp.header('Content-Length') == '13'
    assert resp.body == b'Hello world!\n'
    assert resp.end == (0, f.FCGI_REQUEST_COMPLETE)
    # STDOUT data, then the empty STDOUT, then END_REQUEST (spec 5.5; nginx needs it).
    assert resp.records[-2:] == [f.FCGI_STDOUT, f.FCGI_END_REQUEST]
    harness.join()


def test_keep_conn_serves_many_requests_and_closes_without_it(use_backend):
    harness = Harness(echo)
    sock = harness.connect()
    for i in range(5):
        body = b'x' * (i * 70000)
        sock.sendall(request_bytes('/', body=body, keep_conn=True))
        resp = read_response(sock)
        assert resp.body == hashlib.sha256(body).hexdigest().encode() + b' %d' % len(body)
    sock.sendall(request_bytes('/', keep_conn=False))
    assert read_response(sock).end == (0, 0)
    assert sock.recv(10) == b''  # the server closed: no KEEP_CONN
    sock.close()
    harness.join()


def test_unread_body_is_drained_before_reuse(use_backend):
    harness = Harness(hello)  # never reads wsgi.input
    sock = harness.connect()
    sock.sendall(request_bytes('/', body=b'y' * 300000, keep_conn=True))
    assert read_response(sock).status == 200
    sock.sendall(request_bytes('/', keep_conn=True))
    assert read_response(sock).body == b'Hello world!\n'
    sock.close()
    harness.join()


def test_get_values_answers_truthfully(use_backend):
    harness = Harness(hello)
    sock = harness.connect()
    names = f.encode_params([(n, '') for n in ('FCGI_MAX_CONNS', 'FCGI_MAX_REQS',
                                                'FCGI_MPXS_CONNS', 'UNKNOWN')])
    sock.sendall(f.encode_record(f.FCGI_GET_VALUES, 0, names))
    header = sock.recv(8)
    kind, length, padding = header[1], struct.unpack('!H', header[4:6])[0], header[6]
    assert kind == f.FCGI_GET_VALUES_RESULT
    content = b''
    while len(content) < length + padding:
        content += sock.recv(length + padding - len(content))
    values = f.decode_params(content[:length])
    assert values == {'FCGI_MAX_CONNS': str(harness.server.capability['FCGI_MAX_CONNS']),
                      'FCGI_MAX_REQS': str(harness.server.capability['FCGI_MAX_REQS']),
                      'FCGI_MPXS_CONNS': '0'}
    sock.close()
    harness.join()


def test_unknown_management_type_gets_unknown_type(use_backend, caplog):
    harness = Harness(hello)
    sock = harness.connect()
    sock.sendall(f.encode_record(42, 0, b'abc'))
    assert sock.recv(16) == f.encode_unknown_type(42)
    # An unknown type on a request id is ignored (logged) and the connection goes on.
    sock.sendall(f.encode_record(42, 7, b'abc') + request_bytes('/'))
    assert read_response(sock).status == 200
    sock.close()
    harness.join()
    assert 'unknown management record type 42' in caplog.text
    assert 'unknown type 42 for request 7' in caplog.text


def test_second_request_while_active_gets_cant_mpx_conn(use_backend):
    harness = Harness(echo)
    sock = harness.connect()
    first = request_bytes('/', body=b'abc', request_id=1, keep_conn=True)
    stdin_end = f.encode_record(f.FCGI_STDIN, 1)
    assert first.endswith(stdin_end)
    # Request 2 begins while request 1's body is still arriving: the app reads past it.
    sock.sendall(first[:-len(stdin_end)] + f.encode_begin_request(2)
                 + f.encode_stream(f.FCGI_PARAMS, 2, b'') + stdin_end)
    second = read_response(sock, request_id=2)
    assert second.end == (0, f.FCGI_CANT_MPX_CONN)
    assert read_response(sock, request_id=1).body.endswith(b' 3')
    sock.close()
    harness.join()


@pytest.mark.parametrize('bad, message', [
    (b'\x02' + f.encode_record(f.FCGI_STDIN, 1, b'x')[1:], 'unsupported FastCGI version 2'),
    (f.encode_begin_request(1) + f.encode_begin_request(1), 'already active'),
    (f.encode_begin_request(1) + f.encode_stream(f.FCGI_PARAMS, 1, b'\x85\x00'),
     'truncated name-value'),
    (f.encode_begin_request(1) + f.encode_stream(
        f.FCGI_PARAMS, 1, f.encode_params([('BIG', 'x' * (2 << 20))])), 'exceed'),
], ids=['version', 'duplicate-begin', 'truncated-pair', 'params-cap'])
def test_malformed_input_is_logged_and_closed(use_backend, caplog, bad, message):
    harness = Harness(hello)
    sock = harness.connect()
    try:
        sock.sendall(bad)
        assert read_to_eof(sock) == b''
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server closed as soon as it saw the error, while we were still sending
    sock.close()
    harness.join()
    assert 'FastCGI protocol error' in caplog.text and message in caplog.text


def test_truncated_record_then_eof_does_not_hang(use_backend):
    harness = Harness(hello)
    sock = harness.connect()
    sock.sendall(request_bytes('/')[:30])
    sock.shutdown(socket.SHUT_WR)
    assert read_to_eof(sock) == b''
    sock.close()
    harness.join()


def test_records_for_unknown_ids_are_ignored(use_backend):
    harness = Harness(hello)
    sock = harness.connect()
    sock.sendall(f.encode_record(f.FCGI_STDIN, 9, b'zz') + f.encode_record(f.FCGI_ABORT_REQUEST, 9)
                 + request_bytes('/'))
    assert read_response(sock).status == 200
    sock.close()
    harness.join()


def test_client_gone_mid_upload_raises_in_app_and_answers(use_backend):
    seen = []

    def reader(environ, start_response):
        try:
            environ['wsgi.input'].read()
        except ConnectionError as exc:
            seen.append(type(exc).__name__)
            raise
    harness = Harness(reader)
    sock = harness.connect()
    data = request_bytes('/', body=b'z' * 200000)
    sock.sendall(data[:100000])
    sock.shutdown(socket.SHUT_WR)  # the web server gave up mid-body
    resp = read_response(sock)
    assert seen == ['ClientDisconnected']
    assert resp.status == 500 and resp.body == ERROR_BODY
    assert b'ClientDisconnected' in resp.stderr
    sock.close()
    harness.join()


def test_app_raising_before_start_response_gets_flups_500_page(use_backend):
    def broken(environ, start_response):
        raise ValueError('boom')
    resp = Harness(broken).request('/')
    assert bytes(resp.stdout) == (b'Status: 500 Internal Server Error\r\n'
                                  b'Content-Type: text/html\r\n\r\n' + ERROR_BODY)
    assert b'ValueError: boom' in resp.stderr
    assert resp.end == (0, 0)


class _LateResult:
    """Yields a first chunk, then raises (the app fails after its response began)."""

    def __init__(self, closed):
        self._closed = closed

    def __iter__(self):
        yield b'first'
        raise RuntimeError('late')

    def close(self):
        self._closed.append(True)


@pytest.mark.parametrize('keep_conn', [False, True], ids=['close', 'keep-conn'])
def test_app_raising_after_output_is_not_passed_off_as_complete(use_backend, keep_conn):
    """No END_REQUEST, which would make the web server end the client's response as whole
    (``truncated-response-signalled``): on a Unix socket without KEEP_CONN an invalid record
    header (version 0), then EOF; with KEEP_CONN the early EOF says it."""
    closed = []

    def late(environ, start_response):
        start_response('200 OK', [])
        return _LateResult(closed)
    harness = Harness(late)
    with harness.connect() as sock:
        sock.sendall(request_bytes('/', keep_conn=keep_conn))
        data = read_to_eof(sock)
    harness.join()
    if keep_conn:
        records = f.FastCGIParser().feed(data)
    else:
        assert data.endswith(bytes(8)), data[-16:]
        records = f.FastCGIParser().feed(data[:-8])
    kinds = [kind for kind, _, _ in records]
    assert f.FCGI_END_REQUEST not in kinds
    stdout = b''.join(p for kind, _, p in records if kind == f.FCGI_STDOUT)
    stderr = b''.join(p for kind, _, p in records if kind == f.FCGI_STDERR)
    assert stdout.endswith(b'\r\n\r\nfirst')
    assert stderr.count(b'RuntimeError: late') == 1  # the traceback, once
    assert closed == [True]


def tcp_connection(app):
    """(our end of a loopback TCP connection served by ``app``, the serving thread)."""
    harness = Harness(app)
    ours = harness.connect(tcp=True)
    return ours, harness.threads[-1]


def test_app_raising_after_output_waits_for_the_request_end_before_the_reset(use_backend):
    """mod_proxy_fcgi sends the whole request (a GET's empty STDIN too) before it reads the
    answer: a reset meeting it mid-send makes it report a send error and never read the
    traceback. The request's input is read to its end first."""
    started = threading.Event()

    def late(environ, start_response):
        start_response('200 OK', [])
        started.set()
        yield b'first'
        raise RuntimeError('late')
    ours, thread = tcp_connection(late)
    with ours:
        head, rest = request_bytes('/', body=b'p' * 100000, keep_conn=True, split=True)
        ours.sendall(head)
        assert started.wait(10)
        time.sleep(0.2)  # the app has raised meanwhile: the web server is still sending
        ours.sendall(rest)  # without the drain: EPIPE/ECONNRESET here
        data, reset = read_until_reset(ours)
    thread.join(10)
    assert reset
    records = f.FastCGIParser().feed(data)
    assert b'RuntimeError: late' in b''.join(p for k, _, p in records if k == f.FCGI_STDERR)


def test_app_raising_after_output_over_tcp_resets_after_the_traceback(use_backend):
    """Over TCP the failed response ends with a reset, once what was sent has left: a reset
    discards what is still queued, and the traceback on STDERR is sent last. The web server
    here reads late, so megabytes are still queued when the app raises."""
    big = b'b' * (8 << 20)

    def late(environ, start_response):
        start_response('200 OK', [])
        yield big
        raise RuntimeError('late')
    ours, thread = tcp_connection(late)
    with ours:
        ours.sendall(request_bytes('/', keep_conn=True))
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        time.sleep(0.3)  # the web server busy elsewhere: the backend's send queue fills
        data, reset = read_until_reset(ours)
    thread.join(10)
    assert reset
    records = f.FastCGIParser().feed(data)
    assert f.FCGI_END_REQUEST not in [kind for kind, _, _ in records]
    stderr = b''.join(p for kind, _, p in records if kind == f.FCGI_STDERR)
    assert b'RuntimeError: late' in stderr
    assert sum(len(p) for kind, _, p in records if kind == f.FCGI_STDOUT) > len(big)


def test_app_raising_after_output_multiplexed_sets_app_status(use_backend):
    """A multiplexed connection carries other requests: END_REQUEST with appStatus 1."""
    def late(environ, start_response):
        start_response('200 OK', [])
        return _LateResult([])
    resp = Harness(late, multiplexed=True).request('/')
    assert resp.body == b'first' and b'RuntimeError: late' in resp.stderr
    assert resp.end == (1, f.FCGI_REQUEST_COMPLETE)


def test_debug_page_without_cgitb(use_backend):
    def broken(environ, start_response):
        secret_local = 'visible'  # noqa: F841 (shown in the page)
        raise KeyError('oops')
    resp = Harness(broken, debug=True).request('/')
    assert resp.status == 500
    assert b'KeyError' in resp.body and b'secret_local' in resp.body


def test_str_body_and_headers_encoded_latin1_and_write_callable(use_backend):
    def app(environ, start_response):
        write = start_response('200 OK', [('X-Name', 'caf\xe9')])
        write('d\xe9j\xe0 ')
        return ['vu']
    resp = Harness(app).request('/')
    assert resp.header('X-Name') == 'caf\xe9'
    assert resp.body == 'd\xe9j\xe0 vu'.encode('latin-1')
    assert resp.header('Content-Length') is None  # write() sent the headers first (as flup)


def test_bad_start_response_arguments_give_500(use_backend):
    def app(environ, start_response):
        start_response('OK', [])
        return []
    resp = Harness(app).request('/')
    assert resp.status == 500 and b'Status must be at least 4 characters' in resp.stderr


def test_role_not_allowed_gets_unknown_role_without_stdout(use_backend):
    resp = Harness(hello).request('/', role=f.FCGI_AUTHORIZER)
    assert resp.end == (0, f.FCGI_UNKNOWN_ROLE)
    assert f.FCGI_STDOUT not in resp.records
    resp = Harness(hello, roles=(f.FCGI_RESPONDER, f.FCGI_AUTHORIZER)).request(
        '/', role=f.FCGI_AUTHORIZER)
    assert resp.status == 200


def test_abort_request_still_ends_the_request(use_backend):
    harness = Harness(echo)
    sock = harness.connect()
    data = request_bytes('/', body=b'a' * 1000)
    head = data.split(f.encode_record(f.FCGI_STDIN, 1, b'a' * 1000))[0]
    sock.sendall(head + f.encode_record(f.FCGI_ABORT_REQUEST, 1) + f.encode_record(f.FCGI_STDIN, 1))
    resp = read_response(sock)
    assert resp.end == (0, 0)
    sock.close()
    harness.join()


def test_environ_as_flup_builds_it(use_backend):
    resp = Harness(environ_app, environ={'SERVER_NAME': 'override', 'X': 'y'}).request(
        '/app/caf%C3%A9/x?q=1', params={'SCRIPT_NAME': '/app', 'HTTPS': 'on',
                                         'REQUEST_URI': '/app/caf%C3%A9/x?q=1',
                                         'QUERY_STRING': ''})
    env = eval(resp.body)
    assert env == {'PATH_INFO': '/caf%C3%A9/x', 'QUERY_STRING': 'q=1', 'SCRIPT_NAME': '/app',
                   'REQUEST_URI': '/app/caf%C3%A9/x?q=1', 'X': 'y', 'SERVER_NAME': 'override',
                   'wsgi.url_scheme': 'https', 'wsgi.multithread': True,
                   'wsgi.multiprocess': False, 'wsgi.run_once': False}


def test_large_single_bytes_response_streams(use_backend):
    payload = bytes(range(256)) * (80 << 10)  # 20 MiB in one bytes object

    def big(environ, start_response):
        start_response('200 OK', [])
        return [payload]
    harness = Harness(big)
    resp = harness.request('/')
    assert resp.header('Content-Length') == str(len(payload))
    assert hashlib.sha256(resp.body).digest() == hashlib.sha256(payload).digest()
    harness.join()


def test_client_gone_mid_download_is_quiet_and_closes_result(use_backend, caplog):
    closed = threading.Event()

    class Endless:
        def __iter__(self):
            while True:
                yield b'x' * 65536

        def close(self):
            closed.set()

    def app(environ, start_response):
        start_response('200 OK', [])
        return Endless()
    harness = Harness(app)
    sock = harness.connect()
    sock.sendall(request_bytes('/'))
    sock.recv(1000)
    sock.close()
    assert closed.wait(10)
    harness.join()
    assert 'Traceback' not in caplog.text


def test_multiplexed_interleaved_requests(use_backend):
    harness = Harness(echo, multiplexed=True)
    sock = harness.connect()
    head, body = request_bytes('/', body=b'1' * 3000000, request_id=1, keep_conn=True,
                               split=True)
    two = request_bytes('/', body=b'2' * 1000, request_id=2, keep_conn=True)
    sock.sendall(head + two + body)
    answers = {}
    parser = f.FastCGIParser()
    done = set()
    while len(done) < 2:
        for kind, rid, payload in parser.feed(sock.recv(65536)):
            if kind == f.FCGI_STDOUT:
                answers[rid] = answers.get(rid, b'') + payload
            elif kind == f.FCGI_END_REQUEST:
                done.add(rid)
    assert answers[1].endswith(hashlib.sha256(b'1' * 3000000).hexdigest().encode() + b' 3000000')
    assert answers[2].endswith(b' 1000')
    sock.close()
    harness.join()


def test_wsgi_errors_tee_accepts_bytes(use_backend, capsys):
    def app(environ, start_response):
        environ['wsgi.errors'].write(b'bytes line\n')
        environ['wsgi.errors'].write('str line\n')
        return hello(environ, start_response)
    resp = Harness(app, bindAddress=('127.0.0.1', 0)).request('/')
    assert resp.stderr == b'bytes line\nstr line\n'
    assert 'bytes line' in capsys.readouterr().err


def test_cgi_fallback_request(tmp_path):
    import subprocess
    script = tmp_path / 'app.py'
    script.write_text(
        'from flupfast.server.fcgi import WSGIServer\n'
        'def app(environ, start_response):\n'
        '    data = environ["wsgi.input"].read()\n'
        '    start_response("200 OK", [("Content-Type", "text/plain")])\n'
        '    return [b"cgi got " + data]\n'
        'WSGIServer(app).run()\n')
    env = {'REQUEST_METHOD': 'POST', 'CONTENT_LENGTH': '5', 'SERVER_NAME': 'x',
           'SERVER_PORT': '80', 'SERVER_PROTOCOL': 'HTTP/1.0', 'PATH': '/usr/bin:/bin',
           'PYTHONPATH': ':'.join(sys.path)}
    out = subprocess.run([sys.executable, str(script)], input=b'helloEXTRA', env=env,
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (b'Status: 200 OK\r\nContent-Type: text/plain\r\n'
                          b'Content-Length: 13\r\n\r\ncgi got hello')


logging.getLogger('flupfast').setLevel(logging.DEBUG)


def test_pipelined_keep_conn_requests_in_one_send(use_backend):
    # The next request's BEGIN arrives in the same recv as this one's body: it must wait for
    # its turn, not be taken for a duplicate BEGIN_REQUEST (found by the bench).
    harness = Harness(echo)
    sock = harness.connect()
    sock.sendall(b''.join(request_bytes('/', body=b'p' * (i * 1000), keep_conn=True)
                          for i in range(50)))
    for i in range(50):
        assert read_response(sock).body.endswith(b' %d' % (i * 1000))
    sock.close()
    harness.join()


def test_lying_content_length_ends_at_stdin_eof(use_backend):
    # CONTENT_LENGTH promises more than STDIN carries: the body ends at the empty STDIN record
    # (spec 6.2: STDIN is authoritative), it does not hang waiting for the rest.
    harness = Harness(echo)
    resp = harness.request('/', body=b'short', params={'CONTENT_LENGTH': '100000'})
    assert resp.status == 200 and resp.body.endswith(b' 5')
    harness.join()
