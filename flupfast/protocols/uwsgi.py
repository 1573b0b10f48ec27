"""uwsgi codec, pure Python: the request's packet header and vars block in, its environ out.

No sockets, threads or WSGI here. ``flupfast._speedups`` has a compiled twin of
``decode_uwsgi_request`` with the same signature, results and errors.

The request (the uwsgi protocol as nginx's ngx_http_uwsgi_module and Apache's mod_proxy_uwsgi
send it) is a 4-byte header: ``modifier1`` (uint8), ``datasize`` (uint16, little-endian: the
vars block's length), ``modifier2`` (uint8); then the vars block, ``datasize`` bytes of pairs
each ``key_size`` (uint16 LE), key, ``val_size`` (uint16 LE), value; then CONTENT_LENGTH body
bytes. modifier1 0 is a WSGI request; no other is served. The response is plain HTTP/1.x on
the same socket and the connection closes after it: ``status_prefix`` starts its status line
and ``url_scheme`` reads the request's scheme, both as uWSGI does. As for SCGI, a repeated
key keeps its last value (nginx before 1.23 sends one var per header line) and a repeated
CONTENT_LENGTH must agree; CONTENT_LENGTH empty or absent means no body (uwsgi_params
sends ``$content_length``, empty for a GET).
"""
import re

from flupfast.limits import MAX_PARAMS_PAIRS, MAX_UWSGI_VARS_BYTES
from flupfast.protocols.errors import UWSGIError
from flupfast.protocols.scgi import parse_content_length

HEADER_SIZE = 4
# modifier1 of a WSGI request (uWSGI's "Python/WSGI" packet type).
MODIFIER1_WSGI = 0


def decode_uwsgi_request(data, max_vars=MAX_UWSGI_VARS_BYTES, max_pairs=MAX_PARAMS_PAIRS):
    """Decode the packet header and vars block at the start of ``data`` (any bytes-like).

    Returns None while they are incomplete, else ``(environ, content_length, used)``: a dict
    of latin-1 ``str``, the body length, and the bytes the header and vars took (the body
    starts there). Raises UWSGIError as soon as the header is known to be unserved or over the
    cap, so a client speaking HTTP to the uwsgi port fails on its first byte ('G' is 71).
    """
    end = len(data)
    if end == 0:
        return None
    if data[0] != MODIFIER1_WSGI:
        raise UWSGIError('modifier1 %d is not served (only 0, a WSGI request)' % data[0])
    if end < HEADER_SIZE:
        return None
    size = data[1] | data[2] << 8
    if size > max_vars:
        raise UWSGIError('uwsgi vars block of %d bytes exceeds the %d-byte cap'
                         % (size, max_vars))
    stop = HEADER_SIZE + size
    if end < stop:
        return None
    environ, content_length = _decode_vars(bytes(data[HEADER_SIZE:stop]), max_pairs)
    return environ, content_length, stop


def _decode_vars(block, max_pairs):
    """The vars block's length-prefixed pairs -> (environ, content_length)."""
    environ = {}
    end = len(block)
    pos = 0
    pairs = 0
    while pos < end:
        if pairs == max_pairs:
            raise UWSGIError('more than %d vars' % max_pairs)
        if end - pos < 2:
            raise UWSGIError('vars block ends inside a key size')
        size = block[pos] | block[pos + 1] << 8
        pos += 2
        if size == 0:
            raise UWSGIError('empty var name')
        if end - pos < size:
            raise UWSGIError('key of %d bytes runs past the vars block' % size)
        name = block[pos:pos + size].decode('latin-1')
        pos += size
        if end - pos < 2:
            raise UWSGIError('vars block ends inside the value size of %r' % name)
        size = block[pos] | block[pos + 1] << 8
        pos += 2
        if end - pos < size:
            raise UWSGIError('value of %d bytes runs past the vars block' % size)
        value = block[pos:pos + size].decode('latin-1')
        pos += size
        # The last value wins, except that the body's length must not change once given.
        if name == 'CONTENT_LENGTH' and value != environ.get(name, value):
            raise UWSGIError('conflicting CONTENT_LENGTH %r after %r' % (value, environ[name]))
        environ[name] = value
        pairs += 1
    value = environ.get('CONTENT_LENGTH', '')
    if not value:
        return environ, 0
    if value.strip('0123456789'):
        raise UWSGIError('invalid CONTENT_LENGTH %r' % value)
    return environ, parse_content_length(value, UWSGIError)


def _sized(text):
    data = text.encode('latin-1') if isinstance(text, str) else bytes(text)
    return len(data).to_bytes(2, 'little') + data


def encode_request(environ, body=b'', modifier1=MODIFIER1_WSGI, modifier2=0):
    """The request bytes a web server sends (for tests and clients): ``environ`` is an
    iterable of (name, value) or a dict; CONTENT_LENGTH (from ``body``) is added unless
    given. Raises ValueError if a name, a value or the vars block is too long for the wire."""
    pairs = list(environ.items() if hasattr(environ, 'items') else environ)
    if 'CONTENT_LENGTH' not in {name for name, _ in pairs}:
        pairs.append(('CONTENT_LENGTH', str(len(body))))
    try:
        block = b''.join(_sized(name) + _sized(value) for name, value in pairs)
        header = bytes((modifier1,)) + len(block).to_bytes(2, 'little') + bytes((modifier2,))
    except OverflowError:
        raise ValueError('a uwsgi var or vars block is longer than 65,535 bytes') from None
    return header + block + body


# The answer's status line repeats the request's SERVER_PROTOCOL, as uWSGI does; nginx
# (ngx_http_parse_status_line) and Apache mod_proxy_uwsgi ("HTTP/#.# ###") read
# ``HTTP/<digit>.<digit>``. Anything else (a missing or odd value) answers HTTP/1.0, uWSGI's
# default; never echoing it keeps a stray CR/LF out of the response.
_HTTP_VERSION = re.compile(r'HTTP/[0-9]\.[0-9]\Z')
DEFAULT_STATUS_PREFIX = b'HTTP/1.0 '
_prefixes = {}


def status_prefix(environ):
    """``SERVER_PROTOCOL`` and a space, as bytes, when it is an HTTP version; else HTTP/1.0."""
    protocol = environ.get('SERVER_PROTOCOL')
    prefix = _prefixes.get(protocol)
    if prefix is None:
        if type(protocol) is str and _HTTP_VERSION.match(protocol):
            prefix = _prefixes[protocol] = protocol.encode('ascii') + b' '
        else:
            prefix = DEFAULT_STATUS_PREFIX
    return prefix


def url_scheme(environ):
    """wsgi.url_scheme of a uwsgi request: ``UWSGI_SCHEME`` (uWSGI's own override) if set,
    else HTTPS ``on``/``1`` (any case, as uWSGI reads it) gives https, else
    ``REQUEST_SCHEME`` (uwsgi_params' ``$scheme``); only ``http`` and ``https`` are taken."""
    value = environ.get('UWSGI_SCHEME')
    if value:
        value = value.lower()
        if value in _SCHEMES:
            return value
    value = environ.get('HTTPS')
    if value:
        return 'https' if value.lower() in ('on', '1') else 'http'
    value = environ.get('REQUEST_SCHEME')
    if value:
        value = value.lower()
        if value in _SCHEMES:
            return value
    return 'http'


_SCHEMES = frozenset(('http', 'https'))
