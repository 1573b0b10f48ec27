"""What FCGIApp and SCGIApp share: the backend connection, flup's environ filters, and the
CGI-style response head (``Status:`` and headers, then the body) turned into a WSGI answer.

No protocol framing here: each client encodes with its codec and yields its stdout bytes.
"""
import socket

from flupfast.protocols.errors import ProtocolError

# A response head longer than this is refused: real ones are a few hundred bytes; the cap stops
# a broken backend from making the proxy buffer its whole body looking for the blank line.
MAX_RESPONSE_HEAD = 1 << 20

# wsgi.input is forwarded in pieces of this size.
INPUT_CHUNK = 65536


class BackendError(ProtocolError):
    """The backend's answer cannot be turned into a response (closed early, bad head)."""


def backend_address(client, connect, host, port):
    """The backend's address from a client's ``connect`` or ``host`` and ``port`` (flup's
    keywords); ValueError naming ``client`` when neither is complete."""
    if host is not None:
        if port is None:
            raise ValueError('%s: host given without port' % client)
        return (host, port)
    if connect is None:
        raise ValueError('%s: give connect (or host and port)' % client)
    return connect


def connect(address):
    """A connected socket: a str is a Unix socket path, a tuple (host, port) TCP."""
    if isinstance(address, str):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(address)
        except BaseException:
            sock.close()
            raise
        return sock
    return socket.create_connection(address)


class EnvironFilter:
    """flup's choice of what of the WSGI environ is sent to the backend: with
    ``filterEnviron``, variables with the CGI prefixes and a few names; otherwise every
    upper-case name (flup client/fcgi_app.py:429-449)."""

    _environPrefixes = ['SERVER_', 'HTTP_', 'REQUEST_', 'REMOTE_', 'PATH_', 'CONTENT_']
    _environCopies = ['SCRIPT_NAME', 'QUERY_STRING', 'AUTH_TYPE']
    _environRenames = {}

    def _defaultFilterEnviron(self, environ):
        result = {}
        for name in list(environ):
            if name.startswith(tuple(self._environPrefixes)) or name in self._environCopies:
                result[name] = environ[name]
            if name in self._environRenames:
                result[self._environRenames[name]] = environ[name]
        return result

    def _lightFilterEnviron(self, environ):
        return {name: value for name, value in environ.items() if name.upper() == name}

    def _filtered(self, environ):
        if self._filterEnviron:
            params = self._defaultFilterEnviron(environ)
        else:
            params = self._lightFilterEnviron(environ)
        return {name: value for name, value in params.items() if isinstance(value, str)}


def input_chunks(environ):
    """The request body from wsgi.input, CONTENT_LENGTH bytes at most, in INPUT_CHUNK pieces."""
    left = int(environ.get('CONTENT_LENGTH') or 0)
    stream = environ['wsgi.input']
    while left > 0:
        chunk = stream.read(min(left, INPUT_CHUNK))
        if not chunk:
            break
        left -= len(chunk)
        yield chunk
    if left > 0:
        # The backend waits for CONTENT_LENGTH bytes: sending fewer would hang it.
        raise OSError('wsgi.input ended %d bytes before CONTENT_LENGTH' % left)


def parse_head(head, reason, status_line=False):
    """The header block (without its blank line) -> (status str, [(name, value)] str).

    Lines may end in CRLF or bare LF (flup drops a character per line of the latter). Names
    are lower-cased as flup does; ``Status`` becomes the status, given ``reason`` when it has
    no reason phrase; without it the status is 200 OK. With ``status_line`` (uwsgi) the head
    starts with an HTTP status line (``HTTP/1.1 200 OK``), whose status it is.
    """
    status = '200 OK'
    headers = []
    lines = head.split(b'\n')
    if status_line:
        version, _, status = lines.pop(0).strip().partition(b' ')
        if not version.startswith(b'HTTP/') or not status[:3].isdigit():
            raise BackendError('malformed status line %r' % (version + b' ' + status)[:200])
        status = status.decode('latin-1')
        status = status if ' ' in status else status + ' ' + reason
    for line in lines:
        line = line.strip()
        if not line:
            continue
        name, sep, value = line.partition(b':')
        if not sep or not name.strip():
            raise BackendError('malformed response header line %r' % line[:200])
        name = name.strip().lower().decode('latin-1')
        value = value.strip().decode('latin-1')
        if name == 'status':
            status = value if ' ' in value else value + ' ' + reason
        else:
            headers.append((name, value))
    return status, headers


def respond(chunks, start_response, reason, on_close, status_line=False):
    """Read the head from ``chunks`` (an iterator of stdout bytes), call ``start_response``
    and return the body as an iterable that streams the rest; ``on_close`` runs when the
    server closes it (or here, on an error before that)."""
    buf = bytearray()
    searched = 0
    try:
        while True:
            end = _end_of_head(buf, max(0, searched - 3))  # the blank line may straddle
            if end is not None:
                break
            if len(buf) > MAX_RESPONSE_HEAD:
                raise BackendError('response head exceeds %d bytes' % MAX_RESPONSE_HEAD)
            searched = len(buf)
            chunk = next(chunks, None)
            if chunk is None:
                raise BackendError('the backend ended its answer before the end of the '
                                   'response head')
            buf += chunk
        head_end, body_start = end
        status, headers = parse_head(bytes(buf[:head_end]), reason, status_line)
        start_response(status, headers)
    except BaseException:
        on_close()
        raise
    return _body(bytes(buf[body_start:]), chunks, on_close)


def _end_of_head(buf, start):
    """(end of the head, start of the body) once the blank line is in ``buf``, else None;
    ``buf[:start]`` is known to hold none."""
    if buf.startswith(b'\r\n'):
        return 0, 2  # no header lines at all
    if buf.startswith(b'\n'):
        return 0, 1
    found = None
    for sep in (b'\r\n\r\n', b'\n\n', b'\n\r\n'):
        pos = buf.find(sep, start)
        if pos >= 0 and (found is None or pos < found[0]):
            found = (pos, pos + len(sep))
    return found


def _body(first, chunks, on_close):
    try:
        if first:
            yield first
        for chunk in chunks:
            if chunk:
                yield chunk
    finally:
        on_close()
