# FastCGI 1.0 codec, compiled: the twin of flupfast/protocols/fastcgi.py (FastCGIParser,
# frame_stdout, decode_params) with the same names, signatures, events and errors.
# Bytes in, events out: no sockets, threads or WSGI; constants and caps come from the pure
# module and flupfast.limits, never redefined here. Included by flupfast/_speedups.pyx.

from flupfast.limits import (
    MAX_OPEN_REQUESTS, MAX_PARAMS_BYTES, MAX_PARAMS_PAIRS, PENDING_PARAMS_REQUESTS)
from flupfast.protocols.errors import FastCGIError
from flupfast.protocols.fastcgi import (
    FCGI_ABORT_REQUEST, FCGI_BEGIN_REQUEST, FCGI_DATA, FCGI_GET_VALUES, FCGI_HEADER_LEN,
    FCGI_PARAMS, FCGI_STDIN, FCGI_STDOUT, FCGI_VERSION_1)
from struct import error as _StructError

# C copies of the spec 8 constants, taken from the pure module once at import.
cdef Py_ssize_t _HEADER_LEN = FCGI_HEADER_LEN
cdef int _VERSION_1 = FCGI_VERSION_1
cdef int _BEGIN_REQUEST = FCGI_BEGIN_REQUEST
cdef int _ABORT_REQUEST = FCGI_ABORT_REQUEST
cdef int _PARAMS = FCGI_PARAMS
cdef int _STDIN = FCGI_STDIN
cdef int _DATA = FCGI_DATA
cdef int _GET_VALUES = FCGI_GET_VALUES
cdef Py_ssize_t _MAX_OPEN_REQUESTS = MAX_OPEN_REQUESTS
cdef Py_ssize_t _PENDING_PARAMS_REQUESTS = PENDING_PARAMS_REQUESTS

# Spec 5.1: typedef struct { roleB1, roleB0, flags, reserved[5] } FCGI_BeginRequestBody;
cdef Py_ssize_t _BEGIN_BODY_LEN = 8

# A held partial record buffer larger than this is freed once the record completes, so an idle
# connection does not keep 64 KiB.
cdef Py_ssize_t _KEEP_RECORD_BUFFER = 4096

# Padding for the last record of frame_stdout, by length (shared immutable objects).
cdef tuple _PADDINGS = (b'', bytes(1), bytes(2), bytes(3), bytes(4), bytes(5), bytes(6),
                        bytes(7))


cdef inline Py_ssize_t _record_size(const unsigned char *h) noexcept nogil:
    # Spec 3.3: typedef struct { version, type, requestIdB1, requestIdB0, contentLengthB1,
    # contentLengthB0, paddingLength, reserved } FCGI_Header; content and padding follow.
    return _HEADER_LEN + ((<Py_ssize_t>h[4] << 8) | h[5]) + h[6]


cdef int _check_version(const unsigned char *h) except -1:
    if h[0] != _VERSION_1:
        raise FastCGIError('unsupported FastCGI version %d (record type %d)' % (h[0], h[1]))
    return 0


cdef Py_ssize_t _read_length(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end) except -1:
    # Spec 3.4: a length below 128 is one byte; otherwise four bytes, big-endian, high bit set.
    cdef Py_ssize_t i = pos[0]
    cdef unsigned char first
    if i >= end:
        raise FastCGIError('truncated name-value pair length in PARAMS')
    first = p[i]
    if not first & 0x80:
        pos[0] = i + 1
        return first
    if end - i < 4:
        raise FastCGIError('truncated name-value pair length in PARAMS')
    pos[0] = i + 4
    return ((<Py_ssize_t>(first & 0x7F) << 24) | (<Py_ssize_t>p[i + 1] << 16)
            | (<Py_ssize_t>p[i + 2] << 8) | p[i + 3])


cdef inline Py_ssize_t _peek_length(const unsigned char *p, Py_ssize_t *pos,
                                    Py_ssize_t end) noexcept:
    # _read_length without the errors: -1 where it would raise.
    cdef Py_ssize_t i = pos[0]
    if i >= end:
        return -1
    if not p[i] & 0x80:
        pos[0] = i + 1
        return p[i]
    if end - i < 4:
        return -1
    pos[0] = i + 4
    return ((<Py_ssize_t>(p[i] & 0x7F) << 24) | (<Py_ssize_t>p[i + 1] << 16)
            | (<Py_ssize_t>p[i + 2] << 8) | p[i + 3])


