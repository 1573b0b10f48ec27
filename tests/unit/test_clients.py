"""flupfast.client.fcgi_app.FCGIApp and scgi_app.SCGIApp (flup's proxies, broken on Python 3 in
flup 1.0.3) against flupfast's own FastCGI and SCGI servers run as subprocesses, plus small
fake backends for the answers a real server never gives (early close, bare-LF heads). The
FastCGI client parses records with each backend's parser twin.
"""
import hashlib
import io
import os
import json
import socket
import threading

import pytest

from flupfast.client import fcgi_app
from flupfast.client._proxy import BackendError, respond
from flupfast.client.fcgi_app import FCGIApp
from flupfast.client.scgi_app import SCGIApp
from flupfast.client.uwsgi_app import UWSGIApp
from flupfast.protocols import fastcgi, scgi, uwsgi
from tests.apps import probe
from tests.integration.backend_process import Server, free_port


@pytest.fixture(scope='module')
def backends(tmp_path_factory):
    """One flupfast FastCGI server on TCP, one SCGI server on a Unix socket, one uwsgi server
    on TCP."""
    fcgi_port, uwsgi_port = free_port(), free_port()
    scgi_path = str(tmp_path_factory.mktemp('scgi') / 'scgi.sock')
    servers = [Server(['--bind', '127.0.0.1:%d' % fcgi_port, 'tests.apps.probe:app'],
                      ('127.0.0.1', fcgi_port)),
               Server(['--protocol', 'scgi', '--bind', 'unix:' + scgi_path,
                       'tests.apps.probe:app'], scgi_path),
               Server(['--protocol', 'uwsgi', '--bind', '127.0.0.1:%d' % uwsgi_port,
                       'tests.apps.probe:app'], ('127.0.0.1', uwsgi_port))]
    yield {'fcgi': ('127.0.0.1', fcgi_port), 'scgi': scgi_path,
           'uwsgi': ('127.0.0.1', uwsgi_port)}
    for server in servers:
        server.stop()


@pytest.fixture(params=['fcgi', 'scgi', 'uwsgi'])
def client(request, backends, backend, monkeypatch):
    """(protocol, the WSGI app forwarding to our server of that protocol)."""
    monkeypatch.setattr(fcgi_app, '_impl', backend)  # the parser twin under test
    if request.param == 'fcgi':
        host, port = backends['fcgi']
        return 'fcgi', FCGIApp(host=host, port=port)
    if request.param == 'uwsgi':
        return 'uwsgi', UWSGIApp(connect=backends['uwsgi'])
    return 'scgi', SCGIApp(connect=backends['scgi'])


class StartResponse:
    def __init__(self):
        self.status = self.headers = None

    def __call__(self, status, headers, exc_info=None):
        self.status, self.headers = status, headers


def environ(path, query='', body=b'', **extra):
    env = {'REQUEST_METHOD': 'POST' if body else 'GET', 'SCRIPT_NAME': '', 'PATH_INFO': path,
           'QUERY_STRING': query, 'REQUEST_URI': path + ('?' + query if query else ''),
           'SERVER_NAME': 'localhost', 'SERVER_PORT': '80', 'SERVER_PROTOCOL': 'HTTP/1.1',
           'REMOTE_ADDR': '127.0.0.1', 'CONTENT_LENGTH': str(len(body)) if body else '',
           'wsgi.input': io.BytesIO(body), 'wsgi.errors': io.StringIO(),
           'wsgi.version': (1, 0), 'wsgi.url_scheme': 'http'}
    env.update(extra)
    return env


def call(app, env):
    start = StartResponse()
    result = app(env, start)
    try:
        body = b''.join(result)
    finally:
        result.close()
    return start.status, dict(start.headers), body


def test_hello(client):
    _, app = client
    status, headers, body = call(app, environ('/'))
    assert (status, body) == ('200 OK', probe.HELLO)
    assert headers == {'content-type': 'text/plain', 'content-length': str(len(probe.HELLO))}


def test_large_upload(client):
    _, app = client
    body = os.urandom(8 << 20) + b'\n' * 1000
    status, _, out = call(app, environ('/upload', 'mode=readline', body))
    assert status == '200 OK'
    assert b'"sha256": "%s"' % hashlib.sha256(body).hexdigest().encode() in out


