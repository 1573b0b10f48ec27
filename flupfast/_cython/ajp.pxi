# AJP13 codec, compiled: the twin of flupfast/protocols/ajp.py for the hot path (AJPParser,
# decode_forward_request, decode_body_chunk, frame_body) with the same names, signatures,
# results and error messages. Bytes in, packets and environs out: no sockets, threads or WSGI.
# Tables, caps and the cold helpers come from the pure module and flupfast.limits, never
# redefined; the cold encoders (one call per response) are the pure functions themselves,
# re-exported so that this module offers the whole API. Included by flupfast/_speedups.pyx.

from flupfast.limits import AJP_MAX_PACKET
from flupfast.protocols import ajp as _ajp_py
from flupfast.protocols.errors import AJPError

# The cold encoders: the very objects of the pure module, so they cannot drift.
encode_send_headers = _ajp_py.encode_send_headers
encode_get_body_chunk = _ajp_py.encode_get_body_chunk
encode_end_response = _ajp_py.encode_end_response
CPONG_PACKET = _ajp_py.CPONG_PACKET

cdef tuple _AJP_METHOD_NAMES = _ajp_py.METHOD_NAMES
cdef tuple _AJP_REQUEST_HEADER_KEYS = _ajp_py.REQUEST_HEADER_KEYS
cdef tuple _AJP_ATTRIBUTE_KEYS = _ajp_py.ATTRIBUTE_KEYS
cdef tuple _AJP_ATTRIBUTE_FIELDS = _ajp_py.ATTRIBUTE_FIELDS
cdef object _ajp_bad_magic = _ajp_py._bad_magic
cdef object _ajp_parse_content_length = _ajp_py.parse_content_length
cdef Py_ssize_t _AJP_MAX_BODY_CHUNK_DATA = _ajp_py.MAX_BODY_CHUNK_DATA
cdef unsigned char _AJP_FWD_REQ = _ajp_py.PKTTYPE_FWD_REQ
cdef unsigned char _AJP_HEADER_CODE = _ajp_py.HEADER_CODE_PREFIX
cdef unsigned char _AJP_METHOD_STORED = _ajp_py.METHOD_STORED

cdef enum:
    # Attribute codes (spec "Request Packet Structure"), as in the pure module's ATTR_*.
    _AJP_ATTR_CONTEXT = 0x01
    _AJP_ATTR_REQ_ATTRIBUTE = 0x0A
    _AJP_ATTR_SSL_KEY_SIZE = 0x0B
    _AJP_ATTR_SECRET = 0x0C
    _AJP_ATTR_STORED_METHOD = 0x0D
    _AJP_ATTR_ARE_DONE = 0xFF
    # Header names up to this length are upper-cased in a stack buffer.
    _AJP_SMALL_NAME = 96

# A held partial packet buffer larger than this is freed once the packet completes, so an idle
# connection does not keep 64 KiB.
cdef Py_ssize_t _AJP_KEEP_PACKET_BUFFER = 4096

cdef bytes _AJP_TRAILER = b'\x00'   # after SEND_BODY_CHUNK data; one shared object


# -- Packets ----------------------------------------------------------------------------------