cdef Py_ssize_t _scan_pairs(const unsigned char *p, Py_ssize_t end, Py_ssize_t limit,
                            _Pair *pairs, bint *whole) noexcept:
    """How many well-formed pairs the stream starts with (at most ``limit``), to size the dict
    once; stops quietly at anything malformed, which the decoding loop then reports. With
    ``pairs``, the spans of the first ``_TEMPLATE_PAIRS`` go there; with ``whole``, whether the
    pairs counted are all of the stream."""
    cdef Py_ssize_t pos = 0, count = 0, name_len, value_len
    cdef Py_ssize_t scanned = 0  # where the last whole pair ends (a break may leave pos past it)
    while pos < end and count < limit:
        name_len = _peek_length(p, &pos, end)
        if name_len < 0:
            break
        value_len = _peek_length(p, &pos, end)
        if value_len < 0:
            break
        # Each length is below 2**31: unsigned 64-bit sums cannot wrap, even on 32-bit builds.
        if <unsigned long long>name_len + <unsigned long long>value_len > \
                <unsigned long long>(end - pos):
            break
        if pairs != NULL and count < _TEMPLATE_PAIRS:
            pairs[count].name = p + pos
            pairs[count].name_len = name_len
            pairs[count].value = p + pos + name_len
            pairs[count].value_len = value_len
        pos += name_len + value_len
        scanned = pos
        count += 1
    if whole != NULL:
        whole[0] = scanned == end
    return count


cdef inline Py_ssize_t _pairs_to_count(Py_ssize_t max_pairs) noexcept:
    # One more than the cap: enough to reach the error without resizing; never wraps.
    return max_pairs + 1 if max_pairs < PY_SSIZE_T_MAX else max_pairs


cdef dict _decode_params(const unsigned char *p, Py_ssize_t end, Py_ssize_t max_pairs):
    """Spec 3.4 name-value pairs -> dict of latin-1 str, with the pure twin's checks in its
    order: both lengths, then the pair's extent, then the pair count (of distinct names)."""
    return _decode_counted(p, end, max_pairs,
                           _scan_pairs(p, end, _pairs_to_count(max_pairs), NULL, NULL))


cdef dict _decode_counted(const unsigned char *p, Py_ssize_t end, Py_ssize_t max_pairs,
                          Py_ssize_t counted):
    """_decode_params, the pairs already counted (_scan_pairs) for the dict's size."""
    cdef dict params = flupfast_dict_presized(counted + FLUPFAST_GATEWAY_KEYS)
    cdef Py_ssize_t pos = 0
    cdef Py_ssize_t name_len, value_len
    cdef str name, value
    while pos < end:
        name_len = _read_length(p, &pos, end)
        value_len = _read_length(p, &pos, end)
        # Each length is below 2**31: unsigned 64-bit sums cannot wrap, even on 32-bit builds.
        if <unsigned long long>name_len + <unsigned long long>value_len > \
                <unsigned long long>(end - pos):
            raise FastCGIError('name-value pair runs past the end of PARAMS')
        name = _decode_name(p + pos, name_len)
        pos += name_len
        value = _decode_value(p + pos, value_len)
        pos += value_len
        params[name] = value
        if len(params) > max_pairs:
            raise FastCGIError('more than %d name-value pairs in PARAMS' % max_pairs)
    return params


cdef dict _decode_request_params(const unsigned char *p, Py_ssize_t end,
                                 Py_ssize_t max_pairs):
    """_decode_params for a request's PARAMS: a copy of the last request's dict where the
    names are the same (environ.pxi's _EnvironTemplate). One scan counts the pairs for both."""
    cdef _Pair pairs[<int>_TEMPLATE_PAIRS]
    cdef bint whole = False
    cdef Py_ssize_t counted = _scan_pairs(p, end, _pairs_to_count(max_pairs), pairs, &whole)
    # The template's count: -1 for a malformed stream or one of more pairs than it holds.
    cdef Py_ssize_t count = counted if whole and counted <= _TEMPLATE_PAIRS else -1
    cdef dict params = None
    if count <= max_pairs:
        params = _fcgi_template.copy_for(pairs, count)
    if params is None:
        params = _decode_counted(p, end, max_pairs, counted)
        _fcgi_template.remember(params, pairs, count)
    return params


