"""flup's ``client.fcgi_app``: ``FCGIApp``, a WSGI application that forwards each request to a
FastCGI responder (a Unix socket or host and port) and streams its answer back.

The records are encoded and parsed by flupfast's FastCGI codec; this module only drives one
request per connection, as flup does (no KEEP_CONN, no multiplexing).
"""
from flupfast import _impl
from flupfast.client._proxy import BackendError, EnvironFilter, connect, input_chunks, respond
from flupfast.output import send_buffers
from flupfast.protocols import fastcgi
from flupfast.server.fcgi_base import (  # noqa: F401  (flup's client exports these too)
    FCGI_ABORT_REQUEST, FCGI_AUTHORIZER, FCGI_BEGIN_REQUEST, FCGI_CANT_MPX_CONN, FCGI_DATA,
    FCGI_END_REQUEST, FCGI_FILTER, FCGI_GET_VALUES, FCGI_GET_VALUES_RESULT, FCGI_HEADER_LEN,
    FCGI_KEEP_CONN, FCGI_LISTENSOCK_FILENO, FCGI_MAX_CONNS, FCGI_MAX_REQS, FCGI_MAXTYPE,
    FCGI_MPXS_CONNS, FCGI_NULL_REQUEST_ID, FCGI_OVERLOADED, FCGI_PARAMS, FCGI_REQUEST_COMPLETE,
    FCGI_RESPONDER, FCGI_STDERR, FCGI_STDIN, FCGI_STDOUT, FCGI_UNKNOWN_ROLE, FCGI_UNKNOWN_TYPE,
    FCGI_VERSION_1, FCGI_BeginRequestBody, FCGI_EndRequestBody, FCGI_EndRequestBody_LEN,
    FCGI_Header, FCGI_UnknownTypeBody, FCGI_UnknownTypeBody_LEN, Record, decode_pair,
    encode_pair)

__all__ = ['FCGIApp']

FCGI_BeginRequestBody_LEN = 8

# flup's debug switches; flupfast never writes a debug file, the names stay for code that
# reads them.
DEBUG = 0
DEBUGLOG = '/tmp/fcgi_app.log'

_REQUEST_ID = 1  # the only request on its connection
_RECV_SIZE = 256 * 1024
_STDIN_RECORD = 0xFFF8  # the largest record content that is a multiple of 8

_PROTOCOL_STATUS = {
    fastcgi.FCGI_CANT_MPX_CONN: 'FCGI_CANT_MPX_CONN',
    fastcgi.FCGI_OVERLOADED: 'FCGI_OVERLOADED',
    fastcgi.FCGI_UNKNOWN_ROLE: 'FCGI_UNKNOWN_ROLE',
}


class FCGIApp(EnvironFilter):
    """A WSGI app whose requests are answered by a FastCGI backend (flup's
    ``flup.client.fcgi_app.FCGIApp``, which fails on Python 3 with AttributeError).

    ``connect`` is a Unix socket path or a (host, port) tuple; ``host`` and ``port`` may be
    given instead. ``filterEnviron`` (default) sends only the CGI variables of the environ.
    ``command`` (spawning the backend) is not implemented, as in flup.
    """

    def __init__(self, command=None, connect=None, host=None, port=None, filterEnviron=True):
        if host is not None:
            if port is None:
                raise ValueError('FCGIApp: host given without port')
            connect = (host, port)
        if (command is None) == (connect is None):
            raise ValueError('FCGIApp: give either command or connect (or host and port)')
        if command is not None:
            raise NotImplementedError('FCGIApp: launching and managing FastCGI programs is '
                                      'not implemented (flup neither); start the backend '
                                      'yourself and pass connect=')
        self._command = command
        self._connect = connect
        self._filterEnviron = filterEnviron

    def __call__(self, environ, start_response):
        sock = self._getConnection()
        try:
            params = fastcgi.encode_params(self._filtered(environ).items())
            send_buffers(sock, [fastcgi.encode_begin_request(_REQUEST_ID),
                                fastcgi.encode_stream(fastcgi.FCGI_PARAMS, _REQUEST_ID, params)])
            for chunk in input_chunks(environ):
                send_buffers(sock, fastcgi.frame_stdout(_REQUEST_ID, chunk, _STDIN_RECORD,
                                                        fastcgi.FCGI_STDIN))
            sock.sendall(fastcgi.encode_record(fastcgi.FCGI_STDIN, _REQUEST_ID))
        except BaseException:
            sock.close()
            raise
        return respond(self._stdout(sock, environ['wsgi.errors']), start_response, 'FCGIApp',
                       sock.close)

    def _stdout(self, sock, errors):
        """FCGI_STDOUT payloads until END_REQUEST; FCGI_STDERR goes to ``errors``."""
        parser = _impl.FastCGIParser()
        while True:
            data = sock.recv(_RECV_SIZE)
            if not data:
                raise BackendError('the FastCGI backend closed the connection before '
                                   'END_REQUEST')
            for record_type, request_id, payload in parser.feed(data):
                if request_id != _REQUEST_ID:
                    continue  # management records (none are asked for)
                if record_type == fastcgi.FCGI_STDOUT:
                    if payload:
                        yield payload
                elif record_type == fastcgi.FCGI_STDERR:
                    if payload:
                        errors.write(payload.decode('utf-8', 'replace'))
                elif record_type == fastcgi.FCGI_END_REQUEST:
                    _, protocol_status = fastcgi.decode_end_request(payload)
                    if protocol_status != fastcgi.FCGI_REQUEST_COMPLETE:
                        raise BackendError('the FastCGI backend refused the request: %s'
                                           % _PROTOCOL_STATUS.get(protocol_status,
                                                                  protocol_status))
                    return

    def _getConnection(self):
        return connect(self._connect)
