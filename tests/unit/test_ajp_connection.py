"""The AJP13 connection, request and gateway over socketpairs, on both backends, with a test
web server that answers GET_BODY_CHUNK as mod_proxy_ajp does: persistent connections, the body
pulled in large chunks (known length and chunked), CPING, stored methods, secret, status 500,
packet sizes, and every kind of bad input (a clear log line, the connection closed).
"""
import hashlib
import logging
import socket

import pytest

from flupfast.gateway import ERROR_BODY
from flupfast.server import ajp_base
from tests.ajp_client import (CPING, Response, body_packet, forward_request, packet,
                              read_container_packets, request_bytes)
from tests.unit.connection_harness import (ConnectionHarness, backend_fixture, echo,
                                          environ_app_showing, hello, peer_closed)


use_backend = backend_fixture('AJPParser', 'decode_forward_request', 'decode_body_chunk',
                              'frame_body', 'InputStream')


class WebServer:
    """The web-server end of one AJP connection: sends requests, answers GET_BODY_CHUNK
    from the rest of the body (``chunk`` bytes at most, like an 8 KiB mod_proxy_ajp), and
    gathers the container's packets up to END_RESPONSE."""

    def __init__(self, sock, chunk=8186):
        self.sock = sock
        self.chunk = chunk
        self.buf = b''

    def exchange(self, wire, rest=b'', end_body=False):
        """Send ``wire``; serve ``rest`` on request (then an empty chunk if ``end_body``,
        i.e. a chunked body). Returns the Response, or None if the container closed."""
        self.sock.sendall(wire)
        rest = memoryview(rest)
        packets = []
        while True:
            data = self.sock.recv(1 << 20)
            if not data:
                return None if not packets else Response(packets)
            self.buf += data
            new, self.buf = read_container_packets(self.buf)
            for item in new:
                packets.append(item)
                if item[0] == 'get_body':
                    n = min(item[1], self.chunk, len(rest))
                    if n == 0 and not end_body:
                        raise AssertionError('asked for more body than there is')
                    self.sock.sendall(body_packet(bytes(rest[:n])))
                    rest = rest[n:]
                elif item[0] in ('end', 'cpong'):
                    return Response(packets)

    def closed(self):
        return peer_closed(self.sock)


class Harness(ConnectionHarness):
    """A BaseAJPServer (``attrs`` set on it) whose connections run in threads over
    socketpairs, each with its :class:`WebServer` end."""

    connection_class = ajp_base.Connection

    def __init__(self, app, **attrs):
        super().__init__(ajp_base.BaseAJPServer(app, allowedServers=None))
        for name, value in attrs.items():
            setattr(self.server, name, value)

    def connect(self, chunk=8186, **attrs):
        return WebServer(super().connect(**attrs), chunk)


environ_app = environ_app_showing(
    'REQUEST_METHOD', 'PATH_INFO', 'SCRIPT_NAME', 'QUERY_STRING', 'REQUEST_URI', 'HTTPS',
    'wsgi.url_scheme', 'CONTENT_LENGTH', 'HTTP_X_A')


def test_hello_keeps_the_connection_and_content_length(use_backend):
    h = Harness(hello)
    web = h.connect()
    for _ in range(3):
        r = web.exchange(request_bytes('GET', '/'))
        assert (r.status, r.reason, r.body, r.reuse) == (200, b'OK', b'Hello world!\n', True)
        assert r.header(b'Content-Length') == b'13'
        assert r.header(b'Content-Type') == b'text/plain'
    web.sock.close()
    h.join()
    assert h.served == [3]


