"""The uwsgi connection over socketpairs, on both backends: SCGI's connection with uwsgi's
codec, logger and HTTP status line. What both share (the body stream, file_wrapper, PATH_INFO
rules) is proved once in test_scgi_connection.py; here: the response is HTTP/1.x byte for byte
with the request's SERVER_PROTOCOL, wsgi.url_scheme follows uWSGI, the body stops at
CONTENT_LENGTH, sendfile, the 500 page and the overload answer speak HTTP, an unserved
modifier1 and every bad input are one log line and a closed connection.
"""
import hashlib
import logging
import socket
import threading

import pytest

from flupfast import connection as connection_module
from flupfast.gateway import ERROR_BODY
from flupfast.protocols.uwsgi import encode_request
from flupfast.server import uwsgi_base
from tests.unit.connection_harness import (ConnectionHarness, backend_fixture, echo, hello,
                                          read_until_reset)
from tests.unit.test_scgi_connection import Harness as SCGIHarness
from tests.uwsgi_client import parse_response, read_all, request_bytes

use_backend = backend_fixture('decode_uwsgi_request', 'InputStream', 'open_scgi_body')


class Harness(SCGIHarness):
    """A BaseUWSGIServer whose connections run in threads over socketpairs."""

    connection_class = uwsgi_base.Connection

    def __init__(self, app, **kwargs):
        kwargs.setdefault('allowedServers', None)
        ConnectionHarness.__init__(self, uwsgi_base.BaseUWSGIServer(app, **kwargs))

    def request(self, *args, **kw):
        shut = kw.pop('shut', False)
        version = kw.get('protocol', 'HTTP/1.1') or 'HTTP/1.0'
        return parse_response(self.raw(request_bytes(*args, **kw), shut=shut),
                              version.encode())


def test_hello_is_an_http_response_byte_for_byte_and_the_connection_closes(use_backend):
    h = Harness(hello)
    raw = h.raw(request_bytes('/'), shut=False)
    assert raw == (b'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\n'
                   b'Hello world!\n')
    h.join()
    assert h.served == [1]


@pytest.mark.parametrize('protocol, line', [
    ('HTTP/1.0', b'HTTP/1.0 200 OK'), ('HTTP/2.0', b'HTTP/2.0 200 OK'),
    (None, b'HTTP/1.0 200 OK'),                        # uWSGI's default
    ('HTTP/1.1\r\nX-Injected: 1', b'HTTP/1.0 200 OK'),  # never echoed
    ('INCLUDED', b'HTTP/1.0 200 OK'), ('HTTP/1.10', b'HTTP/1.0 200 OK'),
])
def test_the_status_line_repeats_server_protocol(use_backend, protocol, line):
    raw = Harness(hello).raw(request_bytes('/', protocol=protocol), shut=False)
    assert raw.split(b'\r\n', 1)[0] == line
    assert raw.count(b'\r\n') == 4  # the status line, 2 headers, the blank line: no injection


def environ_app(environ, start_response):
    start_response('200 OK', [])
    keys = ('PATH_INFO', 'QUERY_STRING', 'SCRIPT_NAME', 'REQUEST_METHOD', 'CONTENT_LENGTH',
            'wsgi.url_scheme', 'wsgi.multithread', 'wsgi.run_once')
    shown = {k: environ.get(k) for k in keys}
    shown['file_wrapper'] = environ.get('wsgi.file_wrapper') is not None
    return [repr(shown).encode('utf-8')]


def test_environ_as_scgi_gives_it(use_backend):
    env = eval(Harness(environ_app).request('/a/b?x=1')[2])
    assert env == {'PATH_INFO': '/a/b', 'QUERY_STRING': 'x=1', 'SCRIPT_NAME': '',
                   'REQUEST_METHOD': 'GET', 'CONTENT_LENGTH': '0', 'wsgi.url_scheme': 'http',
                   'wsgi.multithread': True, 'wsgi.run_once': False, 'file_wrapper': True}


@pytest.mark.parametrize('extra, scheme', [
    ([], 'http'),
    ([('HTTPS', 'on')], 'https'), ([('HTTPS', 'ON')], 'https'), ([('HTTPS', '1')], 'https'),
    ([('HTTPS', 'off')], 'http'), ([('HTTPS', '')], 'http'),
    ([('REQUEST_SCHEME', 'https')], 'https'), ([('REQUEST_SCHEME', 'http')], 'http'),
    ([('REQUEST_SCHEME', 'gopher')], 'http'),
    ([('UWSGI_SCHEME', 'https')], 'https'),
    ([('UWSGI_SCHEME', 'http'), ('HTTPS', 'on')], 'http'),     # uWSGI's override first
    ([('HTTPS', 'off'), ('REQUEST_SCHEME', 'https')], 'http'),  # then HTTPS
    ([('HTTPS', ''), ('REQUEST_SCHEME', 'https')], 'https'),  # nginx: HTTPS if_not_empty
])
def test_url_scheme_by_uwsgis_rule(use_backend, extra, scheme):
    assert eval(Harness(environ_app).request('/', extra=extra)[2])['wsgi.url_scheme'] == scheme


def test_an_empty_content_length_is_no_body_and_seen_as_sent(use_backend):
    """nginx's uwsgi_params sends $content_length, empty for a GET."""
    env = eval(Harness(environ_app).request('/', content_length='')[2])
    assert env['CONTENT_LENGTH'] == ''