def test_large_download_streams(client):
    _, app = client
    size = 20 << 20
    start = StartResponse()
    result = app(environ('/download', 'size=%d' % size), start)
    assert start.status == '200 OK'  # known before the body is read
    h = hashlib.sha256()
    pieces = 0
    for piece in result:
        h.update(piece)
        pieces += 1
    result.close()
    assert h.hexdigest() == dict(start.headers)['x-sha256']
    assert pieces > 1  # streamed, not gathered into one bytes object as flup does


def test_app_error_is_the_backends_500(client):
    protocol, app = client
    env = environ('/error')
    status, headers, body = call(app, env)
    assert status == '500 Internal Server Error' and b'Unhandled Exception' in body
    if protocol == 'fcgi':  # FCGI_STDERR is relayed to wsgi.errors
        assert 'probe: error before start_response' in env['wsgi.errors'].getvalue()


def test_environ_filters(client):
    _, app = client
    env = environ('/environ', HTTP_X_FORWARDED_FOR='10.0.0.1', MY_SETTING='x',
                  **{'custom.key': 'y'})
    seen = json.loads(call(app, env)[2])
    assert seen['HTTP_X_FORWARDED_FOR'] == '10.0.0.1'
    assert 'MY_SETTING' not in seen and 'custom.key' not in seen
    app._filterEnviron = False  # flup's light filter: every upper-case name
    seen = json.loads(call(app, env)[2])
    assert seen['MY_SETTING'] == 'x' and 'custom.key' not in seen


def test_unreachable_backend(tmp_path):
    with pytest.raises(ConnectionRefusedError):
        FCGIApp(connect=('127.0.0.1', free_port()))(environ('/'), StartResponse())
    with pytest.raises(FileNotFoundError):
        SCGIApp(connect=str(tmp_path / 'nobody.sock'))(environ('/'), StartResponse())


def test_short_wsgi_input_is_an_error_not_a_hang(backends):
    env = environ('/upload', body=b'x' * 10)
    env['CONTENT_LENGTH'] = '1000'
    with pytest.raises(OSError, match='990 bytes before CONTENT_LENGTH'):
        SCGIApp(connect=backends['scgi'])(env, StartResponse())


def test_constructor_checks():
    with pytest.raises(NotImplementedError, match='not implemented'):
        FCGIApp(command='/usr/bin/app.fcgi')
    with pytest.raises(ValueError):
        FCGIApp()
    with pytest.raises(ValueError):
        SCGIApp(host='localhost')
    assert SCGIApp(host='localhost', port=4000)._connect == ('localhost', 4000)


# -- fake backends: what a broken or old backend answers --------------------------------------

class FakeBackend:
    """Accepts one connection, reads the request until ``request_done(data)``, sends
    ``answer`` and closes."""

    def __init__(self, answer, request_done):
        self.sock = socket.socket()
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(1)
        self.address = self.sock.getsockname()
        self.received = b''
        self._thread = threading.Thread(target=self._serve, args=(answer, request_done))
        self._thread.start()

    def _serve(self, answer, request_done):
        conn, _ = self.sock.accept()
        with conn:
            conn.settimeout(10)
            while not request_done(self.received):
                data = conn.recv(65536)
                if not data:
                    break
                self.received += data
            conn.sendall(answer)
        self.sock.close()

    def join(self):
        self._thread.join(10)


def scgi_done(data):
    return data.endswith(b',')  # a body-less request ends with its netstring


def fcgi_done(data):
    return data.endswith(fastcgi.encode_record(fastcgi.FCGI_STDIN, 1))


def test_bare_lf_head_and_status_without_reason():
    """flup's parser drops a character per line when lines end in a bare LF."""
    fake = FakeBackend(b'Status: 404\nX-Thing: value\nContent-Type: text/plain\n\nnot here',
                       scgi_done)
    status, headers, body = call(SCGIApp(connect=fake.address), environ('/'))
    fake.join()
    assert status == '404 SCGIApp'
    assert headers == {'x-thing': 'value', 'content-type': 'text/plain'}
    assert body == b'not here'
    sent, content_length, used = scgi.decode_request(fake.received)
    assert list(sent)[:2] == ['CONTENT_LENGTH', 'SCGI'] and content_length == 0
    assert used == len(fake.received) and sent['PATH_INFO'] == '/'


def test_backend_closing_before_the_head_ends():
    fake = FakeBackend(b'Status: 200 OK\r\nContent-Type: te', scgi_done)
    with pytest.raises(BackendError, match='before the end of the response head'):
        SCGIApp(connect=fake.address)(environ('/'), StartResponse())
    fake.join()


