"""A stop that comes while a request is being answered ends the connection as soon as it is
idle (single mode shuts an idle connection's read side on a stop, but a busy one it must leave
alone; it then has to notice the stop itself). Found by compat/test_differential.py's signal
scenarios: a SIGTERM right after an AJP response left a single-mode server waiting for the web
server to close its kept connection.

The app plays the signal: it stops the single mode running the connection (what a SIGTERM
does) while it answers; the web server keeps its end open.
"""
import socket
import threading

import pytest

from flupfast.serving.single import SingleMode
from flupfast.server import ajp_base, scgi_base
from tests.conftest import install_backend
from tests.ajp_client import request_bytes as ajp_request
from tests.fcgi_client import read_response, request_bytes as fcgi_request
from tests.unit import test_ajp_connection, test_fastcgi_connection, test_scgi_connection
from tests.unit.connection_harness import peer_closed

pytestmark = pytest.mark.timeout(60)

@pytest.fixture(autouse=True)
def use_backend(backend, monkeypatch):
    """Every test on both backends (the twins the connections pick through _impl)."""
    install_backend(monkeypatch, backend)


class Stopping:
    """A single mode that runs one connection of ``harness.server`` (built by ``make``) in a
    thread, and an app that stops the mode while it answers."""

    def __init__(self, harness_class, make):
        self.mode = SingleMode(None)
        self.harness = harness_class(self.app)
        self.make = make
        self.served = []

    def app(self, environ, start_response):
        self.mode.keep_going = False  # what a SIGTERM during the request does
        start_response('200 OK', [('Content-Type', 'text/plain')])
        return [b'answered\n']

    def connect(self):
        ours, theirs = socket.socketpair()
        conn = self.make(theirs, self.harness.server)
        self.served.append(conn)
        self.thread = threading.Thread(target=self.mode.dispatch, args=(conn, theirs),
                                       daemon=True)
        self.thread.start()
        ours.settimeout(10)
        return ours

    def join(self):
        self.thread.join(10)
        assert not self.thread.is_alive(), 'connection thread hung'


def test_fastcgi_kept_connection_ends_after_the_answer():
    run = Stopping(test_fastcgi_connection.Harness,
                   lambda sock, server: server._connectionClass(sock, None, server, None))
    sock = run.connect()
    sock.sendall(fcgi_request('/', keep_conn=True))
    assert read_response(sock).body == b'answered\n'
    assert peer_closed(sock)  # not waiting for a next request
    run.join()


def test_ajp_connection_ends_after_the_answer():
    run = Stopping(test_ajp_connection.Harness,
                   lambda sock, server: ajp_base.Connection(sock, '', server, None))
    web = test_ajp_connection.WebServer(run.connect(), 8186)
    response = web.exchange(ajp_request('GET', '/'))
    assert (response.status, response.body) == (200, b'answered\n')
    assert peer_closed(web.sock)
    run.join()
    assert run.served[0].served == 1


def test_scgi_connection_of_a_stopping_server_reads_nothing():
    run = Stopping(test_scgi_connection.Harness,
                   lambda sock, server: scgi_base.Connection(sock, '', server, None))
    run.mode.keep_going = False
    sock = run.connect()  # sends nothing: the server must not wait for it
    assert peer_closed(sock)
    run.join()
    assert run.served[0].served == 0
