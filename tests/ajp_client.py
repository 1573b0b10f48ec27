"""A small AJP13 web-server side for tests and benchmarks: builds the packets mod_proxy_ajp
sends (FORWARD_REQUEST, body chunks, CPING) and reads the container's packets back.

Independent of the codec under test: it is written from the spec (ajpv13a.html) and httpd's
ajp_header.c, and only borrows flup's tables for the codes.
"""
import socket
import struct

from flupfast.protocols import ajp

NULL = None  # a null string (length 0xFFFF)

METHOD_CODES = {m.decode('latin-1'): i for i, m in enumerate(ajp.methodTable) if m}
METHOD_CODES['BASELINE-CONTROL'] = METHOD_CODES['BASELINE_CONTROL']
# httpd's sc_for_req_header: a header is coded when its name matches case-insensitively.
HEADER_CODES = {h.decode('latin-1').lower(): i for i, h in enumerate(ajp.requestHeaderTable) if h}

ATTRIBUTE_CODES = {
    'context': 0x01, 'servlet_path': 0x02, 'remote_user': 0x03, 'auth_type': 0x04,
    'query_string': 0x05, 'route': 0x06, 'ssl_cert': 0x07, 'ssl_cipher': 0x08,
    'ssl_session': 0x09, 'req_attribute': 0x0A, 'ssl_key_size': 0x0B, 'secret': 0x0C,
    'stored_method': 0x0D,
}


def string(value):
    """An AJP string: integer length, bytes, NUL; None is the null string (0xFFFF, no NUL)."""
    if value is None:
        return b'\xff\xff'
    if isinstance(value, str):
        value = value.encode('latin-1')
    return struct.pack('>H', len(value)) + value + b'\x00'


def header(name, value):
    """One request header: an int name is the code xx of 0xA0xx; a name in the table is coded
    as httpd does; any other name (str or bytes, or a name wrapped in a 1-tuple to force it)
    goes as a string."""
    if isinstance(name, int):
        return bytes((0xA0, name)) + string(value)
    if isinstance(name, tuple):
        return string(name[0]) + string(value)
    text = name.decode('latin-1') if isinstance(name, bytes) else name
    code = HEADER_CODES.get(text.lower())
    if code is not None:
        return bytes((0xA0, code)) + string(value)
    return string(name) + string(value)


def attribute(name, value):
    """One attribute: ``name`` a spec name (see ATTRIBUTE_CODES) or a code; req_attribute
    takes a (name, value) pair, ssl_key_size an int."""
    code = ATTRIBUTE_CODES[name] if isinstance(name, str) else name
    if code == 0x0A:
        return b'\x0a' + string(value[0]) + string(value[1])
    if code == 0x0B:
        return b'\x0b' + struct.pack('>H', value)
    return bytes((code,)) + string(value)


def forward_request(method='GET', uri='/', protocol='HTTP/1.1', remote_addr='127.0.0.1',
                    remote_host=NULL, server_name='localhost', server_port=80, is_ssl=False,
                    headers=(), attributes=(), num_headers=None, terminator=b'\xff'):
    """A FORWARD_REQUEST payload (from its 0x02 type byte). ``method`` is a name or a code;
    a name outside the table goes as 0xFF plus a stored_method attribute, as mod_jk does.
    ``attributes`` are (name, value) pairs for ``attribute``; the query string is one of them
    (AJP sends the path alone in req_uri)."""
    attrs = list(attributes)
    if isinstance(method, int):
        code = method
    elif method in METHOD_CODES:
        code = METHOD_CODES[method]
    else:
        code = 0xFF
        attrs.append(('stored_method', method))
    out = [bytes((ajp.PKTTYPE_FWD_REQ, code)), string(protocol), string(uri),
           string(remote_addr), string(remote_host), string(server_name),
           struct.pack('>HBH', server_port, bool(is_ssl),
                       len(headers) if num_headers is None else num_headers)]
    out += [header(name, value) for name, value in headers]
    out += [attribute(name, value) for name, value in attrs]
    out.append(terminator)
    return b''.join(out)


def packet(payload):
    """A web-server packet: 0x12 0x34, the payload length, the payload."""
    return ajp.SERVER_PREFIX + struct.pack('>H', len(payload)) + payload


def body_packet(data):
    """A request body packet (no type byte): chunk length, data; b'' is the end of a body."""
    return packet(struct.pack('>H', len(data)) + data if data else b'')


def body_packets(body, chunk=8186):
    """``body`` as body packets of at most ``chunk`` bytes (8186 fit Apache's 8 KiB packets)."""
    view = memoryview(body)
    return b''.join(body_packet(bytes(view[i:i + chunk])) for i in range(0, len(view), chunk))


def request_bytes(method='GET', uri='/', body=b'', headers=(), chunk=8186, **kwargs):
    """FORWARD_REQUEST plus, for a body, a Content-Length header and the first chunk that
    mod_proxy_ajp sends unsolicited; the rest of the body is ``body_packets(body[chunk:])``,
    sent as the container asks for it."""
    headers = list(headers)
    if body:
        headers.append(('Content-Length', str(len(body))))
    out = packet(forward_request(method, uri, headers=headers, **kwargs))
    if body:
        out += body_packet(body[:chunk])
    return out


CPING = packet(bytes((ajp.PKTTYPE_CPING,)))


