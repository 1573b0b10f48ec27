"""AJP13 codec, pure Python: the packet parser, the FORWARD_REQUEST and body-chunk decoders,
and the container-side encoders.

No sockets, threads or WSGI here. ``flupfast._speedups`` has compiled twins of ``AJPParser``,
``decode_forward_request``, ``decode_body_chunk`` and ``frame_body`` with the same names,
signatures, results and error messages. The cold encoders live only here (the compiled module
re-exports these very functions), so each exists once.

Spec: "The Apache Tomcat Connector - AJPv13" (tomcat.apache.org/connectors-doc/ajp/ajpv13a.html);
what mod_proxy_ajp actually sends: httpd modules/proxy/ajp_header.c (ajp_marshal_into_msgb).

Packets (spec "Packet Format")::

    web server -> container:  0x12 0x34  length(2)  payload[length]
    container -> web server:  'A'  'B'   length(2)  payload[length]

Data types: byte; boolean (one byte); integer (2 bytes, big-endian); string (integer length,
the bytes, a NUL that the length does not count; length 0xFFFF is a null string with no bytes
and no NUL). Body packets from the web server carry no type byte (integer length + data).
"""
import operator
import re
import struct

from flupfast.limits import AJP_MAX_PACKET
from flupfast.protocols.errors import AJPError

# -- flup's names and tables (flup/server/ajp_base.py:49-138), kept verbatim for code that
# imports them from the flup-compatible facade.

# Packet header prefixes.
SERVER_PREFIX = b'\x12\x34'
CONTAINER_PREFIX = b'AB'

# Server packet types (the first payload byte, an int).
PKTTYPE_FWD_REQ = 0x02
PKTTYPE_SHUTDOWN = 0x07
PKTTYPE_PING = 0x08
PKTTYPE_CPING = 0x0a

# Container packet types: flup keeps these as one-byte bytes, to concatenate.
PKTTYPE_SEND_BODY = b'\x03'
PKTTYPE_SEND_HEADERS = b'\x04'
PKTTYPE_END_RESPONSE = b'\x05'
PKTTYPE_GET_BODY = b'\x06'
PKTTYPE_CPONG = b'\x09'

methodTable = [
    None,
    b'OPTIONS',
    b'GET',
    b'HEAD',
    b'POST',
    b'PUT',
    b'DELETE',
    b'TRACE',
    b'PROPFIND',
    b'PROPPATCH',
    b'MKCOL',
    b'COPY',
    b'MOVE',
    b'LOCK',
    b'UNLOCK',
    b'ACL',
    b'REPORT',
    b'VERSION-CONTROL',
    b'CHECKIN',
    b'CHECKOUT',
    b'UNCHECKOUT',
    b'SEARCH',
    b'MKWORKSPACE',
    b'UPDATE',
    b'LABEL',
    b'MERGE',
    b'BASELINE_CONTROL',
    b'MKACTIVITY'
    ]

requestHeaderTable = [
    None,
    b'Accept',
    b'Accept-Charset',
    b'Accept-Encoding',
    b'Accept-Language',
    b'Authorization',
    b'Connection',
    b'Content-Type',
    b'Content-Length',
    b'Cookie',
    b'Cookie2',
    b'Host',
    b'Pragma',
    b'Referer',
    b'User-Agent'
    ]

attributeTable = [
    None,
    b'CONTEXT',
    b'SERVLET_PATH',
    b'REMOTE_USER',
    b'AUTH_TYPE',
    b'QUERY_STRING',
    b'JVM_ROUTE',
    b'SSL_CERT',
    b'SSL_CIPHER',
    b'SSL_SESSION',
    None,  # name follows
    b'SSL_KEY_SIZE'
    ]

responseHeaderTable = [
    None,
    b'content-type',
    b'content-language',
    b'content-length',
    b'date',
    b'last-modified',
    b'location',
    b'set-cookie',
    b'set-cookie2',
    b'servlet-engine',
    b'status',
    b'www-authenticate'
    ]

# -- Codes flup lacks, named after the spec.

# Method code 0xFF: the real method is in a stored_method attribute (mod_jk's SC_M_JK_STORED,
# used for PATCH and any verb outside the table).
METHOD_STORED = 0xFF

# Attribute codes (spec "Request Packet Structure", optional information).
ATTR_CONTEXT = 0x01
ATTR_SERVLET_PATH = 0x02
ATTR_REMOTE_USER = 0x03
ATTR_AUTH_TYPE = 0x04
ATTR_QUERY_STRING = 0x05
ATTR_ROUTE = 0x06
ATTR_SSL_CERT = 0x07
ATTR_SSL_CIPHER = 0x08
ATTR_SSL_SESSION = 0x09
ATTR_REQ_ATTRIBUTE = 0x0A
ATTR_SSL_KEY_SIZE = 0x0B
ATTR_SECRET = 0x0C
ATTR_STORED_METHOD = 0x0D
ATTR_ARE_DONE = 0xFF