def test_environ_script_name_split_and_query(use_backend):
    h = Harness(environ_app, scriptName='/app')
    web = h.connect()
    r = web.exchange(request_bytes('GET', '/app/x%20y', is_ssl=True,
                                   attributes=[('query_string', 'a=1')],
                                   headers=[('X-A', 'v')]))
    env = eval(r.body)
    assert env == {'REQUEST_METHOD': 'GET', 'PATH_INFO': '/x%20y', 'SCRIPT_NAME': '/app',
                   'QUERY_STRING': 'a=1', 'REQUEST_URI': '/app/x%20y', 'HTTPS': 'on',
                   'wsgi.url_scheme': 'https', 'CONTENT_LENGTH': None, 'HTTP_X_A': 'v'}


@pytest.mark.parametrize('size', [1, 8186, 8187, 3 << 20])
def test_upload_pulled_in_the_largest_chunks(use_backend, size):
    body = bytes(range(256)) * (size // 256) + b'q' * (size % 256)
    h = Harness(echo)
    web = h.connect(chunk=65530)  # a web server with ProxyIOBufferSize 65536
    r = web.exchange(request_bytes('POST', '/', body=body), body[8186:])
    assert r.body == hashlib.sha256(body).hexdigest().encode() + b' %d' % size
    assert all(ask <= 65530 for ask in r.get_body)
    left = size - min(size, 8186)
    for ask in r.get_body:  # never more than what remains
        assert ask == min(left, 65530)
        left -= min(ask, 65530)
    assert left == 0 and r.reuse


def test_chunked_upload_is_read_to_the_empty_chunk(use_backend):
    body = b'chunked body ' * 10000
    h = Harness(echo)
    web = h.connect()
    wire = packet(forward_request('POST', '/', headers=[('Transfer-Encoding', 'chunked')]))
    r = web.exchange(wire, body, end_body=True)  # nothing unsolicited: all on request
    assert r.body == hashlib.sha256(body).hexdigest().encode() + b' %d' % len(body)
    assert r.reuse
    assert web.exchange(request_bytes('GET', '/')).status == 200


def test_unread_body_leaves_the_connection_clean(use_backend):
    h = Harness(hello)
    web = h.connect()
    body = b'u' * 50000
    r = web.exchange(request_bytes('POST', '/', body=body))
    assert (r.body, r.reuse, r.get_body) == (b'Hello world!\n', True, [])
    r = web.exchange(request_bytes('GET', '/'))  # the unsolicited chunk was taken
    assert r.body == b'Hello world!\n'


def test_cping_shutdown_and_ping_between_requests(use_backend, caplog):
    h = Harness(hello)
    web = h.connect()
    with caplog.at_level(logging.DEBUG, logger='ajp-wsgi'):
        assert web.exchange(CPING).cpongs == 1
        web.sock.sendall(packet(b'\x07') + packet(b'\x08'))
        assert web.exchange(request_bytes('GET', '/')).status == 200
    assert 'Received shutdown request from server' in caplog.text
    assert 'Received ping' in caplog.text


def test_stored_method_patch(use_backend):
    h = Harness(environ_app)
    web = h.connect()
    assert eval(web.exchange(request_bytes('PATCH', '/x')).body)['REQUEST_METHOD'] == 'PATCH'


@pytest.mark.parametrize('configured, sent, status', [
    (None, 's3cret', 200), (None, None, 200), ('s3cret', 's3cret', 200),
    ('s3cret', 'wrong', 403), ('s3cret', None, 403)])
def test_secret(use_backend, configured, sent, status, caplog):
    h = Harness(hello, secret=configured)
    web = h.connect()
    attrs = [('secret', sent)] if sent is not None else []
    r = web.exchange(request_bytes('GET', '/', attributes=attrs))
    assert r.status == status and r.reuse
    assert ('wrong or missing AJP secret' in caplog.text) == (status == 403)


def test_error_page_is_status_500(use_backend):
    def boom(environ, start_response):
        raise RuntimeError('boom')
    h = Harness(boom)
    web = h.connect()
    r = web.exchange(request_bytes('GET', '/'))
    assert (r.status, r.reason, r.body, r.reuse) == (500, b'Internal Server Error',
                                                    ERROR_BODY, True)
    assert web.exchange(request_bytes('GET', '/')).status == 500  # still serving


def test_error_after_the_first_chunk_ends_without_end_response(use_backend, caplog):
    """No END_RESPONSE after a failed response: mod_proxy_ajp takes the close for a failed
    backend and ends the client's response unfinished (``truncated-response-signalled``)."""
    def late(environ, start_response):
        start_response('200 OK', [('Content-Type', 'text/plain')])
        yield b'first'
        raise RuntimeError('late')
    h = Harness(late)
    web = h.connect()
    with caplog.at_level(logging.ERROR, logger='ajp-wsgi'):
        r = web.exchange(request_bytes('GET', '/'))
        assert (r.status, r.body, r.reuse) == (200, b'first', None)
        assert web.closed()
        h.join()
    assert [rec.getMessage() for rec in caplog.records if rec.exc_info] == [
        'Exception caught from handler']


@pytest.mark.parametrize('packet_size, max_data', [(8192, 8184), (65536, 65528)])
def test_download_split_into_full_packets(use_backend, packet_size, max_data):
    data = bytes(range(256)) * 20000  # ~5 MiB in one bytes object

    def app(environ, start_response):
        start_response('200 OK', [])
        return [data]
    h = Harness(app, packetSize=packet_size)
    web = h.connect()
    web.sock.sendall(request_bytes('GET', '/'))
    raw = b''
    while True:
        raw += web.sock.recv(1 << 20)
        packets, _ = read_container_packets(raw)
        if packets and packets[-1][0] == 'end':
            break
    chunks = [p[1] for p in packets if p[0] == 'body']
    assert b''.join(chunks) == data
    assert {len(c) for c in chunks[:-1]} == {max_data}
    assert Response(packets).header(b'Content-Length') == str(len(data)).encode()


def test_headers_larger_than_the_packet_give_500(use_backend, caplog):
    def app(environ, start_response):
        start_response('200 OK', [('X-Big', 'b' * 9000)])
        return [b'x']
    h = Harness(app)
    web = h.connect()
    r = web.exchange(request_bytes('GET', '/'))
    assert r.status == 500
    assert 'more than the 8192-byte AJP packet' in caplog.text


def test_write_callable_and_generator(use_backend):
    def app(environ, start_response):
        write = start_response('201 Created', [])
        write(b'one ')
        yield b'two'
    h = Harness(app)
    r = h.connect().exchange(request_bytes('GET', '/'))
    assert (r.status, r.reason, r.body) == (201, b'Created', b'one two')


def test_max_requests_ends_with_reuse_off(use_backend):
    h = Harness(hello)
    web = h.connect(max_requests=2)
    assert web.exchange(request_bytes('GET', '/')).reuse is True
    assert web.exchange(request_bytes('GET', '/')).reuse is False
    assert web.closed()
    h.join()
    assert h.served == [2]


def test_a_connection_the_mode_needs_back_ends_with_reuse_off(use_backend):
    """``may_keep`` (a prefork child whose pool has a connection waiting and no child idle)
    is asked after each request; its False goes to the web server as END_RESPONSE reuse=0,
    and the connection closes."""
    answers = [True, False]
    asked = []

    def may_keep(job):
        asked.append(job.served)
        return answers.pop(0)
    h = Harness(hello)
    web = h.connect(may_keep=may_keep)
    assert web.exchange(request_bytes('GET', '/')).reuse is True
    assert web.exchange(request_bytes('GET', '/')).reuse is False
    assert web.closed()
    h.join()
    assert h.served == [2] and asked == [1, 2]


def _bad(h, wire):
    web = h.connect()
    web.sock.sendall(wire)
    return web


BAD = [
    (b'GET / HTTP/1.1\r\n\r\n', 'bad AJP packet magic'),
    (b'\x12\x34\xff\xff', 'exceeds max_packet'),
    (packet(b'\x02\x02\x00\x50'), 'AJP'),  # a string running past the packet
    (packet(b'\x42'), 'unknown packet type 0x42'),
    (packet(forward_request(method=0x60)), 'method'),
    (packet(forward_request(attributes=[(0x33, 'x')])), 'attribute'),
    (packet(b''), 'unexpected empty packet'),
]


@pytest.mark.parametrize('wire, message', BAD)
def test_bad_input_is_one_error_and_the_connection_closes(use_backend, caplog, wire, message):
    h = Harness(hello)
    with caplog.at_level(logging.ERROR, logger='ajp-wsgi'):
        web = _bad(h, wire)
        assert web.closed()
        h.join()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None, caplog.text
    assert errors[0].getMessage().startswith('Protocol error') and message in caplog.text


def test_a_body_chunk_longer_than_content_length_is_an_error(use_backend, caplog):
    h = Harness(echo)
    web = h.connect()
    wire = packet(forward_request('POST', '/', headers=[('Content-Length', '3')]))
    with caplog.at_level(logging.ERROR, logger='ajp-wsgi'):
        web.sock.sendall(wire + body_packet(b'toolong'))
        assert web.closed()
        h.join()
    assert 'body chunk of 7 bytes where 3 remained' in caplog.text


def test_a_body_chunk_longer_than_asked_for_is_an_error(use_backend, caplog):
    h = Harness(echo)
    web = h.connect()
    wire = packet(forward_request('POST', '/', headers=[('Content-Length', '10000')]))
    with caplog.at_level(logging.ERROR, logger='ajp-wsgi'):
        web.sock.sendall(wire + body_packet(b'a' * 8000))
        raw = web.sock.recv(100)
        assert read_container_packets(raw)[0] == [('get_body', 2000)]
        web.sock.sendall(body_packet(b'b' * 3000))
        assert web.closed()
        h.join()
    assert 'body chunk of 3000 bytes where 2000 were asked for' in caplog.text


def test_web_server_closing_mid_body_ends_the_read_with_an_error(use_backend, caplog):
    seen = []

    def app(environ, start_response):
        try:
            environ['wsgi.input'].read()
        except Exception as exc:
            seen.append(type(exc).__name__)
            raise
    h = Harness(app)
    web = h.connect()
    with caplog.at_level(logging.WARNING, logger='ajp-wsgi'):
        web.sock.sendall(request_bytes('POST', '/', body=b'z' * 20000))  # first chunk only
        web.sock.shutdown(socket.SHUT_WR)
        h.join()
    assert seen == ['ClientDisconnected']
    assert 'closed the connection mid-body' in caplog.text
    assert 'Traceback' not in caplog.text


def test_connection_closed_between_requests_is_quiet(use_backend, caplog):
    h = Harness(hello)
    web = h.connect()
    with caplog.at_level(logging.WARNING, logger='ajp-wsgi'):
        web.exchange(request_bytes('GET', '/'))
        web.sock.close()
        h.join()
    assert not caplog.records


def test_front_end_signatures_and_defaults():
    import inspect
    from flupfast.server import ajp, ajp_fork, ajp_single
    sig = inspect.signature(ajp.WSGIServer.__init__)
    assert sig.parameters['bindAddress'].default == ('localhost', 8009)
    assert sig.parameters['allowedServers'].default is None
    assert sig.parameters['scriptName'].default == ''
    assert 'umask' not in sig.parameters
    assert 'timeout' in inspect.signature(ajp_fork.WSGIServer.__init__).parameters
    assert inspect.signature(ajp_single.WSGIServer.__init__).parameters[
        'allowedServers'].default is None
    with pytest.raises(TypeError):
        ajp.WSGIServer(hello, umask=0o22)  # flup's AJP has no umask: the pool rejects it
    assert ajp_base.LoggerName == 'ajp-wsgi'
