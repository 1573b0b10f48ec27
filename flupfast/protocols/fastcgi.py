"""FastCGI 1.0 codec, pure Python: the record parser (bytes in, events out) and the encoders.

No sockets, threads or WSGI here. ``flupfast._speedups`` has a compiled twin of
``FastCGIParser`` and ``frame_stdout`` with the same names, signatures and events.

Events are tuples ``(record_type, request_id, payload)``:

=====================  ===========================================================
BEGIN_REQUEST          ``(role, flags)``
ABORT_REQUEST          ``None``
PARAMS                 ``dict`` of latin-1 ``str`` -> ``str``, emitted once, on the empty
                       PARAMS record that ends the stream (pairs may straddle records)
STDIN, DATA            ``bytes``; ``b''`` marks the end of the stream
GET_VALUES             ``list`` of the names asked for (``str``)
any other type         the raw content ``bytes`` (the connection answers UNKNOWN_TYPE)
=====================  ===========================================================
"""
import struct
import sys

from flupfast.limits import (
    MAX_OPEN_REQUESTS, MAX_PARAMS_BYTES, MAX_PARAMS_PAIRS, PENDING_PARAMS_REQUESTS)
from flupfast.protocols.errors import FastCGIError

# Spec 8: constants.
FCGI_LISTENSOCK_FILENO = 0
FCGI_HEADER_LEN = 8
FCGI_VERSION_1 = 1

FCGI_BEGIN_REQUEST = 1
FCGI_ABORT_REQUEST = 2
FCGI_END_REQUEST = 3
FCGI_PARAMS = 4
FCGI_STDIN = 5
FCGI_STDOUT = 6
FCGI_STDERR = 7
FCGI_DATA = 8
FCGI_GET_VALUES = 9
FCGI_GET_VALUES_RESULT = 10
FCGI_UNKNOWN_TYPE = 11
FCGI_MAXTYPE = FCGI_UNKNOWN_TYPE

FCGI_NULL_REQUEST_ID = 0

FCGI_KEEP_CONN = 1

FCGI_RESPONDER = 1
FCGI_AUTHORIZER = 2
FCGI_FILTER = 3

FCGI_REQUEST_COMPLETE = 0
FCGI_CANT_MPX_CONN = 1
FCGI_OVERLOADED = 2
FCGI_UNKNOWN_ROLE = 3

FCGI_MAX_CONNS = 'FCGI_MAX_CONNS'
FCGI_MAX_REQS = 'FCGI_MAX_REQS'
FCGI_MPXS_CONNS = 'FCGI_MPXS_CONNS'

# Spec 3.3: typedef struct { version, type, requestIdB1, requestIdB0, contentLengthB1,
# contentLengthB0, paddingLength, reserved } FCGI_Header;
_HEADER = struct.Struct('!BBHHBx')
# Spec 5.1: FCGI_BeginRequestBody { roleB1, roleB0, flags, reserved[5] }
_BEGIN_BODY = struct.Struct('!HB5x')
# Spec 5.5: FCGI_EndRequestBody { appStatusB3..B0, protocolStatus, reserved[3] }
_END_BODY = struct.Struct('!LB3x')
# Spec 4.2: FCGI_UnknownTypeBody { type, reserved[7] }
_UNKNOWN_BODY = struct.Struct('!B7x')

_PADDING = bytes(8)

# Records whose content is a stream that the parser hands on as it arrives.
_STREAM_TYPES = (FCGI_STDIN, FCGI_DATA)


_LONG_LENGTH = struct.Struct('!L').unpack_from


def decode_params(data, max_pairs=MAX_PARAMS_PAIRS):
    """Decode a whole PARAMS stream (spec 3.4 name-value pairs) into a dict of latin-1 str.

    A length below 128 takes one byte; otherwise four, with the high bit set.
    """
    if type(data) is not bytes:
        data = bytes(data)
    params = {}
    pos = 0
    end = len(data)
    while pos < end:
        # Two one-byte lengths (names and values under 128 bytes, the usual pair) are decoded
        # inline: a helper call per pair costs the pure backend a third of its PARAMS time.
        name_len = data[pos]
        if name_len < 0x80 and pos + 1 < end and data[pos + 1] < 0x80:
            value_len = data[pos + 1]
            pos += 2
        else:
            name_len, value_len, pos = _pair_lengths(data, pos, end)
        value_start = pos + name_len
        value_end = value_start + value_len
        if value_end > end:
            raise FastCGIError('name-value pair runs past the end of PARAMS')
        params[data[pos:value_start].decode('latin-1')] = \
            data[value_start:value_end].decode('latin-1')
        pos = value_end
        if len(params) > max_pairs:
            raise FastCGIError('more than %d name-value pairs in PARAMS' % max_pairs)
    return params