@pytest.mark.parametrize('size', [0, 1, 65536, 3 << 20])
def test_upload_is_read_whole_and_exactly(use_backend, size):
    data = bytes(range(256)) * (size // 256) + b'x' * (size % 256)
    status, _, body = Harness(echo).request('/', method='POST', body=data)
    assert status == b'200 OK'
    assert body == hashlib.sha256(data).hexdigest().encode() + b' %d' % size


@pytest.mark.parametrize('reader', ['read', 'readline', 'read_sized'])
def test_input_never_reads_past_content_length(use_backend, reader):
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
    with h.connect() as sock:
        sock.sendall(wire[:-6])
        assert reading.wait(10)
        sock.sendall(wire[-6:] + b'EXTRA\nMORE')  # the socket stays open: no EOF to stop at
        try:
            read_all(sock)
        except ConnectionResetError:
            pass
    h.join()
    assert seen == {'read': [b'he\nllo'], 'readline': [b'he\n', b'llo'],
                    'read_sized': [b'he\n', b'llo', b'']}[reader]


def test_app_error_gives_the_500_page_as_http(use_backend, caplog):
    def boom(environ, start_response):
        raise ValueError('boom')
    with caplog.at_level(logging.ERROR, logger='uwsgi-wsgi'):
        raw = Harness(boom).raw(request_bytes('/', protocol='HTTP/1.0'), shut=False)
    assert raw == (b'HTTP/1.0 500 Internal Server Error\r\nContent-Type: text/html\r\n\r\n'
                   + ERROR_BODY)
    assert [r.getMessage() for r in caplog.records if r.exc_info] == [
        'Exception caught from handler']


def test_error_after_the_first_chunk_resets_over_tcp(use_backend):
    def late(environ, start_response):
        start_response('200 OK', [])
        yield b'first'
        raise RuntimeError('late')
    h = Harness(late)
    with h.connect(tcp=True) as ours:
        ours.sendall(request_bytes('/'))
        received, reset = read_until_reset(ours)
    h.join()
    assert reset and (received.endswith(b'first') or not received)


def test_file_wrapper_uses_sendfile(use_backend, tmp_path, monkeypatch):
    path = tmp_path / 'big.bin'
    content = bytes(range(256)) * 4096
    path.write_bytes(content)
    sent = []
    real = connection_module.Connection.send_file

    def spy(self, filelike):
        sent.append(filelike.tell())
        return real(self, filelike)
    monkeypatch.setattr(connection_module.Connection, 'send_file', spy)

    def app(environ, start_response):
        start_response('200 OK', [('Content-Length', str(len(content)))])
        return environ['wsgi.file_wrapper'](open(path, 'rb'), 65536)
    status, headers, body = Harness(app).request('/')
    assert (status, body, sent) == (b'200 OK', content, [0])


def test_the_overload_answer_is_http(use_backend):
    h = Harness(hello)
    ours, theirs = socket.socketpair()
    with ours:
        ours.settimeout(10)
        ours.sendall(request_bytes('/', protocol='HTTP/1.1'))
        ours.shutdown(socket.SHUT_WR)
        h.connection_class(theirs, '', h.server, None).refuse_overloaded()
        status, headers, body = parse_response(read_all(ours))
    assert status == b'503 Service Unavailable' and (b'Retry-After', b'1') in headers


BAD_REQUESTS = [
    (b'GET / HTTP/1.1\r\nHost: x\r\n\r\n', 'modifier1 71 is not served (only 0, a WSGI '
                                          'request)'),
    (encode_request({'REQUEST_METHOD': 'GET'}, modifier1=5), 'modifier1 5 is not served'),
    (b'\x00\x04\x00\x00\x01\x00A\x01', 'vars block ends inside the value size'),
    (b'\x00\x03\x00\x00\x05\x00A', 'key of 5 bytes runs past the vars block'),
    (b'\x00\x06\x00\x00\x00\x00\x01\x00xy', 'empty var name'),
    (encode_request({'CONTENT_LENGTH': 'x'}), "invalid CONTENT_LENGTH 'x'"),
    (encode_request([('CONTENT_LENGTH', '0'), ('CONTENT_LENGTH', '1')]),
     'conflicting CONTENT_LENGTH'),
    (b'\x00\x10\x00\x00\x0e\x00CONTENT_', 'closed inside the uwsgi packet header or vars'),
    (b'\x00\x10', 'closed inside the uwsgi packet header or vars'),
]


@pytest.mark.parametrize('data, message', BAD_REQUESTS)
def test_bad_input_is_one_log_line_the_connection_closed_and_the_next_served(
        use_backend, caplog, data, message):
    h = Harness(hello)
    with caplog.at_level(logging.DEBUG, logger='uwsgi-wsgi'):
        assert h.raw(data, shut=True) == b''
        h.join()
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1 and message in errors[0].getMessage(), caplog.text
    assert errors[0].getMessage().startswith('Protocol error')
    assert errors[0].exc_info is None
    assert h.request('/')[2] == b'Hello world!\n'


def test_the_front_ends_take_the_scgi_keywords():
    import inspect
    from flupfast.server import scgi, scgi_fork, scgi_single, uwsgi, uwsgi_fork, uwsgi_single
    for ours, theirs in ((uwsgi, scgi), (uwsgi_fork, scgi_fork), (uwsgi_single, scgi_single)):
        assert inspect.signature(ours.WSGIServer.__init__) == \
            inspect.signature(theirs.WSGIServer.__init__)
        server = ours.WSGIServer(hello, bindAddress=('127.0.0.1', 0))
        assert server.logger.name == 'uwsgi-wsgi'
        assert server._jobClass is uwsgi_base.Connection, ours
