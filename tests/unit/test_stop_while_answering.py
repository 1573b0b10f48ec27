"""A stop that comes while a request is being answered ends the connection as soon as it is
idle (single mode shuts an idle connection's read side on a stop, but a busy one it must leave
alone; it then has to notice the stop itself). Found by compat/test_differential.py's signal
scenarios: a SIGTERM right after an AJP response left a single-mode server waiting for the web
server to close its kept connection.

The app plays the signal: it sets the server's ``_keepGoing`` to False (the flag a stop sets)
while it answers; the web server keeps its end open.
"""
import pytest

from flupfast import _impl
from tests.ajp_client import request_bytes as ajp_request
from tests.fcgi_client import read_response, request_bytes as fcgi_request
from tests.unit import test_ajp_connection, test_fastcgi_connection, test_scgi_connection

pytestmark = pytest.mark.timeout(60)

CODECS = ('FastCGIParser', 'frame_stdout', 'InputStream', 'decode_scgi_request', 'AJPParser',
          'decode_forward_request', 'decode_body_chunk', 'frame_body')


@pytest.fixture(autouse=True)
def use_backend(backend, monkeypatch):
    """Every test on both backends (the codecs the connections pick through _impl)."""
    for name in CODECS:
        monkeypatch.setattr(_impl, name, getattr(backend, name))


def stopping_app(holder):
    def app(environ, start_response):
        holder.server._keepGoing = False  # what a SIGTERM during the request does
        start_response('200 OK', [('Content-Type', 'text/plain')])
        return [b'answered\n']
    return app


def closed(sock):
    try:
        return sock.recv(1) == b''
    except ConnectionResetError:
        return True


def test_fastcgi_kept_connection_ends_after_the_answer():
    holder = type('Holder', (), {})()
    harness = test_fastcgi_connection.Harness(stopping_app(holder))
    holder.server = harness.server
    sock = harness.connect()
    sock.sendall(fcgi_request('/', keep_conn=True))
    assert read_response(sock).body == b'answered\n'
    assert closed(sock)  # not waiting for a next request
    harness.join()


def test_ajp_connection_ends_after_the_answer():
    holder = type('Holder', (), {})()
    harness = test_ajp_connection.Harness(stopping_app(holder))
    holder.server = harness.server
    web = harness.connect()
    response = web.exchange(ajp_request('GET', '/'))
    assert (response.status, response.body) == (200, b'answered\n')
    assert closed(web.sock)
    harness.join()
    assert harness.served == [1]


def test_scgi_connection_of_a_stopping_server_reads_nothing():
    harness = test_scgi_connection.Harness(stopping_app(None))
    harness.server._keepGoing = False
    sock = harness.connect()  # sends nothing: the server must not wait for it
    assert closed(sock)
    harness.join()
    assert harness.served == [0]