# Request header names are coded as 0xA0 then the index into requestHeaderTable.
HEADER_CODE_PREFIX = 0xA0

# The largest data length a SEND_BODY_CHUNK can declare: its payload (type, length, data, NUL)
# must fit the 16-bit packet length.
MAX_BODY_CHUNK_DATA = 0xFFFF - 4

# One CPONG packet, the whole answer to a CPING (spec "Response Packet Structure").
CPONG_PACKET = CONTAINER_PREFIX + b'\x00\x01' + PKTTYPE_CPONG

# -- Decoding tables derived from the above: environ keys as str, by code.

# REQUEST_METHOD by method code. Code 26 is the HTTP method BASELINE-CONTROL (RFC 3253; httpd and
# Tomcat spell it so); the spec's table and flup's methodTable write BASELINE_CONTROL, a verb no
# client sends.
METHOD_NAMES = (None,) + tuple(
    'BASELINE-CONTROL' if m == b'BASELINE_CONTROL' else m.decode('latin-1')
    for m in methodTable[1:])


# A header name a front passes as a string may hold what the client wrote. One with anything
# but letters, digits and '-' is dropped, as httpd drops it from its own CGI variables
# (known_differences 'ajp-header-name-dropped'): 'Content_Length' would otherwise become
# CONTENT_LENGTH and set the body's framing, and 'X_Forwarded-For' pass as X-Forwarded-For.
_plain_header_name = re.compile(rb'[A-Za-z0-9-]*\Z').match


def _header_key(name):
    """flup's Request.addHeader naming (ajp_base.py:525): '-' -> '_', ASCII upper case, and
    HTTP_ before all but Content-Type and Content-Length; None for a name that is dropped."""
    if _plain_header_name(name) is None:
        return None
    name = name.replace(b'-', b'_').upper()
    if name not in (b'CONTENT_TYPE', b'CONTENT_LENGTH'):
        name = b'HTTP_' + name
    return name.decode('latin-1')


# environ key by coded request header (0xA0xx, xx = index).
REQUEST_HEADER_KEYS = (None,) + tuple(_header_key(h) for h in requestHeaderTable[1:])

# environ key by string attribute code 0x01-0x09 (flup's attributeTable names).
ATTRIBUTE_KEYS = (None,) + tuple(a.decode('latin-1') for a in attributeTable[1:10])

# The spec's field names, used in error messages.
ATTRIBUTE_FIELDS = (None, 'context', 'servlet_path', 'remote_user', 'auth_type', 'query_string',
                    'route', 'ssl_cert', 'ssl_cipher', 'ssl_session', 'req_attribute',
                    'ssl_key_size', 'secret', 'stored_method')

# Coded response header name (the 2 bytes that replace the string) by lower-case name.
_RESPONSE_HEADER_CODES = {name: bytes((HEADER_CODE_PREFIX, i))
                          for i, name in enumerate(responseHeaderTable) if name is not None}

# Content-Length beyond this is refused: no body is that large, and the compiled twin keeps
# lengths in a signed 64-bit integer.
_MAX_CONTENT_LENGTH = (1 << 63) - 1

_HEADER = struct.Struct('>2sH')
_U16 = struct.Struct('>H')
_BODY_HEADER = struct.Struct('>2sHBH')       # 'AB', payload length, 0x03, data length
_BODY_TRAILER = b'\x00'                       # the NUL after SEND_BODY_CHUNK data (shared)


# -- Packets ----------------------------------------------------------------------------------