def _pair_lengths(data, pos, end):
    """The name and value lengths of the pair at ``pos`` and the position after them (spec
    3.4: a length is one byte below 128, else four bytes with the high bit set)."""
    lengths = []
    for _ in (0, 1):
        if pos >= end:
            raise FastCGIError('truncated name-value pair length in PARAMS')
        length = data[pos]
        if length & 0x80:
            if pos + 4 > end:
                raise FastCGIError('truncated name-value pair length in PARAMS')
            length = _LONG_LENGTH(data, pos)[0] & 0x7FFFFFFF
            pos += 4
        else:
            pos += 1
        lengths.append(length)
    return lengths[0], lengths[1], pos


def _encode_length(length):
    if length < 128:
        return bytes((length,))
    return struct.pack('!L', length | 0x80000000)


def encode_pair(name, value):
    """Encode one name-value pair (spec 3.4); str is encoded latin-1."""
    if isinstance(name, str):
        name = name.encode('latin-1')
    if isinstance(value, str):
        value = value.encode('latin-1')
    return _encode_length(len(name)) + _encode_length(len(value)) + name + value


def encode_params(pairs):
    """Encode an iterable of (name, value) into one name-value stream."""
    return b''.join(encode_pair(name, value) for name, value in pairs)


def encode_record(record_type, request_id, content=b''):
    """One whole record, content padded to a multiple of 8 (spec 3.3 recommends it)."""
    length = len(content)
    if length > 0xFFFF:
        raise ValueError('FastCGI record content is limited to 65535 bytes')
    padding = -length & 7
    return b''.join((_HEADER.pack(FCGI_VERSION_1, record_type, request_id, length, padding),
                     content, _PADDING[:padding]))


def encode_stream(record_type, request_id, data):
    """A whole stream (e.g. PARAMS or STDIN) split into records and closed by an empty one."""
    view = memoryview(data)
    parts = [encode_record(record_type, request_id, view[i:i + 0xFFF8])
             for i in range(0, len(view), 0xFFF8)]
    parts.append(encode_record(record_type, request_id))
    return b''.join(parts)


def decode_header(header):
    """The 8-byte record header (spec 3.3) -> ``(version, type, request_id, content_length,
    padding_length)``; the version is not checked here (the caller decides)."""
    return _HEADER.unpack(header)


def decode_end_request(content):
    """END_REQUEST content (spec 5.5) -> ``(app_status, protocol_status)``."""
    if len(content) < _END_BODY.size:
        raise FastCGIError('END_REQUEST body of %d bytes, expected 8' % len(content))
    return _END_BODY.unpack_from(content)


def encode_begin_request(request_id, role=FCGI_RESPONDER, flags=0):
    return encode_record(FCGI_BEGIN_REQUEST, request_id, _BEGIN_BODY.pack(role, flags))


def encode_end_request(request_id, app_status=0, protocol_status=FCGI_REQUEST_COMPLETE):
    return encode_record(FCGI_END_REQUEST, request_id,
                         _END_BODY.pack(app_status & 0xFFFFFFFF, protocol_status))


def encode_unknown_type(record_type):
    return encode_record(FCGI_UNKNOWN_TYPE, FCGI_NULL_REQUEST_ID, _UNKNOWN_BODY.pack(record_type))


def encode_get_values_result(values):
    """GET_VALUES_RESULT for the answered names (spec 4.1); values are str or int."""
    return encode_record(FCGI_GET_VALUES_RESULT, FCGI_NULL_REQUEST_ID,
                         encode_params((name, str(value)) for name, value in values.items()))


def frame_stdout(request_id, data, max_content, record_type=FCGI_STDOUT):
    """Frame ``data`` as ``record_type`` records of at most ``max_content`` bytes each.

    Returns a list of buffers for ``sendmsg``: headers and padding are small new objects,
    the payload is referenced through memoryview slices and never copied. ``max_content``
    must be a multiple of 8 in 8..65528 so that only the last record needs padding.
    Empty ``data`` gives an empty list (the end-of-stream record is ``encode_record``).
    """
    if max_content <= 0:
        raise ValueError('max_content must be positive, not %r' % (max_content,))
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast('B')
    total = len(view)
    buffers = []
    pack = _HEADER.pack
    pos = 0
    while pos < total:
        length = total - pos
        if length > max_content:
            length = max_content
        padding = -length & 7
        buffers.append(pack(FCGI_VERSION_1, record_type, request_id, length, padding))
        buffers.append(view[pos:pos + length])
        if padding:
            buffers.append(_PADDING[:padding])
        pos += length
    return buffers


