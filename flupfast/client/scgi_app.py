"""flup's ``client.scgi_app``: ``SCGIApp``, a WSGI application that forwards each request to an
SCGI backend (a Unix socket or host and port) and streams its answer back.

The request netstring is encoded by flupfast's SCGI codec; the answer is the CGI-style
response the backend writes before it closes the connection.
"""
from flupfast.client._proxy import (
    EnvironFilter, backend_address, connect, input_chunks, respond)
from flupfast.protocols import scgi

__all__ = ['SCGIApp']

encodeNetstring = scgi.encode_netstring  # flup's name

_RECV_SIZE = 256 * 1024


class SCGIApp(EnvironFilter):
    """A WSGI app whose requests are answered by an SCGI backend (flup's
    ``flup.client.scgi_app.SCGIApp``, which fails on Python 3 with AttributeError).

    ``connect`` is a Unix socket path or a (host, port) tuple; ``host`` and ``port`` may be
    given instead. ``filterEnviron`` (default) sends only the CGI variables of the environ.
    """

    # What the answer's head starts with (uwsgi_app.UWSGIApp: an HTTP status line).
    _status_line = False

    def __init__(self, connect=None, host=None, port=None, filterEnviron=True):
        self._connect = backend_address(type(self).__name__, connect, host, port)
        self._filterEnviron = filterEnviron

    def __call__(self, environ, start_response):
        sock = self._getConnection()
        try:
            headers = self._filtered(environ)
            headers.pop('CONTENT_LENGTH', None)
            headers.pop('SCGI', None)
            sock.sendall(self._encode(str(int(environ.get('CONTENT_LENGTH') or 0)), headers))
            for chunk in input_chunks(environ):
                sock.sendall(chunk)
        except BaseException:
            sock.close()
            raise
        return respond(self._stdout(sock), start_response, type(self).__name__, sock.close,
                       self._status_line)

    @staticmethod
    def _encode(content_length, headers):
        """The request head: CONTENT_LENGTH first and SCGI=1 (protocol.txt), then the
        environ."""
        return scgi.encode_request([('CONTENT_LENGTH', content_length), ('SCGI', '1')]
                                   + list(headers.items()))

    @staticmethod
    def _stdout(sock):
        """The response bytes until the backend closes the connection."""
        while True:
            data = sock.recv(_RECV_SIZE)
            if not data:
                return
            yield data

    def _getConnection(self):
        return connect(self._connect)