def decode_params(data, max_pairs=MAX_PARAMS_PAIRS):
    """Decode a whole PARAMS stream (spec 3.4 name-value pairs) into a dict of latin-1 str.

    Takes any contiguous buffer (the pure twin also takes a sequence of ints).
    """
    cdef Py_ssize_t limit = max_pairs
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return _decode_params(<const unsigned char *>view.buf, view.len, limit)
    finally:
        PyBuffer_Release(&view)


cdef long _header_field(object value, long maximum, str what) except -1:
    # The pure twin packs the header with struct, which raises struct.error for a field it
    # cannot hold; the same class here (these are caller bugs, not protocol errors).
    cdef object number
    try:
        number = PyNumber_Index(value)
    except TypeError:
        raise _StructError('required argument is not an integer') from None
    if not 0 <= number <= maximum:
        raise _StructError('%s must be in 0..%d, not %r' % (what, maximum, number))
    return number


def frame_stdout(request_id, data, max_content, record_type=FCGI_STDOUT):
    """Frame ``data`` as ``record_type`` records of at most ``max_content`` bytes each.

    Returns a list of buffers for ``sendmsg``: headers and padding are small new objects,
    the payload is referenced through memoryview slices and never copied. ``max_content``
    must be a multiple of 8 in 8..65528 so that only the last record needs padding.
    Empty ``data`` gives an empty list (the end-of-stream record is ``encode_record``).
    """
    return _frame(request_id, data, max_content, record_type)


cdef list _frame(request_id, data, max_content, record_type):
    """frame_stdout, for compiled callers (fastcgi_serve.pxi's streams)."""
    cdef object view = PyMemoryView_FromObject(data)
    cdef Py_buffer *vb = PyMemoryView_GET_BUFFER(view)
    if vb.ndim != 1 or vb.itemsize != 1:
        view = view.cast('B')
        vb = PyMemoryView_GET_BUFFER(view)
    cdef Py_ssize_t total = vb.shape[0]
    if total == 0:
        return []
    cdef Py_ssize_t max_len = PyNumber_AsSsize_t(max_content, NULL)
    if max_len <= 0:
        # The pure twin loops forever here (it never advances).
        raise ValueError('max_content must be positive, not %r' % (max_content,))
    cdef long rid = _header_field(request_id, 0xFFFF, 'request_id')
    cdef long rtype = _header_field(record_type, 0xFF, 'record_type')
    if max_len > total:
        max_len = total
    if max_len > 0xFFFF:
        raise _StructError('record content length must be in 0..65535, not %d' % max_len)

    # Records: `full` of max_len bytes, then the last of `last` bytes (1..max_len).
    cdef Py_ssize_t full = (total - 1) // max_len
    cdef Py_ssize_t last = total - full * max_len
    cdef int full_pad = -max_len & 7
    cdef int last_pad = -last & 7
    cdef Py_ssize_t count = full * (2 + (full_pad != 0)) + 2 + (last_pad != 0)
    cdef list buffers = PyList_New(count)
    cdef Py_ssize_t i = 0, pos = 0, length
    cdef int padding
    cdef unsigned char header[8]
    cdef object item
    # Spec 3.3 FCGI_Header: version, type, requestIdB1, requestIdB0, contentLengthB1,
    # contentLengthB0, paddingLength, reserved.
    header[0] = <unsigned char>_VERSION_1
    header[1] = <unsigned char>rtype
    header[2] = <unsigned char>(rid >> 8)
    header[3] = <unsigned char>rid
    header[7] = 0
    while pos < total:
        length = max_len if pos + max_len <= total else total - pos
        padding = -length & 7
        header[4] = <unsigned char>(length >> 8)
        header[5] = <unsigned char>length
        header[6] = <unsigned char>padding
        item = PyBytes_FromStringAndSize(<char *>header, 8)
        Py_INCREF(item)
        PyList_SET_ITEM(buffers, i, item)
        i += 1
        item = view if length == total else view[pos:pos + length]
        Py_INCREF(item)
        PyList_SET_ITEM(buffers, i, item)
        i += 1
        if padding:
            item = _PADDINGS[padding]
            Py_INCREF(item)
            PyList_SET_ITEM(buffers, i, item)
            i += 1
        pos += length
    if i != count:  # cannot happen; a list with empty slots must never escape
        raise SystemError('frame_stdout miscounted its buffers')
    return buffers


