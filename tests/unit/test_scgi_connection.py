"""The SCGI connection, request and gateway over socketpairs, on both backends: flup's
responses byte for byte, wsgi.input bounded by CONTENT_LENGTH, sendfile for file_wrapper,
PATH_INFO, scriptName rules, allowedServers, and every kind of bad input (a clear log line,
the connection closed, the next one served).
"""
import hashlib
import io
import logging
import re
import socket
import sys
import threading

import pytest

from flupfast import connection as connection_module
from flupfast.gateway import ERROR_BODY
from flupfast.server import NoDefault, scgi_base
from tests.scgi_client import encode_request, parse_response, read_all, request_bytes
from tests.unit.connection_harness import (ConnectionHarness, backend_fixture, echo, hello,
                                          read_until_reset)


use_backend = backend_fixture('decode_scgi_request', 'InputStream', 'open_scgi_body')


class Harness(ConnectionHarness):
    """A BaseSCGIServer whose connections run in threads over socketpairs."""

    connection_class = scgi_base.Connection

    def __init__(self, app, **kwargs):
        kwargs.setdefault('allowedServers', None)
        super().__init__(scgi_base.BaseSCGIServer(app, **kwargs))

    def raw(self, data, shut=True):
        """Send ``data`` (in a thread: it may exceed the socket buffer), read to EOF."""
        with self.connect() as sock:
            sender = threading.Thread(target=self._send, args=(sock, data, shut))
            sender.start()
            try:
                return read_all(sock)
            finally:
                sender.join(10)

    @staticmethod
    def _send(sock, data, shut):
        try:
            sock.sendall(data)
            if shut:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may close first (bad input)

    def request(self, *args, **kw):
        shut = kw.pop('shut', False)  # like a web server: the write side stays open
        return parse_response(self.raw(request_bytes(*args, **kw), shut=shut))


def environ_app(environ, start_response):
    start_response('200 OK', [])
    keys = ('PATH_INFO', 'QUERY_STRING', 'SCRIPT_NAME', 'REQUEST_URI', 'SCGI',
            'wsgi.url_scheme', 'wsgi.multithread', 'wsgi.multiprocess', 'wsgi.run_once')
    shown = {k: environ.get(k) for k in keys}
    shown['errors is stderr'] = environ['wsgi.errors'] is sys.stderr
    shown['file_wrapper'] = environ.get('wsgi.file_wrapper') is not None
    return [repr(shown).encode('utf-8')]


def test_hello_is_flups_response_byte_for_byte_and_the_connection_closes(use_backend):
    h = Harness(hello)
    raw = h.raw(request_bytes('/'), shut=False)
    assert raw == (b'Status: 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\n'
                   b'Hello world!\n')
    h.join()
    assert h.served == [1]


def test_environ(use_backend):
    h = Harness(environ_app)
    _, _, body = h.request('/a/b?x=1', extra=[('HTTPS', 'on')])
    env = eval(body)
    assert env == {'PATH_INFO': '/a/b', 'QUERY_STRING': 'x=1', 'SCRIPT_NAME': '',
                   'REQUEST_URI': '/a/b?x=1', 'SCGI': '1', 'wsgi.url_scheme': 'https',
                   'wsgi.multithread': True, 'wsgi.multiprocess': False,
                   'wsgi.run_once': False, 'errors is stderr': True, 'file_wrapper': True}