def read_container_packets(data):
    """Split container output into (type, fields) tuples; returns (packets, leftover bytes).

    SEND_HEADERS -> ('headers', status, reason, [(name, value)]) with coded names spelled as
    responseHeaderTable; SEND_BODY_CHUNK -> ('body', data); END_RESPONSE -> ('end', reuse);
    GET_BODY_CHUNK -> ('get_body', size); CPONG -> ('cpong',).
    """
    packets = []
    pos = 0
    while len(data) - pos >= 4:
        if data[pos:pos + 2] != ajp.CONTAINER_PREFIX:
            raise ValueError('bad container packet magic %r' % data[pos:pos + 2])
        length = struct.unpack_from('>H', data, pos + 2)[0]
        if len(data) - pos - 4 < length:
            break
        payload = bytes(data[pos + 4:pos + 4 + length])
        pos += 4 + length
        packets.append(_container_packet(payload))
    return packets, bytes(data[pos:])


def _read_string(payload, pos):
    length = struct.unpack_from('>H', payload, pos)[0]
    pos += 2
    if length == 0xFFFF:
        return None, pos
    if payload[pos + length] != 0:
        raise ValueError('string without NUL')
    return payload[pos:pos + length], pos + length + 1


def _container_packet(payload):
    kind = payload[0]
    if kind == 4:
        status = struct.unpack_from('>H', payload, 1)[0]
        reason, pos = _read_string(payload, 3)
        count = struct.unpack_from('>H', payload, pos)[0]
        pos += 2
        headers = []
        for _ in range(count):
            if payload[pos] == 0xA0:
                name = ajp.responseHeaderTable[payload[pos + 1]]
                pos += 2
            else:
                name, pos = _read_string(payload, pos)
            value, pos = _read_string(payload, pos)
            headers.append((name, value))
        if pos != len(payload):
            raise ValueError('SEND_HEADERS with %d extra bytes' % (len(payload) - pos))
        return ('headers', status, reason, headers)
    if kind == 3:
        length = struct.unpack_from('>H', payload, 1)[0]
        if len(payload) != length + 4 or payload[-1] != 0:
            raise ValueError('malformed SEND_BODY_CHUNK')
        return ('body', payload[3:3 + length])
    if kind == 5:
        if len(payload) != 2:
            raise ValueError('malformed END_RESPONSE')
        return ('end', payload[1] == 1)
    if kind == 6:
        if len(payload) != 3:
            raise ValueError('malformed GET_BODY_CHUNK')
        return ('get_body', struct.unpack_from('>H', payload, 1)[0])
    if kind == 9 and len(payload) == 1:
        return ('cpong',)
    raise ValueError('unknown container packet %r' % payload[:8])


class Response:
    """The container's answer to one request, gathered from its packets."""

    def __init__(self, packets):
        self.status = self.reason = None
        self.headers = []
        self.body = b''
        self.reuse = None
        self.get_body = []  # the sizes of the GET_BODY_CHUNKs it sent
        self.cpongs = 0
        for item in packets:
            if item[0] == 'headers':
                if self.status is not None:
                    raise ValueError('two SEND_HEADERS in one response')
                _, self.status, self.reason, self.headers = item
            elif item[0] == 'body':
                self.body += item[1]
            elif item[0] == 'end':
                self.reuse = item[1]
            elif item[0] == 'get_body':
                self.get_body.append(item[1])
            else:
                self.cpongs += 1

    def header(self, name):
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None


class WebServer:
    """One web-server connection to an AJP container: ``exchange`` sends a request and answers
    the container's GET_BODY_CHUNKs from ``rest`` until END_RESPONSE. ``source`` binds the
    client end first (an allow-list test connects from 127.0.0.2)."""

    def __init__(self, address, timeout=20, source=None, max_chunk=0xFFFF - 2):
        # ``max_chunk``: the most body data sent per packet, whatever the container asks for
        # (flup asks for up to 0xFFFF); by default what a packet can carry, 8186 for Apache's
        # default 8 KiB packets.
        self.max_chunk = max_chunk
        family = socket.AF_INET6 if ':' in address[0] else socket.AF_INET
        self.sock = socket.socket(family)
        self.sock.settimeout(timeout)
        if source:
            self.sock.bind((source, 0))
        self.sock.connect(address)
        self.buf = b''

    def exchange(self, wire, rest=b''):
        """The Response, or None when the container closed without one."""
        self.sock.sendall(wire)
        return self.receive(rest)

    def receive(self, rest=b''):
        """Read the container's packets up to END_RESPONSE (or a CPONG), answering its
        GET_BODY_CHUNKs from ``rest`` (then with empty chunks); None at EOF before any."""
        rest = memoryview(rest)
        packets = []
        while True:
            data = self.sock.recv(1 << 20)
            if not data:
                return Response(packets) if packets else None
            self.buf += data
            new, self.buf = read_container_packets(self.buf)
            for item in new:
                packets.append(item)
                if item[0] == 'get_body':
                    n = min(item[1], len(rest), self.max_chunk)
                    self.sock.sendall(body_packet(bytes(rest[:n])))
                    rest = rest[n:]
                elif item[0] == 'end' or (item[0] == 'cpong' and len(packets) == 1):
                    return Response(packets)

    def close(self):
        self.sock.close()
