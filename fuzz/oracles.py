"""The invariants every codec must keep on any input, checked on both backends at once.

One oracle per codec takes a structured case (the wire bytes, where they are cut into feeds, the
buffer type of each feed, the caps) and asserts, raising AssertionError on a violation:

* only the protocol's own ``ProtocolError`` subclass escapes (any other exception propagates
  and is the finding);
* the pure and the compiled twins agree event for event: the same events, ``pending`` counts
  and results after each feed, the same error class and message at the same feed;
* the split never changes the outcome: the events of a stream fed in pieces are those of the
  whole stream fed at once, and an error fed in pieces is the error fed whole;
* memory stays bounded by the caps of flupfast.limits (held partial records and packets,
  buffered PARAMS streams and open requests, an SCGI header still incomplete, the chunks an
  input stream keeps).

The hypothesis properties (tests/reliability/test_fuzz_properties.py) draw cases with
strategies; the atheris targets (fuzz/fuzz_*.py) and the corpus replay
(tests/reliability/test_fuzz_corpus.py) decode a case from raw fuzzer bytes with the
``*_case`` functions, so a saved crash reproduces through exactly the same checks.
"""
import io
import sys

from flupfast.limits import (
    AJP_MAX_PACKET, MAX_OPEN_REQUESTS, MAX_PARAMS_BYTES, MAX_PARAMS_PAIRS, MAX_RECORD_CONTENT,
    MAX_SCGI_HEADER_BYTES, MAX_UWSGI_VARS_BYTES, PENDING_PARAMS_REQUESTS)
from flupfast.body import ClientDisconnected
from flupfast.protocols.errors import (
    AJPError, FastCGIError, ProtocolError, SCGIError, UWSGIError)

# The largest whole FastCGI record: header, 16-bit content length, 8-bit padding length.
MAX_RECORD_BYTES = 8 + MAX_RECORD_CONTENT + 0xFF

KINDS = ('bytes', 'bytearray', 'view')

# Caps the cases choose from: the defaults, and small ones that inputs of a few hundred bytes
# can reach (a fuzzer cannot grow a 1 MiB PARAMS stream).
FASTCGI_CAPS = ((MAX_PARAMS_BYTES, MAX_PARAMS_PAIRS), (400, 5), (70000, 2), (16, 1), (0, 0))
SCGI_CAPS = ((MAX_SCGI_HEADER_BYTES, MAX_PARAMS_PAIRS), (100, 4), (9, 1), (1, 0))
UWSGI_CAPS = ((MAX_UWSGI_VARS_BYTES, MAX_PARAMS_PAIRS), (100, 4), (9, 1), (0, 0))
AJP_MAX_PACKETS = (AJP_MAX_PACKET, 8192, 300, 5)