cdef class AJPParser:
    """Incremental parser of web-server packets: ``feed(data)`` returns the list of payloads
    (``bytes``, without the 4-byte header) of the packets it completed.

    ``data`` may be any bytes-like object split anywhere, including a view of a reused receive
    buffer: what is kept is copied. The magic is checked once two bytes of a packet are in,
    the length once four are: a payload above ``max_packet - 4`` bytes is refused before any
    of it is buffered. Raises ``AJPError`` and nothing else; after an error the parser is
    unusable (the connection must close).

    Packets are cut straight from the fed buffer; only an incomplete packet at its end is
    copied, and the next ``feed`` copies just the bytes that complete it.
    """

    cdef public Py_ssize_t max_packet
    cdef unsigned char *_held       # the incomplete packet at the end of the input so far
    cdef Py_ssize_t _held_len
    cdef Py_ssize_t _held_cap
    cdef bint _busy                 # inside feed(): a re-entrant call would move _held
    cdef object __weakref__         # weak references, as to the pure twin

    def __cinit__(self):
        self._held = NULL
        self._held_len = 0
        self._held_cap = 0

    def __init__(self, max_packet=AJP_MAX_PACKET):
        cdef object size = PyNumber_Index(max_packet)
        if self._busy:
            raise RuntimeError('AJPParser.__init__() called inside feed()')
        if size < 5:
            raise ValueError('max_packet must be at least 5, not %d' % size)
        self.max_packet = PyNumber_AsSsize_t(size, NULL)  # saturates, as no packet is larger
        self._held_len = 0

    def __dealloc__(self):
        PyMem_Free(self._held)

    @property
    def pending(self):
        """How many bytes of an incomplete packet are held."""
        return self._held_len

    def feed(self, data):
        cdef list packets = []
        cdef Py_buffer view
        if self._busy:
            raise RuntimeError('AJPParser.feed() re-entered')
        if PyBytes_CheckExact(data):
            self._busy = True
            try:
                self._feed(<const unsigned char *>PyBytes_AS_STRING(data),
                           PyBytes_GET_SIZE(data), packets)
            finally:
                self._busy = False
        else:
            # The export also pins a bytearray's memory against resizing while we parse.
            PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
            self._busy = True
            try:
                self._feed(<const unsigned char *>view.buf, view.len, packets)
            finally:
                self._busy = False
                PyBuffer_Release(&view)
        return packets

    cdef int _hold(self, const unsigned char *p, Py_ssize_t n, Py_ssize_t capacity) except -1:
        """Append ``p[:n]`` to the held bytes, growing the buffer to ``capacity`` if smaller."""
        cdef unsigned char *grown
        if capacity < self._held_len + n:
            capacity = self._held_len + n
        if capacity > self._held_cap:
            grown = <unsigned char *>PyMem_Realloc(self._held, capacity)
            if grown == NULL:
                raise MemoryError()
            self._held = grown
            self._held_cap = capacity
        memcpy(self._held + self._held_len, p, n)
        self._held_len += n
        return 0

    cdef Py_ssize_t _packet_size(self, const unsigned char *h) except -1:
        """The whole size of the packet whose 4-byte header is at ``h``, checked."""
        # Spec "Packet Format": 0x12 0x34, then the payload length (integer).
        cdef Py_ssize_t length = (<Py_ssize_t>h[2] << 8) | h[3]
        if length > self.max_packet - 4:
            raise AJPError('AJP packet of %d bytes exceeds max_packet=%d'
                           % (length + 4, self.max_packet))
        return length + 4

    cdef int _feed(self, const unsigned char *p, Py_ssize_t n, list packets) except -1:
        cdef Py_ssize_t pos = 0, take, size
        if n == 0:
            return 0
        if self._held_len:
            # Complete the held packet with only the bytes it lacks, then parse in place.
            if self._held_len < 4:
                take = 4 - self._held_len
                if take > n:
                    take = n
                self._hold(p, take, 4)
                pos = take
                if self._held_len >= 2:
                    _ajp_check_magic(self._held)
                if self._held_len < 4:
                    return 0
            size = self._packet_size(self._held)
            take = size - self._held_len
            if take > n - pos:
                take = n - pos
            self._hold(p + pos, take, size)
            pos += take
            if self._held_len < size:
                return 0
            self._held_len = 0
            packets.append(PyBytes_FromStringAndSize(<char *>self._held + 4, size - 4))
            if self._held_cap > _AJP_KEEP_PACKET_BUFFER:
                PyMem_Free(self._held)
                self._held = NULL
                self._held_cap = 0
        pos = self._parse(p, pos, n, packets)
        if pos < n:
            # _parse checked this header already, as far as it is in.
            size = self._packet_size(p + pos) if n - pos >= 4 else 4
            self._hold(p + pos, n - pos, size)
        return 0

    cdef Py_ssize_t _parse(self, const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                           list packets) except -1:
        """Cut every whole packet of ``p[pos:end]``; returns where the first partial one
        starts. Checks as the pure twin: the magic once 2 bytes are in, the length once 4."""
        cdef Py_ssize_t size
        while end - pos >= 2:
            _ajp_check_magic(p + pos)
            if end - pos < 4:
                break
            size = self._packet_size(p + pos)
            if size > end - pos:
                break
            packets.append(PyBytes_FromStringAndSize(<char *>p + pos + 4, size - 4))
            pos += size
        return pos


cdef inline int _ajp_check_magic(const unsigned char *h) except -1:
    if h[0] != 0x12 or h[1] != 0x34:
        raise AJPError(_ajp_bad_magic(h[0], h[1]))
    return 0


# -- FORWARD_REQUEST --------------------------------------------------------------------------

