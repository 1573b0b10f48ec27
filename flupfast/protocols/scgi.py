"""SCGI codec, pure Python: the request's header netstring in, its environ out.

No sockets, threads or WSGI here. ``flupfast._speedups`` has a compiled twin of
``decode_request`` with the same signature, results and errors.

The request (scgi protocol.txt) is one netstring ``<len>:<block>,`` whose block holds
``name NUL value NUL`` pairs, ``CONTENT_LENGTH`` first and ``SCGI`` = ``1`` among them, then
exactly CONTENT_LENGTH body bytes. The connection closes after the response. What real fronts
send is accepted as flup does (compat/known_differences.py ``scgi-netstring-strict``): a
repeated name keeps its last value (nginx before 1.23 sends one pair per header line, so two
``Cookie`` lines give two HTTP_COOKIE pairs), and a missing ``SCGI`` is allowed (nginx sends
it only through the stock scgi_params).
"""
from flupfast.limits import MAX_PARAMS_PAIRS, MAX_SCGI_HEADER_BYTES
from flupfast.protocols.errors import SCGIError

_DIGITS = b'0123456789'

# CONTENT_LENGTH beyond this is refused: no body is that large, and int() refuses strings of
# over 4300 digits with a ValueError (AJP13 has the same bound, protocols/ajp.py).
_MAX_CONTENT_LENGTH = (1 << 63) - 1


def decode_request(data, max_header=MAX_SCGI_HEADER_BYTES, max_pairs=MAX_PARAMS_PAIRS):
    """Decode the header netstring at the start of ``data`` (any bytes-like).

    Returns None while the netstring is incomplete, else ``(environ, content_length, used)``:
    a dict of latin-1 ``str``, the body length, and the bytes the netstring took (the body
    starts there). Raises SCGIError as soon as the bytes seen cannot start a valid request,
    so a client speaking HTTP to the SCGI port fails on its first byte, not after a timeout.
    """
    end = len(data)
    max_digits = len(str(max_header))
    # The length prefix: decimal digits, no leading zero (netstring rule), then ':'.
    pos = 0
    while pos < end and data[pos] in _DIGITS:
        pos += 1
        if pos > max_digits:
            raise SCGIError('netstring length has more than %d digits (header block cap '
                            '%d bytes)' % (max_digits, max_header))
    # Checked before waiting for ':', so a bad prefix fails without waiting for more bytes.
    if pos > 1 and data[0] == 0x30:  # '0'
        raise SCGIError('invalid netstring length %r: leading zero' % bytes(data[:pos]))
    length = int(bytes(data[:pos])) if pos else 0
    if length > max_header:
        raise SCGIError('SCGI header block of %d bytes exceeds the %d-byte cap'
                        % (length, max_header))
    if pos == end:
        return None
    if data[pos] != 0x3A:  # ':'
        raise SCGIError('invalid netstring length: expected digits then ":", got %r'
                        % bytes(data[:min(pos + 1, 16)]))
    if pos == 0:
        raise SCGIError('invalid netstring length: empty')
    start = pos + 1
    stop = start + length
    if end <= stop:
        return None
    if data[stop] != 0x2C:  # ','
        raise SCGIError('netstring not terminated by ","')
    environ, content_length = _decode_headers(bytes(data[start:stop]), max_pairs)
    return environ, content_length, stop + 1


def _decode_headers(block, max_pairs):
    """The header block's NUL-separated pairs -> (environ, content_length)."""
    if not block:
        raise SCGIError('missing CONTENT_LENGTH (empty header block)')
    if block[-1] != 0:
        raise SCGIError('header block does not end with NUL')
    fields = block[:-1].split(b'\x00')
    if len(fields) % 2:
        raise SCGIError('header block has a name without a value')
    if len(fields) > 2 * max_pairs:
        raise SCGIError('more than %d headers' % max_pairs)
    environ = {}
    for index in range(0, len(fields), 2):
        name = fields[index]
        if not name:
            raise SCGIError('empty header name')
        name = name.decode('latin-1')
        value = fields[index + 1].decode('latin-1')
        # The last value wins (flup's dict), except that the body's length must not change
        # after the first pair framed it: a repeat must say the same.
        if name == 'CONTENT_LENGTH' and index and value != environ.get(name, value):
            raise SCGIError('conflicting CONTENT_LENGTH %r after %r'
                            % (value, environ[name]))
        environ[name] = value
    if fields[0] != b'CONTENT_LENGTH':
        if 'CONTENT_LENGTH' in environ:
            raise SCGIError('CONTENT_LENGTH is not the first header')
        raise SCGIError('missing CONTENT_LENGTH')
    value = fields[1]
    if not value or value.strip(_DIGITS):
        raise SCGIError('invalid CONTENT_LENGTH %r' % value.decode('latin-1'))
    scgi = environ.get('SCGI')
    # nginx sends SCGI=1 only through the stock scgi_params, so a site's own scgi_param list
    # may lack it: accepted, as flup does (compat/known_differences.py scgi-netstring-strict).
    if scgi is not None and scgi != '1':
        raise SCGIError('unsupported SCGI version %r' % scgi)
    return environ, parse_content_length(environ['CONTENT_LENGTH'])


def parse_content_length(value, error=SCGIError):
    """CONTENT_LENGTH (a str of ASCII digits) -> int, at most 2**63 - 1; else ``error`` (the
    protocol's: uwsgi uses this too)."""
    digits = value.lstrip('0')
    # The length test first: int() refuses strings of over 4300 digits (and would be slow).
    if len(digits) > 19 or int(digits or '0') > _MAX_CONTENT_LENGTH:
        raise error('CONTENT_LENGTH of %d digits is too large' % len(value))
    return int(digits or '0')


def encode_netstring(data):
    """``<len>:<data>,`` (bytes)."""
    return b'%d:%s,' % (len(data), data)


def encode_request(environ, body=b''):
    """The request bytes a web server sends (for tests and clients): ``environ`` is an
    iterable of (name, value) or a dict; CONTENT_LENGTH (from ``body``) and SCGI=1 are put
    first unless given."""
    pairs = list(environ.items() if hasattr(environ, 'items') else environ)
    names = {name for name, _ in pairs}
    if 'CONTENT_LENGTH' not in names:
        pairs.insert(0, ('CONTENT_LENGTH', str(len(body))))
    if 'SCGI' not in names:
        pairs.insert(1, ('SCGI', '1'))
    block = b''.join(
        (n.encode('latin-1') if isinstance(n, str) else n) + b'\x00'
        + (v.encode('latin-1') if isinstance(v, str) else v) + b'\x00' for n, v in pairs)
    return encode_netstring(block) + body