def split_at(data, cuts):
    """``data`` cut at the given offsets (out-of-range and repeated ones are ignored)."""
    bounds = [0] + sorted({c for c in cuts if 0 < c < len(data)}) + [len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


def feeds(wire, cuts, kind):
    """The pieces of ``wire`` as the given buffer type. A 'view' is a memoryview of one reused
    receive buffer that is overwritten once the piece has been fed (as with recv_into), so a
    codec that keeps a reference instead of a copy sees garbage."""
    if kind == 'view':
        recv_buf = bytearray(len(wire) + 1)
    for piece in split_at(wire, cuts):
        if kind == 'bytes':
            yield piece
        elif kind == 'bytearray':
            yield bytearray(piece)
        else:
            recv_buf[:len(piece)] = piece
            yield memoryview(recv_buf)[:len(piece)]
            recv_buf[:] = b'\xa5' * len(recv_buf)


def _error(exc, expected):
    assert isinstance(exc, expected), 'a %s raised %r' % (expected.__name__, exc)
    return ('error', type(exc).__name__, str(exc))


# -- FastCGI ----------------------------------------------------------------------------------

def params_streams(parser):
    """The PARAMS streams a parser buffers, by request id (the compiled twin's dict is found
    through the garbage collector, which traverses its object attributes)."""
    streams = getattr(parser, '_params', None)
    if streams is None:
        import gc
        streams = [r for r in gc.get_referents(parser) if type(r) is dict]
        assert len(streams) == 1, 'cannot find the PARAMS streams of %r' % (parser,)
        streams = streams[0]
    return streams


def _check_fastcgi_bounds(parser, caps):
    assert 0 <= parser.pending < MAX_RECORD_BYTES, \
        'holds %d bytes, more than a partial record' % parser.pending
    streams = params_streams(parser)
    assert len(streams) <= MAX_OPEN_REQUESTS, '%d open requests' % len(streams)
    for stream in streams.values():
        assert len(stream) <= caps[0], \
            'a PARAMS stream of %d bytes over the %d-byte cap' % (len(stream), caps[0])
    held = sum(len(stream) for stream in streams.values())
    assert held <= caps[0] * PENDING_PARAMS_REQUESTS, \
        '%d bytes of PARAMS held over the connection cap' % held


def _check_fastcgi_event(event, caps):
    record_type, request_id, payload = event
    assert 0 <= record_type <= 255 and 0 <= request_id <= 0xFFFF, event[:2]
    if record_type == 4:  # PARAMS
        assert type(payload) is dict and len(payload) <= caps[1]
        assert all(type(k) is str and type(v) is str for k, v in payload.items())
    elif record_type == 9:  # GET_VALUES
        assert type(payload) is list and len(payload) <= caps[1]
    elif record_type == 1:  # BEGIN_REQUEST
        role, flags = payload
        assert 0 <= role <= 0xFFFF and 0 <= flags <= 255
    elif record_type == 2:  # ABORT_REQUEST
        assert payload is None
    else:
        assert type(payload) is bytes and len(payload) <= MAX_RECORD_CONTENT


def feed_log(parser, wire, cuts, kind, error, entry):
    """Feed ``wire`` to ``parser`` in pieces: ``entry(output)`` per feed (it checks the output
    and the parser's state), the log ended by the error (which must be an ``error``) if any."""
    log = []
    for data in feeds(wire, cuts, kind):
        try:
            output = parser.feed(data)
        except ProtocolError as exc:
            log.append(_error(exc, error))
            break
        log.append(entry(output))
    return log


def fastcgi_log(backend, wire, cuts, kind, caps):
    """One (events, pending) per feed, ended by the error if any."""
    parser = backend.FastCGIParser(*caps)

    def entry(events):
        for event in events:
            _check_fastcgi_event(event, caps)
        _check_fastcgi_bounds(parser, caps)
        return events, parser.pending
    return feed_log(parser, wire, cuts, kind, FastCGIError, entry)


def check_fastcgi(pure, compiled, wire, cuts=(), kind='bytes', caps=FASTCGI_CAPS[0]):
    logs = [fastcgi_log(b, wire, cuts, kind, caps) for b in (pure, compiled)]
    assert logs[0] == logs[1], 'the FastCGI twins disagree'
    whole = fastcgi_log(compiled, wire, (), 'bytes', caps)
    if logs[0] and logs[0][-1][0] == 'error':
        assert whole[-1] == logs[0][-1], 'the split changed the FastCGI error'
    else:
        split_events = [e for entry in logs[0] for e in entry[0]]
        assert [e for entry in whole for e in entry[0]] == split_events, \
            'the split changed the FastCGI events'
        assert (whole[-1][1] if whole else 0) == (logs[0][-1][1] if logs[0] else 0)
    return logs[0]


def check_frame_stdout(pure, compiled, request_id, data, max_content):
    """frame_stdout's records, parsed back, carry ``data`` exactly (both twins)."""
    framed = []
    for backend in (pure, compiled):
        wire = b''.join(bytes(b) for b in backend.frame_stdout(request_id, data, max_content))
        framed.append(wire)
        events = compiled.FastCGIParser().feed(wire)
        assert b''.join(e[2] for e in events) == bytes(data)
        assert all(e[:2] == (6, request_id) and 0 < len(e[2]) <= max_content for e in events)
    assert framed[0] == framed[1]


# -- SCGI -------------------------------------------------------------------------------------

def _scgi_outcome(backend, data, caps):
    try:
        result = backend.decode_scgi_request(data, *caps)
    except ProtocolError as exc:
        return _error(exc, SCGIError)
    if result is None:
        # Incomplete: at most the length digits, ':' and the capped block are buffered.
        assert len(data) <= len(str(caps[0])) + 1 + caps[0], \
            'an incomplete header of %d bytes over the %d-byte cap' % (len(data), caps[0])
        return None
    environ, content_length, used = result
    assert all(type(k) is str and type(v) is str for k, v in environ.items())
    assert 0 < len(environ) <= caps[1]
    assert type(content_length) is int and content_length >= 0
    assert 3 <= used <= len(data) and data[used - 1] == 0x2C
    return result


def scgi_log(backend, wire, cuts, kind, caps, decoded=_scgi_outcome):
    """Decode as SCGIConnection does (and UWSGIConnection, with ``decoded=_uwsgi_outcome``):
    after each receive, the header bytes gathered so far; one outcome per receive until a
    result or an error."""
    head = bytearray()
    log = []
    for data in feeds(wire, cuts, kind):
        head += data
        outcome = decoded(backend, head if kind == 'bytearray' else bytes(head), caps)
        log.append(outcome)
        if outcome is not None:
            break
    return log


def check_scgi(pure, compiled, wire, cuts=(), kind='bytes', caps=SCGI_CAPS[0],
               decoded=_scgi_outcome, protocol='SCGI'):
    logs = [scgi_log(b, wire, cuts, kind, caps, decoded) for b in (pure, compiled)]
    assert logs[0] == logs[1], 'the %s twins disagree' % protocol
    if not wire:
        return logs[0]
    last = logs[0][-1]
    whole = decoded(compiled, wire, caps)
    if last is None:
        assert whole is None, 'an incomplete header decoded once whole'
    elif last[0] == 'error':
        # The message may name a different first fault (e.g. too many digits rather than
        # a length over the cap), never a different verdict.
        assert whole is not None and whole[0] == 'error', \
            'the split changed the %s verdict' % protocol
    else:
        assert whole == last, 'the split changed the %s request' % protocol
    return logs[0]


# -- uwsgi ------------------------------------------------------------------------------------

def _uwsgi_outcome(backend, data, caps):
    try:
        result = backend.decode_uwsgi_request(data, *caps)
    except ProtocolError as exc:
        return _error(exc, UWSGIError)
    if result is None:
        # Incomplete: at most the 4-byte header and the capped vars block are buffered.
        assert len(data) < 4 + caps[0] + 1, \
            'an incomplete header of %d bytes over the %d-byte cap' % (len(data), caps[0])
        return None
    environ, content_length, used = result
    assert all(type(k) is str and k and type(v) is str for k, v in environ.items())
    assert len(environ) <= caps[1]
    assert type(content_length) is int and content_length >= 0
    assert used == 4 + (data[1] | data[2] << 8) <= len(data) and data[0] == 0
    return result


def check_uwsgi(pure, compiled, wire, cuts=(), kind='bytes', caps=UWSGI_CAPS[0]):
    return check_scgi(pure, compiled, wire, cuts, kind, caps, _uwsgi_outcome, 'uwsgi')


# -- AJP13 ------------------------------------------------------------------------------------

def ajp_decoded(backend, payload):
    """Both decoders on one payload, as the connection may apply either to a packet."""
    out = []
    try:
        environ, length, chunked, secret = backend.decode_forward_request(payload)
    except ProtocolError as exc:
        out.append(_error(exc, AJPError))
    else:
        assert all(type(k) is str and type(v) is str for k, v in environ.items())
        for key in ('REQUEST_METHOD', 'SERVER_PROTOCOL', 'REQUEST_URI', 'REMOTE_ADDR',
                    'REMOTE_HOST', 'SERVER_NAME', 'SERVER_PORT'):
            assert key in environ, key
        assert length is None or (type(length) is int and 0 <= length < 1 << 63)
        assert type(chunked) is bool and (secret is None or type(secret) is str)
        out.append((list(environ.items()), length, chunked, secret))
    try:
        chunk = backend.decode_body_chunk(payload)
    except ProtocolError as exc:
        out.append(_error(exc, AJPError))
    else:
        assert type(chunk) is bytes and len(chunk) <= max(len(payload) - 2, 0)
        out.append(chunk)
    return out


def ajp_log(backend, wire, cuts, kind, max_packet):
    """One (decoded packets, pending) per feed, ended by the error if any."""
    parser = backend.AJPParser(max_packet)

    def entry(packets):
        assert 0 <= parser.pending < max_packet, \
            'holds %d bytes, max_packet=%d' % (parser.pending, max_packet)
        for packet in packets:
            assert type(packet) is bytes and len(packet) <= max_packet - 4
        return [(p, ajp_decoded(backend, p)) for p in packets], parser.pending
    return feed_log(parser, wire, cuts, kind, AJPError, entry)


def check_ajp(pure, compiled, wire, cuts=(), kind='bytes', max_packet=AJP_MAX_PACKET):
    logs = [ajp_log(b, wire, cuts, kind, max_packet) for b in (pure, compiled)]
    assert logs[0] == logs[1], 'the AJP13 twins disagree'
    # The raw bytes as one payload too: the decoders' own input space, without framing.
    assert ajp_decoded(pure, wire) == ajp_decoded(compiled, wire), \
        'the AJP13 decoders disagree'
    parser = compiled.AJPParser(max_packet)
    try:
        whole = [('packets', parser.feed(wire))]
    except AJPError as exc:
        whole = [_error(exc, AJPError)]
    if logs[0] and logs[0][-1][0] == 'error':
        assert whole[-1] == logs[0][-1], 'the split changed the AJP13 error'
    else:
        assert whole[0][1] == [p for entry in logs[0] for p, _ in entry[0]], \
            'the split changed the AJP13 packets'
    return logs[0]


# -- The input stream -------------------------------------------------------------------------

# The reference count, in such a comprehension, of a fresh object held only by a list: the
# list, the loop name and the call's argument.
_LISTED_ONLY = [sys.getrefcount(c) for c in [bytes(bytearray(2))]][0]


class Pull:
    """The body in chunks of the given sizes (cycled), each chunk a new object of ``kind``;
    at the end b'' ('empty'), None ('none') or ClientDisconnected ('raise'). It remembers the
    bytes chunks it handed out, to see which ones a stream still holds."""

    def __init__(self, body, sizes, kind, end):
        self.body = memoryview(body)
        self.sizes = sizes or [max(len(body), 1)]
        self.kind = kind
        self.end = end
        self.pos = self.index = self.pulls = 0
        self.chunks = []
        self.reused = bytearray(max(self.sizes))

    def __call__(self):
        self.pulls += 1
        if self.pos >= len(self.body):
            if self.end == 'raise':
                raise ClientDisconnected('gone')
            return b'' if self.end == 'empty' else None
        size = self.sizes[self.index % len(self.sizes)]
        self.index += 1
        piece = self.body[self.pos:self.pos + size]
        self.pos += len(piece)
        if self.kind == 'bytearray':
            return bytearray(piece)
        if self.kind == 'view':
            self.reused[:] = b'\xee' * len(self.reused)
            self.reused[:len(piece)] = piece
            return memoryview(self.reused)[:len(piece)]
        chunk = bytes(piece)
        if len(chunk) > 1:  # shorter bytes objects are shared singletons
            self.chunks.append(chunk)
        return chunk

    def held(self):
        """How many of the bytes chunks are referenced by anything but this list; the ones
        released are forgotten (a stream cannot get them back)."""
        self.chunks = [c for c in self.chunks if sys.getrefcount(c) > _LISTED_ONLY]
        return len(self.chunks)


def _copy(result):
    """What a read returned, as new objects (bytearray), so that the log holds no reference
    to a pulled chunk that the stream may have handed out uncopied."""
    if type(result) is bytes:
        return bytearray(result)
    if type(result) is list:
        assert all(type(line) is bytes for line in result)
        return [bytearray(line) for line in result]
    return result


def input_stream_log(backend, body, sizes, kind, end, ops):
    pull = Pull(body, sizes, kind, end)
    stream = backend.InputStream(pull)
    log = []
    for name, arg in ops:
        try:
            if name == 'read':
                result = _copy(stream.read(arg))
            elif name == 'readline':
                result = _copy(stream.readline(arg))
            elif name == 'readlines':
                result = _copy(stream.readlines(arg))
            elif name == 'next':
                result = _copy(next(stream, 'stop'))
            else:
                result = stream.drain()
        except ClientDisconnected as exc:
            result = ('error', str(exc))
        # Bounded memory: the stream keeps at most the last pulled chunk.
        assert pull.held() <= 1, 'the stream holds several pulled chunks'
        log.append((name, arg, result, stream.bytes_read, stream.at_eof, pull.pulls))
    log.append(('rest', stream.read() if end != 'raise' else None, stream.bytes_read))
    return log


def check_input_stream(pure, compiled, body, sizes=(), kind='bytes', end='empty', ops=()):
    sizes = list(sizes)
    logs = [input_stream_log(b, body, sizes, kind, end, ops) for b in (pure, compiled)]
    assert logs[0] == logs[1], 'the InputStream twins disagree'
    if end != 'raise':
        # Independent of both twins: every read agrees with io.BytesIO over the body.
        ref = io.BytesIO(body)
        for name, arg, result, bytes_read, _, _ in logs[0][:-1]:
            if name == 'drain':
                ref.seek(0, io.SEEK_END)
                continue
            if name == 'next':
                expected = next(ref, 'stop')
            else:
                if arg is not None and arg > sys.maxsize:
                    arg = -1  # BytesIO refuses what the streams saturate
                expected = getattr(ref, name)(arg)
            assert result == expected, (name, arg)
        assert logs[0][-1][1] == ref.read()
    return logs[0]


# -- Cases from raw fuzzer bytes --------------------------------------------------------------
# A control prefix picks the feed type, the caps and the cuts; the rest is the wire. The
# layouts are small and total: every byte string decodes to some case.

def _cuts(data, pos):
    """Up to 7 cut offsets (16-bit each) after a count byte at ``pos``."""
    if pos >= len(data):
        return [], pos
    count = data[pos] & 7
    pos += 1
    cuts = []
    for _ in range(count):
        if pos + 2 > len(data):
            break
        cuts.append((data[pos] << 8) | data[pos + 1])
        pos += 2
    return cuts, pos


def fastcgi_case(data):
    flags = data[0] if data else 0
    cuts, pos = _cuts(data, 1)
    return dict(wire=bytes(data[pos:]), cuts=cuts, kind=KINDS[flags % 3],
                caps=FASTCGI_CAPS[(flags >> 2) % len(FASTCGI_CAPS)])


def scgi_case(data):
    flags = data[0] if data else 0
    cuts, pos = _cuts(data, 1)
    return dict(wire=bytes(data[pos:]), cuts=cuts, kind=KINDS[flags % 3],
                caps=SCGI_CAPS[(flags >> 2) % len(SCGI_CAPS)])


def uwsgi_case(data):
    flags = data[0] if data else 0
    cuts, pos = _cuts(data, 1)
    return dict(wire=bytes(data[pos:]), cuts=cuts, kind=KINDS[flags % 3],
                caps=UWSGI_CAPS[(flags >> 2) % len(UWSGI_CAPS)])


def ajp_case(data):
    flags = data[0] if data else 0
    cuts, pos = _cuts(data, 1)
    return dict(wire=bytes(data[pos:]), cuts=cuts, kind=KINDS[flags % 3],
                max_packet=AJP_MAX_PACKETS[(flags >> 2) % len(AJP_MAX_PACKETS)])


_OPS = ('read', 'readline', 'readlines', 'next', 'drain', 'read')
_ENDS = ('empty', 'none', 'raise')


def _op_arg(byte):
    if byte == 255:
        return None
    if byte == 254:
        return 10 ** 30  # saturates like a Python int
    if byte >= 200:
        return (byte - 199) * 400
    return byte - 2


def input_stream_case(data):
    """flags, then 1-4 chunk sizes (one byte each, in units of 1 or 37 bytes), then up to 15
    operations (op byte, argument byte); the rest is the body."""
    flags = data[0] if data else 0
    pos = 1
    count = 1 + (data[pos] & 3) if pos < len(data) else 0
    scale = 37 if pos < len(data) and data[pos] & 4 else 1
    pos += 1
    sizes = []
    for _ in range(count):
        if pos >= len(data):
            break
        sizes.append(1 + data[pos] * scale)
        pos += 1
    ops = []
    nops = data[pos] & 15 if pos < len(data) else 0
    pos += 1
    for _ in range(nops):
        if pos + 2 > len(data):
            break
        ops.append((_OPS[data[pos] % len(_OPS)], _op_arg(data[pos + 1])))
        pos += 2
    return dict(body=bytes(data[pos:]), sizes=sizes, kind=KINDS[flags % 3],
                end=_ENDS[(flags >> 2) % 3], ops=ops)


CODECS = {
    'fastcgi': (fastcgi_case, check_fastcgi),
    'scgi': (scgi_case, check_scgi),
    'uwsgi': (uwsgi_case, check_uwsgi),
    'ajp': (ajp_case, check_ajp),
    'input_stream': (input_stream_case, check_input_stream),
}


def run_input(codec, pure, compiled, data):
    """Check one raw fuzzer input of ``codec`` (a key of CODECS) on both backends."""
    case, check = CODECS[codec]
    return check(pure, compiled, **case(data))
