"""AJP13, the web server's side, pure Python: FORWARD_REQUEST and request-body packets encoded,
the container's packets decoded. For flupfast.client (a health check, AJPApp); the server never
imports it.

No sockets or WSGI here. Layouts as in ajp.py (spec "Request Packet Structure", "Response
Packet Structure"), written the way httpd's mod_proxy_ajp writes them (ajp_header.c): coded
names for the headers in requestHeaderTable, the query string as an attribute.
"""
import struct

from flupfast.protocols import ajp
from flupfast.protocols.errors import AJPError

__all__ = ['ContainerPacketReader', 'encode_body_packet', 'encode_forward_request',
           'MAX_BODY_PACKET_DATA']

_U16 = struct.Struct('>H')

# Request body data per packet: httpd's default 8 KiB packet less the 4-byte packet header and
# the 2-byte chunk length (8186), which every container accepts.
MAX_BODY_PACKET_DATA = 8192 - 6

_METHOD_CODES = {name: code for code, name in enumerate(ajp.METHOD_NAMES) if name}
_HEADER_CODES = {name.lower(): code for code, name in enumerate(ajp.requestHeaderTable) if name}


def _string(value):
    """An AJP string (str as latin-1, or bytes); None is the null string."""
    if value is None:
        return b'\xff\xff'
    if isinstance(value, str):
        value = value.encode('latin-1')
    return ajp.encode_string(value)


def encode_forward_request(method, uri, protocol='HTTP/1.1', remote_addr='127.0.0.1',
                           remote_host=None, server_name='localhost', server_port=80,
                           is_ssl=False, headers=(), query_string=None, remote_user=None,
                           auth_type=None, secret=None):
    """One FORWARD_REQUEST packet. ``headers`` are (name, value) str pairs; ``uri`` is the path
    alone (AJP carries the query string as an attribute); a method outside the table goes as
    0xFF plus a stored_method attribute, as httpd does for PATCH."""
    code = _METHOD_CODES.get(method, ajp.METHOD_STORED)
    parts = [bytes((ajp.PKTTYPE_FWD_REQ, code)), _string(protocol), _string(uri),
             _string(remote_addr), _string(remote_host), _string(server_name),
             struct.pack('>HBH', server_port, bool(is_ssl), len(headers))]
    for name, value in headers:
        coded = _HEADER_CODES.get(name.lower().encode('latin-1'))
        parts.append(bytes((ajp.HEADER_CODE_PREFIX, coded)) if coded else _string(name))
        parts.append(_string(value))
    for attribute, value in ((ajp.ATTR_REMOTE_USER, remote_user), (ajp.ATTR_AUTH_TYPE, auth_type),
                             (ajp.ATTR_QUERY_STRING, query_string), (ajp.ATTR_SECRET, secret)):
        if value:
            parts += (bytes((attribute,)), _string(value))
    if code == ajp.METHOD_STORED:
        parts += (bytes((ajp.ATTR_STORED_METHOD,)), _string(method))
    parts.append(bytes((ajp.ATTR_ARE_DONE,)))
    return ajp.encode_packet(b''.join(parts), ajp.SERVER_PREFIX)


def encode_body_packet(data):
    """One request-body packet (chunk length, data); b'' is the empty packet that ends a body."""
    payload = _U16.pack(len(data)) + data if data else b''
    return ajp.encode_packet(payload, ajp.SERVER_PREFIX)


class ContainerPacketReader:
    """Incremental reader of the container's packets: ``feed(data)`` returns a list of
    ``('headers', status, reason, [(name, value)])`` (str), ``('body', bytes)``,
    ``('end', reuse)``, ``('get_body', size)`` or ``('cpong',)``; anything malformed is an
    AJPError."""

    def __init__(self):
        self._buf = bytearray()

    def feed(self, data):
        buf = self._buf
        buf += data
        events = []
        pos = 0
        while len(buf) - pos >= 4:
            if buf[pos:pos + 2] != ajp.CONTAINER_PREFIX:
                raise AJPError('bad container packet magic %r' % bytes(buf[pos:pos + 2]))
            length = _U16.unpack_from(buf, pos + 2)[0]
            if len(buf) - pos - 4 < length:
                break
            events.append(_decode(bytes(buf[pos + 4:pos + 4 + length])))
            pos += 4 + length
        del buf[:pos]
        return events


def _decode(payload):
    kind = payload[:1]
    try:
        if kind == ajp.PKTTYPE_SEND_HEADERS:
            status = _U16.unpack_from(payload, 1)[0]
            reason, pos = ajp.decode_string(payload, 3)
            count = _U16.unpack_from(payload, pos)[0]
            pos += 2
            headers = []
            for _ in range(count):
                if payload[pos] == ajp.HEADER_CODE_PREFIX:
                    name = ajp.responseHeaderTable[payload[pos + 1]]
                    pos += 2
                else:
                    name, pos = ajp.decode_string(payload, pos)
                value, pos = ajp.decode_string(payload, pos)
                headers.append(((name or b'').decode('latin-1'), (value or b'').decode('latin-1')))
            return ('headers', status, (reason or b'').decode('latin-1'), headers)
        if kind == ajp.PKTTYPE_SEND_BODY:
            length = _U16.unpack_from(payload, 1)[0]
            if len(payload) >= 3 + length:
                return ('body', payload[3:3 + length])
            carried = len(payload) - 3
        if kind == ajp.PKTTYPE_END_RESPONSE:
            return ('end', payload[1:2] == b'\x01')
        if kind == ajp.PKTTYPE_GET_BODY:
            return ('get_body', _U16.unpack_from(payload, 1)[0])
        if kind == ajp.PKTTYPE_CPONG:
            return ('cpong',)
    except (IndexError, struct.error, TypeError, AJPError):  # ajp.decode_string names the
        # server's FORWARD_REQUEST in its messages: say what this is instead
        raise AJPError('truncated container packet %r' % payload[:16]) from None
    if kind == ajp.PKTTYPE_SEND_BODY:
        raise AJPError('SEND_BODY_CHUNK declares %d bytes but carries %d' % (length, carried))
    raise AJPError('unknown container packet type %r' % kind)
