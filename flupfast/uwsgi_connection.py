"""One uwsgi connection: read the packet header and vars, serve the one request they carry
with a body stream bounded by CONTENT_LENGTH, answer plain HTTP/1.x on the raw socket, close.

Everything but the codec, the logger and the response's first line is SCGI's connection
(scgi_connection.py): the same body stream, output stream, request, error and overload paths.
"""
from flupfast import _impl
from flupfast.protocols.errors import UWSGIError
from flupfast.protocols.uwsgi import status_prefix
from flupfast.scgi_connection import SCGIConnection

LoggerName = 'uwsgi-wsgi'


class UWSGIConnection(SCGIConnection):
    """A connection from the web server carrying one uwsgi request (modifier1 0); any other
    packet, or a malformed one, is one "Protocol error" log line and a closed connection."""

    logger_name = LoggerName
    decoder = 'decode_uwsgi_request'
    error = UWSGIError
    head_name = 'the uwsgi packet header or vars'

    @_impl.runs_compiled('uwsgi_prefix')
    def status_prefix(self, environ):
        return status_prefix(environ)