class AJPParser:
    """Incremental parser of web-server packets: ``feed(data)`` returns the list of payloads
    (``bytes``, without the 4-byte header) of the packets it completed.

    ``data`` may be any bytes-like object split anywhere, including a view of a reused receive
    buffer: what is kept is copied. The magic is checked once two bytes of a packet are in,
    the length once four are: a payload above ``max_packet - 4`` bytes is refused before any
    of it is buffered. Raises ``AJPError`` and nothing else; after an error the parser is
    unusable (the connection must close).
    """

    def __init__(self, max_packet=AJP_MAX_PACKET):
        max_packet = operator.index(max_packet)
        if max_packet < 5:
            raise ValueError('max_packet must be at least 5, not %d' % max_packet)
        self.max_packet = max_packet
        self._buf = bytearray()

    @property
    def pending(self):
        """How many bytes of an incomplete packet are held."""
        return len(self._buf)

    def feed(self, data):
        packets = []
        if type(data) is not bytes and type(data) is not bytearray:
            data = memoryview(data).cast('B')
        if self._buf:
            self._buf += data
            consumed = self._parse(self._buf, packets)
            del self._buf[:consumed]
        else:
            consumed = self._parse(data, packets)
            if consumed < len(data):
                self._buf += data[consumed:]
        return packets

    def _parse(self, data, packets):
        pos = 0
        end = len(data)
        limit = self.max_packet - 4
        while end - pos >= 2:
            if data[pos] != 0x12 or data[pos + 1] != 0x34:
                raise AJPError(_bad_magic(data[pos], data[pos + 1]))
            if end - pos < 4:
                break
            length = (data[pos + 2] << 8) | data[pos + 3]
            if length > limit:
                raise AJPError('AJP packet of %d bytes exceeds max_packet=%d'
                               % (length + 4, self.max_packet))
            stop = pos + 4 + length
            if stop > end:
                break
            packets.append(bytes(data[pos + 4:stop]))
            pos = stop
        return pos


def _bad_magic(first, second):
    message = 'bad AJP packet magic 0x%02X%02X (expected 0x1234)' % (first, second)
    if 0x41 <= first <= 0x5A and 0x41 <= second <= 0x5A:
        message += '; is an HTTP client talking to the AJP port?'
    return message


# -- FORWARD_REQUEST --------------------------------------------------------------------------

def _truncated(what):
    return AJPError('truncated FORWARD_REQUEST: no room for %s' % what)


def _string(data, pos, end, what):
    """One AJP string at ``pos``: (bytes or None for a null string, position after it)."""
    if end - pos < 2:
        raise _truncated('the length of ' + what)
    length = (data[pos] << 8) | data[pos + 1]
    pos += 2
    if length == 0xFFFF:
        return None, pos
    stop = pos + length
    if stop > end:
        raise AJPError('AJP string %s of %d bytes runs past the end of the packet'
                       % (what, length))
    if stop == end or data[stop] != 0:
        raise AJPError('AJP string %s lacks its NUL terminator' % what)
    return data[pos:stop], stop + 1


def parse_content_length(value):
    """CONTENT_LENGTH (str) -> int: ASCII digits only, at most 2**63 - 1; else AJPError."""
    if not (value and value.isascii() and value.isdigit()):
        raise AJPError('invalid Content-Length %r' % value)
    digits = value.lstrip('0')
    # The length test first: int() refuses strings of over 4300 digits (and would be slow).
    if len(digits) > 19 or int(digits or '0') > _MAX_CONTENT_LENGTH:
        raise AJPError('Content-Length %s is too large' % value)
    return int(digits or '0')


