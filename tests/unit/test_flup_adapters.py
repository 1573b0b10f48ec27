"""flup's protocol helpers as thin adapters over flupfast's codecs: fcgi_base.Record,
InputStream, MultiplexedInputStream, OutputStream, ajp_base.Packet and the AJP string and
header helpers, checked against real flup 1.0.3's own (a test dependency) on the same bytes,
on both backends. Where flupfast is stricter, the test says so (known_differences
'flup-adapters-strict').
"""
import socket
import threading

import pytest

from flupfast.protocols.errors import AJPError
from flupfast.server import ajp_base, fcgi_base

flup_fcgi = pytest.importorskip('flup.server.fcgi_base')
flup_ajp = pytest.importorskip('flup.server.ajp_base')


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.settimeout(10)
    b.settimeout(10)
    yield a, b
    a.close()
    b.close()


# -- FastCGI Record ---------------------------------------------------------------------------

@pytest.mark.parametrize('content', [b'', b'x', b'12345678', b'\x00\xff' * 32767 + b'!'])
def test_record_write_reads_back_in_flup(pair, content):
    ours = fcgi_base.Record(fcgi_base.FCGI_STDOUT, 7)
    ours.contentData, ours.contentLength = content, len(content)
    ours.write(pair[0])
    theirs = flup_fcgi.Record()
    theirs.read(pair[1])
    assert (theirs.type, theirs.requestId, theirs.contentData) == \
        (fcgi_base.FCGI_STDOUT, 7, content)
    assert theirs.paddingLength == ours.paddingLength == -len(content) & 7


@pytest.mark.parametrize('content', [b'', b'abc', b'\x01' * 65535])
def test_record_read_of_flups_write(pair, content):
    theirs = flup_fcgi.Record(fcgi_base.FCGI_PARAMS, 3)
    theirs.contentData, theirs.contentLength = content, len(content)
    threading.Thread(target=theirs.write, args=(pair[0],)).start()
    ours = fcgi_base.Record()
    ours.read(pair[1])
    assert (ours.version, ours.type, ours.requestId, ours.contentLength, ours.contentData) == \
        (1, fcgi_base.FCGI_PARAMS, 3, len(content), content)


def test_record_read_eof(pair):
    pair[0].sendall(b'\x01\x06\x00\x01\x00\x10\x00\x00short')
    pair[0].close()
    with pytest.raises(EOFError):
        fcgi_base.Record().read(pair[1])
    with pytest.raises(EOFError):
        fcgi_base.Record().read(pair[1])  # nothing left at all


def test_decode_encode_pair_like_flups():
    for name, value in [(b'A', b''), (b'N' * 200, b'v' * 70000), (b'', b'x' * 127)]:
        encoded = fcgi_base.encode_pair(name, value)
        assert encoded == flup_fcgi.encode_pair(name, value)
        assert fcgi_base.decode_pair(b'..' + encoded, 2) == flup_fcgi.decode_pair(b'..' + encoded,
                                                                                   2)


# -- FastCGI input and output streams ---------------------------------------------------------

class FakeConn:
    """flup's producer side: process_input() hands the next record's data to the stream."""

    def __init__(self, chunks):
        self.chunks = list(chunks)
        self.stream = None
        self.calls = 0

    def process_input(self):
        self.calls += 1
        self.stream.add_data(self.chunks.pop(0))


def test_input_stream_pulls_through_process_input(backend, monkeypatch):
    monkeypatch.setattr(fcgi_base, '_impl', backend)
    conn = FakeConn([b'line one\nline', b' two\n', b'tail', b''])
    stream = conn.stream = fcgi_base.InputStream(conn)
    assert type(stream._stream) is backend.InputStream
    assert stream.readline() == b'line one\n'
    assert stream.readline(length=4) == b'line'  # flup's keyword names
    assert stream.readlines(sizehint=0) == [b' two\n', b'tail']
    assert stream.read(n=10) == b'' and conn.calls == 4


def test_multiplexed_input_stream_across_threads(backend, monkeypatch):
    monkeypatch.setattr(fcgi_base, '_impl', backend)
    stream = fcgi_base.MultiplexedInputStream(None)
    data = [bytes([65 + i % 26]) * 1000 for i in range(50)]  # no newline in it

    def produce():
        for chunk in data:
            stream.add_data(chunk)
        stream.add_data(b'')
    threading.Thread(target=produce).start()
    assert stream.read(500) == data[0][:500]
    assert next(stream) == data[0][500:] + b''.join(data[1:])  # no newline: one "line"
    assert stream.read(1) == b'' and list(stream) == []


def sent_yet(sock):
    timeout = sock.gettimeout()
    sock.settimeout(0)
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return False
    finally:
        sock.settimeout(timeout)