def uwsgi_done(data):
    return uwsgi.decode_uwsgi_request(data) is not None  # a body-less request: its vars


def test_uwsgi_request_and_a_status_line_without_reason():
    fake = FakeBackend(b'HTTP/1.0 404\r\nX-Thing: value\r\n\r\nnot here', uwsgi_done)
    status, headers, body = call(UWSGIApp(connect=fake.address), environ('/'))
    fake.join()
    assert (status, headers, body) == ('404 UWSGIApp', {'x-thing': 'value'}, b'not here')
    sent, content_length, used = uwsgi.decode_uwsgi_request(fake.received)
    assert (sent['CONTENT_LENGTH'], content_length, used) == ('0', 0, len(fake.received))
    assert sent['PATH_INFO'] == '/' and sent['SERVER_PROTOCOL'] == 'HTTP/1.1'
    assert 'SCGI' not in sent


@pytest.mark.parametrize('answer', [b'Status: 200 OK\r\n\r\nbody', b'HTTP/1.1 OK\r\n\r\n',
                                    b'ICY 200 OK\r\n\r\n'])
def test_uwsgi_answer_without_a_status_line(answer):
    fake = FakeBackend(answer, uwsgi_done)
    with pytest.raises(BackendError, match='malformed status line'):
        UWSGIApp(connect=fake.address)(environ('/'), StartResponse())
    fake.join()


def test_malformed_head_line():
    fake = FakeBackend(b'Status: 200 OK\r\nthis is no header\r\n\r\nbody', scgi_done)
    with pytest.raises(BackendError, match='malformed response header line'):
        SCGIApp(connect=fake.address)(environ('/'), StartResponse())
    fake.join()


def test_fastcgi_backend_closing_before_end_request(backend, monkeypatch):
    monkeypatch.setattr(fcgi_app, '_impl', backend)
    stdout = fastcgi.encode_record(fastcgi.FCGI_STDOUT, 1, b'Status: 200 OK\r\n\r\npartial')
    fake = FakeBackend(stdout, fcgi_done)
    start = StartResponse()
    result = FCGIApp(connect=fake.address)(environ('/'), start)
    assert start.status == '200 OK'
    with pytest.raises(BackendError, match='before END_REQUEST'):
        b''.join(result)
    result.close()
    fake.join()


def test_fastcgi_backend_refusing_the_role(backend, monkeypatch):
    monkeypatch.setattr(fcgi_app, '_impl', backend)
    fake = FakeBackend(fastcgi.encode_end_request(1, 0, fastcgi.FCGI_UNKNOWN_ROLE), fcgi_done)
    with pytest.raises(BackendError, match='FCGI_UNKNOWN_ROLE'):
        FCGIApp(connect=fake.address)(environ('/'), StartResponse())
    fake.join()


def test_flups_own_clients_fail_on_python3():
    """Why these exist: flup 1.0.3's raise AttributeError (types.StringTypes) on every call."""
    flup_fcgi_app = pytest.importorskip('flup.client.fcgi_app')
    with pytest.raises(AttributeError):
        flup_fcgi_app.FCGIApp(connect=('127.0.0.1', 1))(environ('/'), StartResponse())


@pytest.mark.parametrize('answer', [
    b'Status: 201 Created\r\nX-A: 1\r\n\r\nbody bytes',
    b'Status: 201 Created\nX-A: 1\n\nbody bytes',
    b'Status: 201 Created\nX-A: 1\n\r\nbody bytes'])
def test_head_split_one_byte_at_a_time(answer):
    """The blank line is found wherever the backend's chunks split it."""
    closed = []
    start = StartResponse()
    body = respond(iter([answer[i:i + 1] for i in range(len(answer))]), start, 'X',
                   lambda: closed.append(True))
    assert (start.status, start.headers) == ('201 Created', [('x-a', '1')])
    assert b''.join(body) == b'body bytes' and closed == [True]


def test_head_without_headers_and_oversized_head():
    start = StartResponse()
    assert b''.join(respond(iter([b'\r\nonly body']), start, 'X', lambda: None)) == \
        b'only body'
    assert (start.status, start.headers) == ('200 OK', [])
    closed = []
    with pytest.raises(BackendError, match='response head exceeds'):
        respond(iter([b'X-Long: ' + b'a' * 65536] * 20), start, 'X',
                lambda: closed.append(True))
    assert closed == [True]