def decode_forward_request(payload):
    """Decode a FORWARD_REQUEST payload (from its 0x02 type byte) into
    ``(environ, content_length, chunked, secret)``.

    ``environ`` maps latin-1 str to str as flup's ajp_base builds it (ajp_base.py:670-730,
    Request.set*/addHeader/addAttribute): REQUEST_METHOD, SERVER_PROTOCOL, REQUEST_URI,
    REMOTE_ADDR, REMOTE_HOST, SERVER_NAME, SERVER_PORT (str), HTTPS='on' if is_ssl; headers
    as HTTP_<NAME> (CONTENT_TYPE and CONTENT_LENGTH bare); attributes under flup's names,
    req_attribute (0x0A) as its own name, SSL_KEY_SIZE as str.

    Unlike flup: a repeated header's values are joined with ', ' (flup keeps the last); a
    null string (length 0xFFFF) leaves its header or attribute out (flup stores ''), while
    the five fixed strings become '' as in flup so the keys WSGI requires stay present;
    method code 0xFF takes its verb from the stored_method attribute (0x0D), and the secret
    (0x0C) is returned, never put in environ (flup fails on both).

    ``content_length`` is the Content-Length header as an int, or None; ``chunked`` is True
    when there is none and Transfer-Encoding names chunked (the body must then be pulled with
    GET_BODY_CHUNK until an empty chunk); ``secret`` is a str or None. Raises AJPError.
    """
    data = payload
    if type(data) is not bytes:
        data = bytes(data)
    end = len(data)
    if end == 0 or data[0] != PKTTYPE_FWD_REQ:
        raise AJPError('not a FORWARD_REQUEST payload (type byte %s)'
                       % ('0x%02X' % data[0] if end else 'missing'))
    if end < 2:
        raise _truncated('the method')
    code = data[1]
    if code == METHOD_STORED:
        method = None
    elif 0 < code < len(METHOD_NAMES):
        method = METHOD_NAMES[code]
    else:
        raise AJPError('unknown AJP method code 0x%02X' % code)

    # Spec: prefix, method, protocol, req_uri, remote_addr, remote_host, server_name,
    # server_port (integer), is_ssl (boolean), num_headers (integer), headers, attributes, 0xFF.
    environ = {}
    pos = 2
    fixed = []
    for what in ('protocol', 'req_uri', 'remote_addr', 'remote_host', 'server_name'):
        value, pos = _string(data, pos, end, what)
        fixed.append('' if value is None else value.decode('latin-1'))
    environ['REQUEST_METHOD'] = method  # replaced below when stored; keeps flup's key order
    (environ['SERVER_PROTOCOL'], environ['REQUEST_URI'], environ['REMOTE_ADDR'],
     environ['REMOTE_HOST'], environ['SERVER_NAME']) = fixed
    if end - pos < 2:
        raise _truncated('server_port')
    environ['SERVER_PORT'] = str((data[pos] << 8) | data[pos + 1])
    if end - pos < 3:
        raise _truncated('is_ssl')
    if data[pos + 2]:
        environ['HTTPS'] = 'on'
    if end - pos < 5:
        raise _truncated('num_headers')
    num_headers = (data[pos + 3] << 8) | data[pos + 4]
    pos += 5

    for _ in range(num_headers):
        if end - pos < 2:
            raise _truncated('a header name')
        if data[pos] == HEADER_CODE_PREFIX:
            index = data[pos + 1]
            if not 0 < index < len(REQUEST_HEADER_KEYS):
                raise AJPError('unknown AJP request header code 0xA0%02X' % index)
            key = REQUEST_HEADER_KEYS[index]
            pos += 2
        else:
            name, pos = _string(data, pos, end, 'header name')
            key = None if name is None else _header_key(name)
        value, pos = _string(data, pos, end, 'header value')
        if key is None or value is None:
            continue
        value = value.decode('latin-1')
        old = environ.get(key)
        environ[key] = value if old is None else old + ', ' + value

    # The body framing comes from the headers alone (an attribute may not change it).
    length = environ.get('CONTENT_LENGTH')
    if length is not None:
        content_length = parse_content_length(length)
        chunked = False
    else:
        content_length = None
        chunked = 'chunked' in environ.get('HTTP_TRANSFER_ENCODING', '').lower()

    secret = stored = None
    while True:
        if pos >= end:
            raise AJPError('FORWARD_REQUEST lacks the 0xFF that ends its attributes')
        code = data[pos]
        pos += 1
        if code == ATTR_ARE_DONE:
            break
        if code == ATTR_REQ_ATTRIBUTE:
            name, pos = _string(data, pos, end, 'req_attribute name')
            value, pos = _string(data, pos, end, 'req_attribute value')
            if name is not None and value is not None:
                environ[name.decode('latin-1')] = value.decode('latin-1')
        elif code == ATTR_SSL_KEY_SIZE:
            if end - pos < 2:
                raise _truncated('ssl_key_size')
            environ['SSL_KEY_SIZE'] = str((data[pos] << 8) | data[pos + 1])
            pos += 2
        elif ATTR_CONTEXT <= code <= ATTR_STORED_METHOD:  # the string attributes
            value, pos = _string(data, pos, end, ATTRIBUTE_FIELDS[code])
            if value is None:
                continue
            if code == ATTR_SECRET:
                secret = value.decode('latin-1')
            elif code == ATTR_STORED_METHOD:
                stored = value.decode('latin-1')
                if method is None:
                    environ['REQUEST_METHOD'] = stored
            else:
                environ[ATTRIBUTE_KEYS[code]] = value.decode('latin-1')
        else:
            raise AJPError('unknown AJP attribute code 0x%02X' % code)
    if pos != end:
        raise AJPError('%d bytes after the 0xFF that ends FORWARD_REQUEST' % (end - pos))
    if method is None and stored is None:
        raise AJPError('method code 0xFF (stored method) without a stored_method attribute')
    return environ, content_length, chunked, secret


# -- Request body -----------------------------------------------------------------------------

def decode_body_chunk(payload):
    """The data of a body packet's payload: a 2-byte length, then that many bytes (spec
    "Request Packet Structure", no type byte). An empty payload or a zero length is the end
    of the body, b''. Bytes after the declared data are ignored, as flup does
    (ajp_base.py:786); a length running past the payload is AJPError."""
    end = len(payload)
    if end == 0:
        return b''
    if end < 2:
        raise AJPError('body chunk of 1 byte has no room for its length')
    length = (payload[0] << 8) | payload[1]
    if length > end - 2:
        raise AJPError('body chunk declares %d bytes but carries %d' % (length, end - 2))
    return bytes(payload[2:2 + length])