@pytest.mark.parametrize('buffered', [False, True])
def test_output_stream_writes_flups_records(pair, buffered):
    server = fcgi_base.BaseFCGIServer(None)
    conn = fcgi_base.Connection(pair[0], None, server)
    req = fcgi_base.Request(conn, None, None)
    req.requestId = 5
    stream = fcgi_base.OutputStream(conn, req, fcgi_base.FCGI_STDERR, buffered=buffered)
    stream.write(b'first ')
    stream.writelines(['second'])
    assert sent_yet(pair[1]) is not buffered  # buffered holds until flush() or close()
    stream.flush()
    assert sent_yet(pair[1])
    stream.close()
    assert stream.dataWritten and stream.closed
    pair[0].shutdown(socket.SHUT_WR)
    records = []
    while True:
        rec = flup_fcgi.Record()
        try:
            rec.read(pair[1])
        except EOFError:
            break
        records.append((rec.type, rec.requestId, rec.contentData))
    assert b''.join(data for _, _, data in records) == b'first second'
    assert {(t, r) for t, r, _ in records} == {(fcgi_base.FCGI_STDERR, 5)}
    assert records[-1][2] == b''  # the end of the stream


# -- AJP Packet and helpers -------------------------------------------------------------------

@pytest.mark.parametrize('payload', [b'', b'\x0a', b'\x02' + b'x' * 8000])
def test_packet_read_matches_flups(pair, backend, monkeypatch, payload):
    monkeypatch.setattr(ajp_base, '_impl', backend)
    wire = b'\x12\x34' + len(payload).to_bytes(2, 'big') + payload
    pair[0].sendall(wire * 2)
    ours, theirs = ajp_base.Packet(), flup_ajp.Packet()
    ours.read(pair[1])
    theirs.read(pair[1])
    assert (ours.length, ours.data) == (theirs.length, theirs.data) == (len(payload), payload)


def test_packet_write_matches_flups(pair):
    for cls in (ajp_base.Packet, flup_ajp.Packet):
        pkt = cls()
        pkt.data = b'\x04\x00\xc8'
        pkt.write(pair[0])
    assert pair[1].recv(100) == (b'AB\x00\x03\x04\x00\xc8') * 2


def test_packet_read_errors(pair, backend, monkeypatch):
    monkeypatch.setattr(ajp_base, '_impl', backend)
    pair[0].sendall(b'GET / HTTP/1.1\r\n')
    with pytest.raises(ajp_base.ProtocolError, match='HTTP client'):
        ajp_base.Packet().read(pair[1])
    a, b = socket.socketpair()
    a.sendall(b'\x12\x34\x00\x10abc')
    a.close()
    with pytest.raises(EOFError):
        ajp_base.Packet().read(b)
    b.close()


STRINGS = [b'\x00\x00\x00', b'\x00\x03abc\x00', b'\xff\xff', b'\x00\x01z\x00rest']
HEADERS = [b'\xa0\x0b\x00\x09localhost\x00', b'\x00\x05X-Foo\x00\x00\x01v\x00',
           b'\xa0\x01\xff\xff']
ATTRIBUTES = [b'\xff', b'\x01\x00\x03ctx\x00', b'\x0a\x00\x01n\x00\x00\x02vv\x00',
              b'\x0b\x01\x00', b'\x05\x00\x03a=b\x00']


@pytest.mark.parametrize('data', STRINGS)
def test_decode_string_like_flups(data):
    assert ajp_base.decodeString(data) == flup_ajp.decodeString(data)


@pytest.mark.parametrize('data', HEADERS)
def test_decode_request_header_like_flups(data):
    assert ajp_base.decodeRequestHeader(data) == flup_ajp.decodeRequestHeader(data)


@pytest.mark.parametrize('data', ATTRIBUTES)
def test_decode_attribute_like_flups(data):
    assert ajp_base.decodeAttribute(data) == flup_ajp.decodeAttribute(data)


@pytest.mark.parametrize('bad', [b'\xa0\x63\x00\x00\x00', b'\x00\x05ab', b'\x00\x02abX'])
def test_decode_request_header_errors(bad):
    with pytest.raises(ajp_base.ProtocolError):
        ajp_base.decodeRequestHeader(bad)


def test_stricter_than_flup_on_a_missing_nul():
    """flup skips the byte where the NUL belongs, whatever it is; we refuse it."""
    assert flup_ajp.decodeString(b'\x00\x02abX') == (b'ab', 5)
    with pytest.raises(AJPError, match='NUL'):
        ajp_base.decodeString(b'\x00\x02abX')


@pytest.mark.parametrize('bad', [b'\x0c\x00\x01s\x00', b'\x42', b'', b'\x0b\x01'])
def test_decode_attribute_errors(bad):
    with pytest.raises(ajp_base.ProtocolError):
        ajp_base.decodeAttribute(bad)


@pytest.mark.parametrize('name,value', [(b'Content-Type', b'text/html'),
                                        (b'SET-COOKIE', b'a=b'), (b'X-Custom', b''),
                                        (b'Status', b'200')])
def test_encoders_like_flups(name, value):
    assert ajp_base.encodeString(value) == flup_ajp.encodeString(value)
    assert ajp_base.encodeResponseHeader(name, value) == \
        flup_ajp.encodeResponseHeader(name, value)