@pytest.mark.parametrize('size', [0, 1, 65536, 3 << 20])
def test_upload_is_read_whole_and_exactly(use_backend, size):
    data = bytes(range(256)) * (size // 256) + b'x' * (size % 256)
    h = Harness(echo)
    status, _, body = h.request('/', method='POST', body=data)
    assert status == b'200 OK'
    assert body == hashlib.sha256(data).hexdigest().encode() + b' %d' % size


@pytest.mark.parametrize('reader', ['read', 'readline', 'iter', 'read_more'])
def test_input_ends_at_content_length_while_the_socket_stays_open(use_backend, reader):
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
    h = Harness(app)
    _, _, body = h.request('/', method='POST', body=b'one\ntwo\nno newline')
    expected = {'read': b'one\ntwo\nno newline', 'read_more': b'one\ntwo\nno newline',
                'readline': b'one\n|two\n|no newline', 'iter': b'one\n|two\n|no newline'}
    assert body == expected[reader]
    h.join()


@pytest.mark.parametrize('arrival', ['with_header', 'after_the_app_reads'])
@pytest.mark.parametrize('reader', ['read', 'readline', 'read_sized'])
def test_input_never_reads_past_content_length_when_more_bytes_follow(use_backend, arrival,
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
    h = Harness(app)
    wire = request_bytes('/', method='POST', body=b'he\nllo')
    assert wire.endswith(b',he\nllo')
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


def test_a_result_of_two_items_arrives_whole_without_a_content_length(use_backend):
    def app(environ, start_response):
        start_response('200 OK', [('content-type', 'text/plain')])
        return [b'abc', b'def']
    raw = Harness(app).raw(request_bytes('/'), shut=False)
    assert raw == b'Status: 200 OK\r\ncontent-type: text/plain\r\n\r\nabcdef'


def test_body_split_into_many_sends(use_backend):
    h = Harness(echo)
    wire = request_bytes('/', method='POST', body=b'abc' * 1000)
    with h.connect() as sock:
        for i in range(0, len(wire), 7):
            sock.sendall(wire[i:i + 7])
        _, _, body = parse_response(read_all(sock))
    assert body.endswith(b' 3000')


def test_unread_body_does_not_destroy_the_response(use_backend):
    # A 4 MiB body the app never reads, over TCP (a socketpair loses nothing on close). A plain
    # close with unread bytes in the receive queue sends a reset and drops what of the response
    # is still in our send queue. So the client's receive buffer is kept small, the response
    # larger than it, and the client reads only after the server's connection has ended: only
    # the lingering close (drain until the peer's FIN, then close) gets the response out whole.
    response = b'r' * (192 << 10)

    def app(environ, start_response):
        start_response('200 OK', [])
        return [response]
    h = Harness(app)
    with socket.create_server(('127.0.0.1', 0)) as listener:
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 10)
        client.settimeout(10)
        client.connect(listener.getsockname())
        ours, _ = listener.accept()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 512 << 10)  # the response fits
    conn = scgi_base.Connection(ours, '', h.server, None)
    served = threading.Thread(target=conn.run, daemon=True)
    served.start()
    with client:
        sender = threading.Thread(target=Harness._send, daemon=True,
                                  args=(client, request_bytes('/', method='POST',
                                                              body=b'z' * (4 << 20)), True))
        sender.start()
        served.join(10)
        assert not served.is_alive(), 'connection thread hung'
        sender.join(10)
        try:
            raw = read_all(client)
        except ConnectionResetError:
            raw = b'reset'
    assert raw.endswith(response) and raw.startswith(b'Status: 200 OK\r\n')


def test_client_gone_mid_body_is_one_warning_and_no_traceback(use_backend, caplog):
    h = Harness(echo)
    wire = request_bytes('/', method='POST', body=b'x' * 100, content_length=1000)
    with caplog.at_level(logging.DEBUG, logger='scgi-wsgi'):
        raw = h.raw(wire, shut=True)
        h.join()
    assert raw == b''
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert 'still to come' in warnings[0].getMessage()
    assert warnings[0].exc_info is None


def test_request_and_its_time_are_logged_as_flup_does(use_backend, caplog):
    h = Harness(hello)
    with caplog.at_level(logging.DEBUG, logger='scgi-wsgi'):
        h.request('/app/x', script_name='/app', path_info='/x')
        h.join()
    lines = [r.getMessage() for r in caplog.records if r.name == 'scgi-wsgi']
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