@cython.freelist(8)
cdef class FastCGIParser:
    """Incremental FastCGI record parser: ``feed(data)`` returns the list of new events.

    Bytes may be split anywhere and a chunk may hold many records. Padding is skipped, the
    version checked, and PARAMS decoded from the concatenated stream of a request, so a pair
    may straddle records. PARAMS are kept only for request ids that began; the caps bound what
    a peer can make us hold. Raises ``FastCGIError`` and nothing else; after an error the
    parser is unusable.

    Records are parsed straight from the fed buffer; only an incomplete record at its end is
    copied, and the next ``feed`` copies just the bytes that complete it.
    """

    cdef public Py_ssize_t max_params_bytes
    cdef public Py_ssize_t max_params_pairs
    cdef dict _params               # request id -> bytearray of its PARAMS stream so far
    cdef Py_ssize_t _params_held    # bytes of every stream in _params
    cdef unsigned char *_held       # the incomplete record at the end of the input so far
    cdef Py_ssize_t _held_len
    cdef Py_ssize_t _held_cap
    cdef bint _busy                 # inside feed(): a re-entrant call would move _held
    cdef object __weakref__         # weak references, as to the pure twin

    def __cinit__(self):
        self._held = NULL
        self._held_len = 0
        self._held_cap = 0
        self._params = {}

    def __init__(self, max_params_bytes=MAX_PARAMS_BYTES, max_params_pairs=MAX_PARAMS_PAIRS):
        if self._busy:
            raise RuntimeError('FastCGIParser.__init__() called inside feed()')
        self.max_params_bytes = max_params_bytes
        self.max_params_pairs = max_params_pairs
        self._held_len = 0
        self._params = {}
        self._params_held = 0

    def __dealloc__(self):
        PyMem_Free(self._held)

    @property
    def pending(self):
        """How many bytes of an incomplete record are held."""
        return self._held_len

    def feed(self, data):
        cdef list events = []
        cdef Py_buffer view
        if self._busy:
            raise RuntimeError('FastCGIParser.feed() re-entered')
        if PyBytes_CheckExact(data):
            self._busy = True
            try:
                self._feed(<const unsigned char *>PyBytes_AS_STRING(data),
                           PyBytes_GET_SIZE(data), events)
            finally:
                self._busy = False
        else:
            # The export also pins a bytearray's memory against resizing while we parse.
            PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
            self._busy = True
            try:
                self._feed(<const unsigned char *>view.buf, view.len, events)
            finally:
                self._busy = False
                PyBuffer_Release(&view)
        return events

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

    cdef int _feed(self, const unsigned char *p, Py_ssize_t n, list events) except -1:
        cdef Py_ssize_t pos = 0, take, size
        if n == 0:
            return 0
        if self._held_len:
            # Complete the held record with only the bytes it lacks, then parse in place.
            if self._held_len < _HEADER_LEN:
                take = _HEADER_LEN - self._held_len
                if take > n:
                    take = n
                self._hold(p, take, _HEADER_LEN)
                pos = take
                if self._held_len < _HEADER_LEN:
                    return 0
                _check_version(self._held)
            size = _record_size(self._held)
            take = size - self._held_len
            if take > n - pos:
                take = n - pos
            self._hold(p + pos, take, size)
            pos += take
            if self._held_len < size:
                return 0
            self._held_len = 0
            self._record(self._held, events)
            if self._held_cap > _KEEP_RECORD_BUFFER:
                PyMem_Free(self._held)
                self._held = NULL
                self._held_cap = 0
        pos = self._parse(p, pos, n, events)
        if pos < n:
            size = _record_size(p + pos) if n - pos >= _HEADER_LEN else _HEADER_LEN
            self._hold(p + pos, n - pos, size)
        return 0

    cdef Py_ssize_t _parse(self, const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                           list events) except -1:
        """Handle every whole record of ``p[pos:end]``; returns where the first partial one
        starts. Each header is version-checked as soon as it is whole (as the pure twin)."""
        cdef Py_ssize_t size
        while end - pos >= _HEADER_LEN:
            _check_version(p + pos)
            size = _record_size(p + pos)
            if size > end - pos:
                break
            self._record(p + pos, events)
            pos += size
        return pos

    cdef int _record(self, const unsigned char *h, list events) except -1:
        """One whole record at ``h`` (header, then content; its padding is ignored)."""
        # Spec 3.3 FCGI_Header: version, type, requestIdB1, requestIdB0, contentLengthB1,
        # contentLengthB0, paddingLength, reserved.
        cdef int record_type = h[1]
        cdef long request_id = (<long>h[2] << 8) | h[3]
        cdef Py_ssize_t length = (<Py_ssize_t>h[4] << 8) | h[5]
        cdef const unsigned char *content = h + _HEADER_LEN
        cdef dict names
        cdef object stream
        if record_type == _STDIN or record_type == _DATA:
            events.append((record_type, request_id,
                           PyBytes_FromStringAndSize(<char *>content, length)))
        elif record_type == _PARAMS:
            self._on_params(request_id, content, length, events)
        elif record_type == _BEGIN_REQUEST:
            if length < _BEGIN_BODY_LEN:
                raise FastCGIError('BEGIN_REQUEST body of %d bytes, expected 8' % length)
            # Spec 5.1 FCGI_BeginRequestBody: roleB1, roleB0, flags, reserved[5].
            if len(self._params) >= _MAX_OPEN_REQUESTS:
                raise FastCGIError('too many requests begun without their PARAMS')
            stream = self._params.get(request_id)
            if stream is not None:  # begun again: its PARAMS so far are dropped
                self._params_held -= PyByteArray_GET_SIZE(stream)
            self._params[request_id] = PyByteArray_FromStringAndSize(NULL, 0)  # no call
            events.append((_BEGIN_REQUEST, request_id,
                           ((<long>content[0] << 8) | content[1], content[2])))
        elif record_type == _ABORT_REQUEST:
            events.append((_ABORT_REQUEST, request_id, None))
        elif record_type == _GET_VALUES:
            names = _decode_params(content, length, self.max_params_pairs)
            events.append((_GET_VALUES, request_id, list(names)))
        else:
            events.append((record_type, request_id,
                           PyBytes_FromStringAndSize(<char *>content, length)))
        return 0

    cdef int _on_params(self, long request_id, const unsigned char *content, Py_ssize_t length,
                        list events) except -1:
        cdef object key = request_id
        cdef object stream = self._params.get(key)
        cdef Py_ssize_t size, held_cap
        if stream is None:
            return 0  # spec 3.3: records for inactive request ids are ignored
        size = PyByteArray_GET_SIZE(stream)
        if length:
            if size + length > self.max_params_bytes:
                del self._params[key]
                raise FastCGIError('PARAMS of request %d exceed %d bytes'
                                   % (request_id, self.max_params_bytes))
            held_cap = PY_SSIZE_T_MAX  # the pure twin's min(..., sys.maxsize)
            if self.max_params_bytes <= PY_SSIZE_T_MAX // _PENDING_PARAMS_REQUESTS:
                held_cap = self.max_params_bytes * _PENDING_PARAMS_REQUESTS
            if self._params_held + length > held_cap:
                raise FastCGIError('PARAMS held for %d open requests exceed %d bytes'
                                   % (len(self._params), held_cap))
            PyByteArray_Resize(stream, size + length)
            memcpy(PyByteArray_AS_STRING(stream) + size, content, length)
            self._params_held += length
            return 0
        del self._params[key]
        self._params_held -= size
        events.append((_PARAMS, request_id,
                       _decode_request_params(
                           <const unsigned char *>PyByteArray_AS_STRING(stream), size,
                           self.max_params_pairs)))
        return 0


cdef object _new_parser(parser_class):
    """``parser_class()``: the compiled FastCGIParser without the call's argument parsing
    (what its ``__init__`` sets with the default caps, beside ``__cinit__``'s), any other
    called."""
    cdef FastCGIParser parser
    if parser_class is not FastCGIParser:
        return parser_class()
    parser = FastCGIParser.__new__(FastCGIParser)
    parser.max_params_bytes = MAX_PARAMS_BYTES
    parser.max_params_pairs = MAX_PARAMS_PAIRS
    return parser