# -- Container packets ------------------------------------------------------------------------

def encode_packet(payload, prefix=CONTAINER_PREFIX):
    """A whole packet: ``prefix`` ('AB' from the container, 0x1234 from the web server), the
    payload length, the payload."""
    if len(payload) > 0xFFFF:
        raise ValueError('AJP packet payload of %d bytes exceeds 65535' % len(payload))
    return _HEADER.pack(prefix, len(payload)) + payload


def encode_string(s):
    """One AJP string (flup's encodeString, ajp_base.py:211): length, bytes, NUL. Length
    0xFFFF would read as the null string, so 65534 bytes is the most a string can hold."""
    if len(s) >= 0xFFFF:
        raise ValueError('AJP string of %d bytes exceeds 65534' % len(s))
    return _U16.pack(len(s)) + s + b'\x00'


def encode_response_header(name, value):
    """One SEND_HEADERS name/value (bytes): a name whose lower case is in
    responseHeaderTable is coded 0xA0xx (flup's encodeResponseHeader, ajp_base.py:215)."""
    code = _RESPONSE_HEADER_CODES.get(name.lower())
    return (code if code is not None else encode_string(name)) + encode_string(value)


def decode_string(data, pos=0):
    """One AJP string at ``pos`` of ``data``: ``(bytes, or None for the null string, position
    after its NUL)``. AJPError if it runs past the end or lacks its NUL."""
    return _string(data, pos, len(data), 'string')


def encode_send_headers(status_code, reason, headers):
    """One SEND_HEADERS packet: status, reason (bytes), then (bytes name, bytes value) pairs;
    names whose lower case is in responseHeaderTable are coded 0xA0xx, as flup's
    encodeResponseHeader (ajp_base.py:215). ValueError if it exceeds 65535 bytes of payload
    (the caller must also respect the web server's packet size)."""
    parts = [PKTTYPE_SEND_HEADERS, _U16.pack(status_code), encode_string(reason),
             _U16.pack(len(headers))]
    for name, value in headers:
        parts.append(encode_response_header(name, value))
    return encode_packet(b''.join(parts))


def encode_get_body_chunk(size):
    """GET_BODY_CHUNK asking for ``size`` bytes, clamped to 0..65535 (the integer's range)."""
    size = 0 if size < 0 else 0xFFFF if size > 0xFFFF else size
    return encode_packet(PKTTYPE_GET_BODY + _U16.pack(size))


def encode_end_response(reuse):
    """END_RESPONSE; ``reuse`` true tells the web server it may send the next request."""
    return encode_packet(PKTTYPE_END_RESPONSE + (b'\x01' if reuse else b'\x00'))


def frame_body(data, max_data):
    """Frame ``data`` as SEND_BODY_CHUNK packets of at most ``max_data`` data bytes each.

    Returns a list of buffers for ``sendmsg``, per packet: a 7-byte header ('AB', payload
    length n + 4, 0x03, n), the data (a memoryview slice of ``data``; ``data`` itself when it
    is bytes that fit one packet) and a shared b'\\x00' trailer. The data is never copied.
    ``max_data`` is 8184 for a web server's default 8 KiB packets, 65528 for 64 KiB ones;
    it must be in 1..65531. Empty ``data`` gives [].
    """
    max_data = operator.index(max_data)
    if not 0 < max_data <= MAX_BODY_CHUNK_DATA:
        raise ValueError('max_data must be in 1..%d, not %d' % (MAX_BODY_CHUNK_DATA, max_data))
    if type(data) is bytes:
        view = None
        total = len(data)
    else:
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast('B')
        total = len(view)
    if total == 0:
        return []
    pack = _BODY_HEADER.pack
    if total <= max_data:
        return [pack(CONTAINER_PREFIX, total + 4, 3, total),
                data if view is None else view, _BODY_TRAILER]
    if view is None:
        view = memoryview(data)
    full = pack(CONTAINER_PREFIX, max_data + 4, 3, max_data)  # shared by every full packet
    buffers = []
    append = buffers.append
    for pos in range(0, total - max_data, max_data):
        append(full)
        append(view[pos:pos + max_data])
        append(_BODY_TRAILER)
    pos = (total - 1) // max_data * max_data
    last = total - pos
    append(full if last == max_data else pack(CONTAINER_PREFIX, last + 4, 3, last))
    append(view[pos:])
    append(_BODY_TRAILER)
    return buffers