class FastCGIParser:
    """Incremental FastCGI record parser: ``feed(data)`` returns the list of new events.

    Bytes may be split anywhere and a chunk may hold many records. Padding is skipped, the
    version checked, and PARAMS decoded from the concatenated stream of a request, so a pair
    may straddle records (flup decodes each record alone and mangles such pairs). PARAMS are
    kept only for request ids that began; the caps bound what a peer can make us hold.
    Raises ``FastCGIError`` and nothing else; after an error the parser is unusable.
    """

    def __init__(self, max_params_bytes=MAX_PARAMS_BYTES, max_params_pairs=MAX_PARAMS_PAIRS):
        self.max_params_bytes = max_params_bytes
        self.max_params_pairs = max_params_pairs
        self._buf = bytearray()
        self._params = {}  # request id -> bytearray of its PARAMS stream so far
        self._params_held = 0  # bytes of every stream in _params

    def feed(self, data):
        events = []
        if self._buf:
            self._buf += data
            consumed = self._parse(self._buf, events)
            del self._buf[:consumed]
        else:
            consumed = self._parse(data, events)
            if consumed < len(data):
                self._buf += data[consumed:]
        return events

    @property
    def pending(self):
        """How many bytes of an incomplete record are held."""
        return len(self._buf)

    def _parse(self, data, events):
        pos = 0
        end = len(data)
        unpack = _HEADER.unpack_from
        while end - pos >= FCGI_HEADER_LEN:
            version, record_type, request_id, length, padding = unpack(data, pos)
            if version != FCGI_VERSION_1:
                raise FastCGIError('unsupported FastCGI version %d (record type %d)'
                                   % (version, record_type))
            record_end = pos + FCGI_HEADER_LEN + length
            if record_end + padding > end:
                break
            start = pos + FCGI_HEADER_LEN
            pos = record_end + padding
            if record_type in _STREAM_TYPES:
                events.append((record_type, request_id, bytes(data[start:record_end])))
            elif record_type == FCGI_PARAMS:
                self._on_params(request_id, data, start, record_end, events)
            elif record_type == FCGI_BEGIN_REQUEST:
                if length < _BEGIN_BODY.size:
                    raise FastCGIError('BEGIN_REQUEST body of %d bytes, expected 8' % length)
                role, flags = _BEGIN_BODY.unpack_from(data, start)
                if len(self._params) >= MAX_OPEN_REQUESTS:
                    raise FastCGIError('too many requests begun without their PARAMS')
                stream = self._params.get(request_id)
                if stream is not None:  # begun again: its PARAMS so far are dropped
                    self._params_held -= len(stream)
                self._params[request_id] = bytearray()
                events.append((FCGI_BEGIN_REQUEST, request_id, (role, flags)))
            elif record_type == FCGI_ABORT_REQUEST:
                events.append((FCGI_ABORT_REQUEST, request_id, None))
            elif record_type == FCGI_GET_VALUES:
                names = decode_params(data[start:record_end], self.max_params_pairs)
                events.append((FCGI_GET_VALUES, request_id, list(names)))
            else:
                events.append((record_type, request_id, bytes(data[start:record_end])))
        return pos

    def _on_params(self, request_id, data, start, stop, events):
        stream = self._params.get(request_id)
        if stream is None:
            return  # spec 3.3: records for inactive request ids are ignored
        if stop > start:
            if len(stream) + stop - start > self.max_params_bytes:
                del self._params[request_id]
                raise FastCGIError('PARAMS of request %d exceed %d bytes'
                                   % (request_id, self.max_params_bytes))
            held_cap = min(self.max_params_bytes * PENDING_PARAMS_REQUESTS, sys.maxsize)
            if self._params_held + stop - start > held_cap:
                raise FastCGIError('PARAMS held for %d open requests exceed %d bytes'
                                   % (len(self._params), held_cap))
            stream += data[start:stop]
            self._params_held += stop - start
            return
        del self._params[request_id]
        self._params_held -= len(stream)
        events.append((FCGI_PARAMS, request_id, decode_params(stream, self.max_params_pairs)))
