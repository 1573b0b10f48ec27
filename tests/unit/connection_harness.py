"""The one harness of the connection tests (FastCGI, SCGI, AJP13): a server whose connections
run in threads over socketpairs or loopback TCP, the ``use_backend`` fixture that puts one
backend's codec under them, and the apps the three suites share.

Each suite subclasses :class:`ConnectionHarness` with its server and how it talks to it.
"""
import hashlib
import socket
import threading

import pytest

from flupfast import _impl
from tests.scgi_client import read_all as read_to_eof  # noqa: F401 (the same for all three)

JOIN_TIMEOUT = 10    # seconds a connection thread may take to end once its peer is done
SOCKET_TIMEOUT = 10  # the test's end of the connection: a hung server fails, not blocks


def use_twins(monkeypatch, backend, names):
    """Run the connection on ``backend``'s twins of ``names`` (the names in flupfast._impl the
    protocol's connection looks up)."""
    for name in names:
        monkeypatch.setattr(_impl, name, getattr(backend, name))


# The names in flupfast._impl a FastCGI connection looks up: its codec, its streams and the
# compiled connection loop (run_fcgi).
FASTCGI_TWINS = ('FastCGIParser', 'InputStream', 'frame_stdout', 'run_fcgi')


def backend_fixture(*names):
    """A ``use_backend`` fixture running the connection on ``backend``'s twins of ``names``."""
    @pytest.fixture
    def use_backend(backend, monkeypatch):
        use_twins(monkeypatch, backend, names)
        return backend
    return use_backend


def tcp_pair():
    """Both ends of a loopback TCP connection and the address the server end sees:
    (ours, theirs, address). Over TCP, unlike a socketpair, a close can become a reset."""
    with socket.create_server(('127.0.0.1', 0)) as listener:
        ours = socket.create_connection(listener.getsockname())
        theirs, address = listener.accept()
    return ours, theirs, address


class ConnectionHarness:
    """A server whose connections each run in a daemon thread; ``served`` collects what each
    connection's ``run()`` returned (the number of requests it served)."""

    connection_class = None   # the protocol's Connection, built as (sock, addr, server, None)
    unix_address = ''         # the peer address a socketpair's connection is given

    def __init__(self, server):
        self.server = server
        self.threads = []
        self.served = []

    def start(self, sock, address, **attrs):
        """Serve ``sock`` in a thread; ``attrs`` are set on the connection first."""
        conn = self.connection_class(sock, address, self.server, None)
        for name, value in attrs.items():
            setattr(conn, name, value)
        thread = threading.Thread(target=lambda: self.served.append(conn.run()), daemon=True)
        thread.start()
        self.threads.append(thread)
        return thread

    def connect(self, tcp=False, **attrs):
        """A new connection served in a thread; returns our end (with a timeout)."""
        if tcp:
            ours, theirs, address = tcp_pair()
        else:
            (ours, theirs), address = socket.socketpair(), self.unix_address
        self.start(theirs, address, **attrs)
        ours.settimeout(SOCKET_TIMEOUT)
        return ours

    def join(self):
        for thread in self.threads:
            thread.join(JOIN_TIMEOUT)
            assert not thread.is_alive(), 'connection thread hung'


def hello(environ, start_response):
    start_response('200 OK', [('Content-Type', 'text/plain')])
    return [b'Hello world!\n']


def echo(environ, start_response):
    """Answers the request body's sha256 and length: proves it was read whole and exactly."""
    data = environ['wsgi.input'].read()
    start_response('200 OK', [('Content-Type', 'application/octet-stream')])
    return [hashlib.sha256(data).hexdigest().encode(), b' %d' % len(data)]


def environ_app_showing(*keys):
    """An app answering repr() of the environ's ``keys`` (None for a missing one)."""
    def environ_app(environ, start_response):
        start_response('200 OK', [])
        return [repr({k: environ.get(k) for k in keys}).encode('utf-8')]
    return environ_app


def read_until_reset(sock):
    """What ``sock`` receives until the server closes, and whether it ended with a reset:
    (data, reset). Over TCP a response cut short ends with one
    (``truncated-response-signalled``)."""
    parts = []
    try:
        while True:
            data = sock.recv(1 << 20)
            if not data:
                return b''.join(parts), False
            parts.append(data)
    except ConnectionResetError:
        return b''.join(parts), True


def peer_closed(sock):
    """True when the other end closed ``sock`` (EOF, or a reset), reading one byte at most."""
    try:
        return sock.recv(1) == b''
    except ConnectionResetError:
        return True
