"""The harnesses of the SCGI and uwsgi connection tests: uwsgi is SCGI's connection with
uwsgi's codec, logger and an HTTP status line, so the tests of what they share run once per
protocol through ``protocol_fixture`` (test_scgi_connection.py); test_uwsgi_connection.py has
what only uwsgi does.
"""
import socket
import sys
import threading

import pytest

from flupfast.server import scgi_base, uwsgi_base
from tests import scgi_client, uwsgi_client
from tests.unit.connection_harness import ConnectionHarness, use_twins


class SCGIHarness(ConnectionHarness):
    """A BaseSCGIServer whose connections run in threads over socketpairs."""

    connection_class = scgi_base.Connection
    server_class = scgi_base.BaseSCGIServer
    logger = 'scgi-wsgi'
    head = b'Status: '   # what the response starts with, before the status
    twins = ('decode_scgi_request', 'InputStream', 'open_scgi_body', 'serve_scgi',
             'run_scgi')
    request_bytes = staticmethod(scgi_client.request_bytes)
    parse = staticmethod(scgi_client.parse_response)

    def __init__(self, app, **kwargs):
        kwargs.setdefault('allowedServers', None)
        super().__init__(self.server_class(app, **kwargs))

    def raw(self, data, shut=True):
        """Send ``data`` (in a thread: it may exceed the socket buffer), read to EOF."""
        with self.connect() as sock:
            sender = threading.Thread(target=self._send, args=(sock, data, shut))
            sender.start()
            try:
                return scgi_client.read_all(sock)
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
        """(status, [(name, value)], body) of a request of ``request_bytes``' arguments."""
        shut = kw.pop('shut', False)  # like a web server: the write side stays open
        return self.parse(self.raw(self.request_bytes(*args, **kw), shut=shut))


class UWSGIHarness(SCGIHarness):
    """A BaseUWSGIServer whose connections run in threads over socketpairs."""

    connection_class = uwsgi_base.Connection
    server_class = uwsgi_base.BaseUWSGIServer
    logger = 'uwsgi-wsgi'
    head = b'HTTP/1.1 '  # the request's SERVER_PROTOCOL (request_bytes sends HTTP/1.1)
    twins = ('decode_uwsgi_request', 'InputStream', 'open_scgi_body', 'serve_scgi',
             'run_scgi', 'uwsgi_url_scheme')
    request_bytes = staticmethod(uwsgi_client.request_bytes)
    parse = staticmethod(uwsgi_client.parse_response)

    def request(self, *args, **kw):
        shut = kw.pop('shut', False)
        version = kw.get('protocol', 'HTTP/1.1') or 'HTTP/1.0'
        return self.parse(self.raw(self.request_bytes(*args, **kw), shut=shut),
                          version.encode())


def environ_app(environ, start_response):
    """The environ variables the tests look at, as a repr."""
    start_response('200 OK', [])
    keys = ('PATH_INFO', 'QUERY_STRING', 'SCRIPT_NAME', 'REQUEST_URI', 'REQUEST_METHOD',
            'CONTENT_LENGTH', 'SCGI', 'wsgi.url_scheme', 'wsgi.multithread',
            'wsgi.multiprocess', 'wsgi.run_once')
    shown = {k: environ.get(k) for k in keys}
    shown['errors is stderr'] = environ['wsgi.errors'] is sys.stderr
    shown['file_wrapper'] = environ.get('wsgi.file_wrapper') is not None
    return [repr(shown).encode('utf-8')]


HARNESSES = {'scgi': SCGIHarness, 'uwsgi': UWSGIHarness}


def protocol_fixture():
    """A ``harness`` fixture: each test taking it runs once per protocol (SCGI, uwsgi), its
    connection on ``backend``'s twins; the value is the protocol's harness class.
    ``@pytest.mark.parametrize('harness', [...], indirect=True)`` picks protocols."""
    @pytest.fixture(params=sorted(HARNESSES))
    def harness(request, backend, monkeypatch):
        cls = HARNESSES[request.param]
        use_twins(monkeypatch, backend, cls.twins)
        return cls
    return harness