def test_app_error_gives_flups_500_page(use_backend, caplog):
    def boom(environ, start_response):
        raise ValueError('boom')
    h = Harness(boom)
    with caplog.at_level(logging.ERROR, logger='scgi-wsgi'):
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
def test_error_after_the_first_chunk(use_backend, caplog, tcp):
    """SCGI ends at EOF: over TCP the failed response ends with a reset, which nginx and
    Apache report as a failed backend; over a Unix socket nothing can say it, the response
    ends at EOF as in flup (``truncated-response-signalled``). The traceback is logged once."""
    h = Harness(_late)
    with caplog.at_level(logging.ERROR, logger='scgi-wsgi'):
        with h.connect(tcp=tcp) as ours:
            ours.sendall(request_bytes('/'))
            received, reset = read_until_reset(ours)
        h.join()
    outcome = 'reset' if reset else 'eof'
    assert outcome == ('reset' if tcp else 'eof')
    assert received.endswith(b'first') or (tcp and not received)
    assert [rec.getMessage() for rec in caplog.records if rec.exc_info] == [
        'Exception caught from handler']


def test_error_after_the_first_chunk_reads_the_body_then_resets(use_backend, monkeypatch):
    """mod_proxy_scgi sends the whole body before it reads the answer: the reset waits until
    the rest of the body is read (a reset meeting the sender mid-send loses the response),
    and no longer: CONTENT_LENGTH, not the drain's time limit, ends the wait."""
    monkeypatch.setattr(connection_module, 'RESET_DRAIN_SECONDS', 60)
    body = bytes(range(256)) * (16 << 10)  # 4 MiB: far more than the socket buffers hold
    h = Harness(_late)
    with h.connect(tcp=True) as ours:
        ours.sendall(request_bytes('/', method='POST', body=body))  # fails if reset mid-body
        # The write side stays open, as a web server's does: only the length ends the drain.
        _, reset = read_until_reset(ours)  # a socket timeout here: the drain did not stop
    h.join()
    assert reset


def test_debug_error_page_shows_the_traceback(use_backend):
    def boom(environ, start_response):
        raise ValueError('visible boom')
    h = Harness(boom, debug=True)
    status, _, body = h.request('/')
    assert status == b'500 Internal Server Error'
    assert b'visible boom' in body


def test_write_callable_and_generator(use_backend):
    def app(environ, start_response):
        write = start_response('200 OK', [('X-A', 'b')])
        write(b'written ')
        yield b'yielded'
    h = Harness(app)
    status, headers, body = h.request('/')
    assert (status, headers, body) == (b'200 OK', [(b'X-A', b'b')], b'written yielded')


def test_file_wrapper_uses_sendfile_for_a_regular_file(use_backend, tmp_path, monkeypatch):
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
    h = Harness(app)
    status, headers, body = h.request('/')
    assert status == b'200 OK' and body == content[100:]
    assert sent == [100]


def test_file_wrapper_over_a_non_file_iterates(use_backend, monkeypatch):
    monkeypatch.setattr(connection_module.Connection, 'send_file',
                        lambda self, f: pytest.fail('sendfile on a BytesIO'))

    def app(environ, start_response):
        start_response('200 OK', [])
        return environ['wsgi.file_wrapper'](io.BytesIO(b'in memory ' * 1000), 100)
    h = Harness(app)
    assert h.request('/')[2] == b'in memory ' * 1000


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
def test_path_info(use_backend, kw, expected):
    h = Harness(environ_app)
    env = eval(h.request(**kw)[2])
    assert (env['SCRIPT_NAME'], env['PATH_INFO']) == expected


def test_mismatched_script_name_warns_and_cuts_as_flup(use_backend, caplog):
    h = Harness(environ_app)
    with caplog.at_level(logging.WARNING, logger='scgi-wsgi'):
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


@pytest.mark.parametrize('data, message', BAD_REQUESTS)
def test_bad_input_is_logged_the_connection_closed_and_the_next_served(use_backend, caplog,
                                                                      data, message):
    h = Harness(hello)
    with caplog.at_level(logging.ERROR, logger='scgi-wsgi'):
        assert h.raw(data, shut=True) == b''  # no response: nothing sensible to answer
        h.join()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
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


def test_a_connection_closed_before_any_byte_is_quiet(use_backend, caplog):
    h = Harness(hello)
    with caplog.at_level(logging.DEBUG, logger='scgi-wsgi'):
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