cdef object _ajp_truncated(str what):
    return AJPError('truncated FORWARD_REQUEST: no room for %s' % what)


cdef Py_ssize_t _ajp_string(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end,
                            str what) except -2:
    """One AJP string at ``pos[0]``: its length, or -1 for a null string (length 0xFFFF);
    ``pos[0]`` moves past it (and its NUL), so the string starts at ``pos[0] - length - 1``."""
    cdef Py_ssize_t i = pos[0], length
    if end - i < 2:
        raise _ajp_truncated('the length of ' + what)
    length = (<Py_ssize_t>p[i] << 8) | p[i + 1]
    i += 2
    if length == 0xFFFF:
        pos[0] = i
        return -1
    if length > end - i:
        raise AJPError('AJP string %s of %d bytes runs past the end of the packet'
                       % (what, length))
    if length == end - i or p[i + length] != 0:
        raise AJPError('AJP string %s lacks its NUL terminator' % what)
    pos[0] = i + length + 1
    return length


cdef inline str _ajp_fixed(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end, str what):
    # One of the five fixed strings: '' when null, as flup stores it.
    cdef Py_ssize_t length = _ajp_string(p, pos, end, what)
    if length < 0:
        return ''
    return _decode_value(p + pos[0] - length - 1, length)  # environ.pxi's str cache


cdef str _ajp_header_key(const unsigned char *name, Py_ssize_t n):
    """flup's Request.addHeader naming (ajp_base.py:525): '-' -> '_', ASCII upper case, and
    HTTP_ before all but Content-Type and Content-Length (as the pure twin's _header_key);
    None for a name with anything but letters, digits and '-' (dropped, as there)."""
    cdef unsigned char small[5 + _AJP_SMALL_NAME]
    cdef unsigned char *buf = small
    cdef unsigned char c
    cdef Py_ssize_t i
    for i in range(n):
        c = name[i]
        if not (c == b'-' or b'0' <= c <= b'9' or b'A' <= c <= b'Z' or b'a' <= c <= b'z'):
            return None
    if n > _AJP_SMALL_NAME:
        buf = <unsigned char *>PyMem_Malloc(n + 5)
        if buf == NULL:
            raise MemoryError()
    try:
        memcpy(buf, b'HTTP_', 5)
        for i in range(n):
            c = name[i]
            if c == b'-':
                c = b'_'
            elif b'a' <= c <= b'z':
                c -= 32
            buf[5 + i] = c
        if ((n == 12 and memcmp(buf + 5, b'CONTENT_TYPE', 12) == 0)
                or (n == 14 and memcmp(buf + 5, b'CONTENT_LENGTH', 14) == 0)):
            return _decode_name(buf + 5, n)
        return _decode_name(buf, n + 5)  # names repeat: environ.pxi's cache of their str
    finally:
        if buf != small:
            PyMem_Free(buf)


