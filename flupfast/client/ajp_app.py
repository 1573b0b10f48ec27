"""``AJPApp``: a WSGI application that forwards each request to an AJP13 container (a Unix socket
or host and port) as mod_proxy_ajp would, and streams its answer back. flup has no AJP client;
this one completes the set beside FCGIApp and SCGIApp.

The packets are built and read by flupfast.protocols.ajp_webserver; one request per connection.
"""
from flupfast.client._proxy import (
    BackendError, EnvironFilter, backend_address, connect, input_chunks)
from flupfast.protocols import ajp_webserver
from flupfast.protocols.errors import AJPError

__all__ = ['AJPApp']

_RECV_SIZE = 256 * 1024


class AJPApp(EnvironFilter):
    """A WSGI app whose requests are answered by an AJP13 container.

    ``connect`` is a Unix socket path or a (host, port) tuple; ``host`` and ``port`` may be
    given instead. ``secret`` is mod_proxy_ajp's ``secret=``.
    """

    def __init__(self, connect=None, host=None, port=None, secret=None):
        self._connect = backend_address('AJPApp', connect, host, port)
        self._secret = secret

    def __call__(self, environ, start_response):
        sock = connect(self._connect)
        try:
            source = _BodySource(input_chunks(environ))
            first = source.take(ajp_webserver.MAX_BODY_PACKET_DATA)
            # mod_proxy_ajp sends the first body chunk unasked, right after the request.
            sock.sendall(self._forward_request(environ)
                         + (ajp_webserver.encode_body_packet(first) if first else b''))
            body = _Body(sock, ajp_webserver.ContainerPacketReader(), source)
            status, reason, headers = body.head()
            start_response('%d %s' % (status, reason), headers)
        except AJPError as exc:
            sock.close()
            raise BackendError(str(exc)) from None
        except BaseException:
            sock.close()
            raise
        return body

    def _forward_request(self, environ):
        headers = []
        for name, value in environ.items():
            if name.startswith('HTTP_') and isinstance(value, str):
                headers.append(('-'.join(p.capitalize() for p in name[5:].split('_')), value))
        for name, header in (('CONTENT_TYPE', 'Content-Type'),
                             ('CONTENT_LENGTH', 'Content-Length')):
            if environ.get(name):
                headers.append((header, environ[name]))
        path = environ.get('SCRIPT_NAME', '') + environ.get('PATH_INFO', '')
        return ajp_webserver.encode_forward_request(
            environ.get('REQUEST_METHOD', 'GET'), path or '/',
            protocol=environ.get('SERVER_PROTOCOL', 'HTTP/1.1'),
            remote_addr=environ.get('REMOTE_ADDR', '127.0.0.1'),
            server_name=environ.get('SERVER_NAME', 'localhost'),
            server_port=int(environ.get('SERVER_PORT') or 80),
            is_ssl=environ.get('HTTPS', 'off') in ('on', '1'), headers=headers,
            query_string=environ.get('QUERY_STRING') or None,
            remote_user=environ.get('REMOTE_USER'), auth_type=environ.get('AUTH_TYPE'),
            secret=self._secret)


class _BodySource:
    """The request body, handed out in the sizes the container asks for."""

    def __init__(self, chunks):
        self._chunks = chunks
        self._buf = b''

    def take(self, size):
        while len(self._buf) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buf += chunk
        data, self._buf = self._buf[:size], self._buf[size:]
        return data


class _Body:
    """The response: ``head()`` reads up to SEND_HEADERS (sending the request body as the
    container asks for it: one body packet per GET_BODY_CHUNK, empty at the end); iterating
    yields the body until END_RESPONSE; ``close()`` closes the connection."""

    def __init__(self, sock, reader, source):
        self._sock = sock
        self._reader = reader
        self._source = source
        self._pending = []

    def _events(self):
        while True:
            while self._pending:
                event = self._pending.pop(0)
                if event[0] == 'get_body':
                    size = min(event[1], ajp_webserver.MAX_BODY_PACKET_DATA)
                    self._sock.sendall(ajp_webserver.encode_body_packet(self._source.take(size)))
                    continue
                yield event
            data = self._sock.recv(_RECV_SIZE)
            if not data:
                raise BackendError('the AJP13 container closed the connection before '
                                   'END_RESPONSE')
            self._pending.extend(self._reader.feed(data))

    def head(self):
        self._iter = self._events()
        for event in self._iter:
            if event[0] == 'headers':
                return event[1], event[2], event[3]
            if event[0] == 'end':
                raise BackendError('the AJP13 container ended the response before its headers')
        raise BackendError('no response')

    def __iter__(self):
        try:
            for event in self._iter:
                if event[0] == 'body':
                    if event[1]:
                        yield event[1]
                elif event[0] == 'end':
                    return
        except AJPError as exc:
            raise BackendError(str(exc)) from None

    def close(self):
        self._sock.close()