def decode_forward_request(payload):
    """Decode a FORWARD_REQUEST payload (from its 0x02 type byte) into
    ``(environ, content_length, chunked, secret)``; see the pure twin for the rules.

    Takes any contiguous buffer (the pure twin also takes a sequence of ints).
    """
    cdef Py_buffer view
    if PyBytes_CheckExact(payload):
        return _ajp_decode_forward_request(
            <const unsigned char *>PyBytes_AS_STRING(payload), PyBytes_GET_SIZE(payload))
    PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
    try:
        return _ajp_decode_forward_request(<const unsigned char *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


cdef tuple _ajp_decode_forward_request(const unsigned char *p, Py_ssize_t end):
    # Spec: prefix, method, protocol, req_uri, remote_addr, remote_host, server_name,
    # server_port (integer), is_ssl (boolean), num_headers (integer), headers, attributes, 0xFF.
    cdef Py_ssize_t pos, length, name_len, count
    cdef unsigned int code, index
    cdef object method, old, length_value, encoding
    cdef object content_length = None, secret = None, stored = None
    cdef bint chunked = False
    cdef str key, value
    cdef const unsigned char *name
    cdef dict environ

    if end == 0 or p[0] != _AJP_FWD_REQ:
        raise AJPError('not a FORWARD_REQUEST payload (type byte %s)'
                       % ('0x%02X' % p[0] if end else 'missing'))
    if end < 2:
        raise _ajp_truncated('the method')
    code = p[1]
    if code == _AJP_METHOD_STORED:
        method = None
    elif 0 < code < <unsigned int>len(_AJP_METHOD_NAMES):
        method = _AJP_METHOD_NAMES[code]
    else:
        raise AJPError('unknown AJP method code 0x%02X' % code)

    pos = 2
    protocol = _ajp_fixed(p, &pos, end, 'protocol')
    request_uri = _ajp_fixed(p, &pos, end, 'req_uri')
    remote_addr = _ajp_fixed(p, &pos, end, 'remote_addr')
    remote_host = _ajp_fixed(p, &pos, end, 'remote_host')
    server_name = _ajp_fixed(p, &pos, end, 'server_name')
    environ = {'REQUEST_METHOD': method, 'SERVER_PROTOCOL': protocol,
               'REQUEST_URI': request_uri, 'REMOTE_ADDR': remote_addr,
               'REMOTE_HOST': remote_host, 'SERVER_NAME': server_name}
    if end - pos < 2:
        raise _ajp_truncated('server_port')
    environ['SERVER_PORT'] = str((<long>p[pos] << 8) | p[pos + 1])
    if end - pos < 3:
        raise _ajp_truncated('is_ssl')
    if p[pos + 2]:
        environ['HTTPS'] = 'on'
    if end - pos < 5:
        raise _ajp_truncated('num_headers')
    count = (<Py_ssize_t>p[pos + 3] << 8) | p[pos + 4]
    pos += 5

    while count > 0:
        count -= 1
        if end - pos < 2:
            raise _ajp_truncated('a header name')
        if p[pos] == _AJP_HEADER_CODE:
            index = p[pos + 1]
            if not 0 < index < <unsigned int>len(_AJP_REQUEST_HEADER_KEYS):
                raise AJPError('unknown AJP request header code 0xA0%02X' % index)
            key = <str>_AJP_REQUEST_HEADER_KEYS[index]
            pos += 2
        else:
            name_len = _ajp_string(p, &pos, end, 'header name')
            if name_len < 0:
                key = None
            else:
                key = _ajp_header_key(p + pos - name_len - 1, name_len)
        length = _ajp_string(p, &pos, end, 'header value')
        if key is None or length < 0:
            continue
        value = _decode_value(p + pos - length - 1, length)
        old = environ.get(key)
        environ[key] = value if old is None else old + ', ' + value

    # The body framing comes from the headers alone (an attribute may not change it).
    length_value = environ.get('CONTENT_LENGTH')
    if length_value is not None:
        content_length = _ajp_parse_content_length(length_value)
    else:
        encoding = environ.get('HTTP_TRANSFER_ENCODING')
        chunked = encoding is not None and 'chunked' in encoding.lower()

    while True:
        if pos >= end:
            raise AJPError('FORWARD_REQUEST lacks the 0xFF that ends its attributes')
        code = p[pos]
        pos += 1
        if code == _AJP_ATTR_ARE_DONE:
            break
        if code == _AJP_ATTR_REQ_ATTRIBUTE:
            name_len = _ajp_string(p, &pos, end, 'req_attribute name')
            name = p + pos - name_len - 1
            length = _ajp_string(p, &pos, end, 'req_attribute value')
            if name_len >= 0 and length >= 0:
                environ[_decode_name(name, name_len)] = PyUnicode_DecodeLatin1(
                    <char *>p + pos - length - 1, length, NULL)
        elif code == _AJP_ATTR_SSL_KEY_SIZE:
            if end - pos < 2:
                raise _ajp_truncated('ssl_key_size')
            environ['SSL_KEY_SIZE'] = str((<long>p[pos] << 8) | p[pos + 1])
            pos += 2
        elif _AJP_ATTR_CONTEXT <= code <= _AJP_ATTR_STORED_METHOD:  # the string attributes
            length = _ajp_string(p, &pos, end, <str>_AJP_ATTRIBUTE_FIELDS[code])
            if length < 0:
                continue
            value = PyUnicode_DecodeLatin1(<char *>p + pos - length - 1, length, NULL)
            if code == _AJP_ATTR_SECRET:
                secret = value
            elif code == _AJP_ATTR_STORED_METHOD:
                stored = value
                if method is None:
                    environ['REQUEST_METHOD'] = value
            else:
                environ[<str>_AJP_ATTRIBUTE_KEYS[code]] = value
        else:
            raise AJPError('unknown AJP attribute code 0x%02X' % code)
    if pos != end:
        raise AJPError('%d bytes after the 0xFF that ends FORWARD_REQUEST' % (end - pos))
    if method is None and stored is None:
        raise AJPError('method code 0xFF (stored method) without a stored_method attribute')
    return environ, content_length, chunked, secret


# -- Request body -----------------------------------------------------------------------------

def decode_body_chunk(payload):
    """The data of a body packet's payload: a 2-byte length, then that many bytes. An empty
    payload or a zero length is the end of the body, b''. Bytes after the declared data are
    ignored, as flup does; a length running past the payload is AJPError."""
    cdef Py_buffer view
    if PyBytes_CheckExact(payload):
        return _ajp_body_chunk(<const unsigned char *>PyBytes_AS_STRING(payload),
                               PyBytes_GET_SIZE(payload))
    PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
    try:
        return _ajp_body_chunk(<const unsigned char *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)


cdef bytes _ajp_body_chunk(const unsigned char *p, Py_ssize_t end):
    cdef Py_ssize_t length
    if end == 0:
        return b''
    if end < 2:
        raise AJPError('body chunk of 1 byte has no room for its length')
    length = (<Py_ssize_t>p[0] << 8) | p[1]
    if length > end - 2:
        raise AJPError('body chunk declares %d bytes but carries %d' % (length, end - 2))
    return PyBytes_FromStringAndSize(<char *>p + 2, length)


# -- Container packets ------------------------------------------------------------------------

cdef bytes _ajp_body_header(Py_ssize_t n):
    # Spec "Response Packet Structure": 'A' 'B', payload length (n + 4), then the payload's
    # SEND_BODY_CHUNK type 0x03 and chunk length n; the data and a NUL follow.
    cdef unsigned char h[7]
    h[0] = b'A'
    h[1] = b'B'
    h[2] = <unsigned char>((n + 4) >> 8)
    h[3] = <unsigned char>(n + 4)
    h[4] = 3
    h[5] = <unsigned char>(n >> 8)
    h[6] = <unsigned char>n
    return PyBytes_FromStringAndSize(<char *>h, 7)


def frame_body(data, max_data):
    """Frame ``data`` as SEND_BODY_CHUNK packets of at most ``max_data`` data bytes each.

    Returns a list of buffers for ``sendmsg``, per packet: a 7-byte header, the data (a
    memoryview slice of ``data``; ``data`` itself when it is bytes that fit one packet) and a
    shared b'\\x00' trailer. The data is never copied. ``max_data`` must be in 1..65531.
    Empty ``data`` gives [].
    """
    cdef object limit = PyNumber_Index(max_data)
    if not 0 < limit <= _AJP_MAX_BODY_CHUNK_DATA:
        raise ValueError('max_data must be in 1..%d, not %d' % (_AJP_MAX_BODY_CHUNK_DATA, limit))
    cdef Py_ssize_t max_len = limit
    cdef object view = None
    cdef Py_buffer *vb
    cdef Py_ssize_t total
    if PyBytes_CheckExact(data):
        total = PyBytes_GET_SIZE(data)
    else:
        view = PyMemoryView_FromObject(data)
        vb = PyMemoryView_GET_BUFFER(view)
        if vb.ndim != 1 or vb.itemsize != 1:
            view = view.cast('B')
            vb = PyMemoryView_GET_BUFFER(view)
        total = vb.shape[0]
    if total == 0:
        return []
    if total <= max_len:
        return [_ajp_body_header(total), data if view is None else view, _AJP_TRAILER]
    if view is None:
        view = PyMemoryView_FromObject(data)

    cdef Py_ssize_t packets = (total - 1) // max_len + 1
    cdef list buffers = PyList_New(packets * 3)
    cdef bytes full = _ajp_body_header(max_len)  # shared by every full packet
    cdef Py_ssize_t i = 0, pos = 0, length
    cdef object item
    while pos < total:
        length = max_len if total - pos >= max_len else total - pos
        item = full if length == max_len else _ajp_body_header(length)
        Py_INCREF(item)
        PyList_SET_ITEM(buffers, i, item)
        item = view[pos:pos + length]
        Py_INCREF(item)
        PyList_SET_ITEM(buffers, i + 1, item)
        Py_INCREF(_AJP_TRAILER)
        PyList_SET_ITEM(buffers, i + 2, _AJP_TRAILER)
        i += 3
        pos += length
    if i != packets * 3:  # cannot happen; a list with empty slots must never escape
        raise SystemError('frame_body miscounted its buffers')
    return buffers
