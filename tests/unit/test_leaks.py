"""Leak checks for every class and function with a compiled twin (DESIGN.md: a leak test for
every cdef class), run on both backends: the same work repeated must not grow the memory that
tracemalloc sees (the compiled buffers use PyMem, which it traces) nor the reference counts of
the objects handed in.
"""
import gc
import sys
import tracemalloc
import weakref

import pytest

from flupfast.body import ClientDisconnected
from flupfast.protocols import fastcgi as f
from flupfast.protocols.errors import AJPError, FastCGIError
from tests import ajp_client

ROUNDS = 300
# Allowed growth between two equal batches of ROUNDS: far below one leaked buffer per round
# (the smallest thing a round allocates is a few hundred bytes; 300 of them exceed this).
SLACK = 16 * 1024


def growth(work):
    """Memory growth between a second and a third batch of ``work`` (the first warms caches)."""
    for _ in range(ROUNDS):
        work()
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(ROUNDS):
            work()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(ROUNDS):
            work()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


PARAMS = f.encode_params([('REQUEST_METHOD', 'POST'), ('HTTP_X_%s' % ('k' * 150), 'v' * 300)])
REQUEST = (f.encode_begin_request(1, f.FCGI_RESPONDER, 1) + f.encode_stream(f.FCGI_PARAMS, 1, PARAMS)
           + f.encode_stream(f.FCGI_STDIN, 1, b's' * 70000)
           + f.encode_record(f.FCGI_GET_VALUES, 0, f.encode_params([('FCGI_MAX_CONNS', '')]))
           + f.encode_record(f.FCGI_ABORT_REQUEST, 1) + f.encode_record(77, 0, b'?'))


def test_parser_whole_and_split_feeds(backend):
    data = bytearray(REQUEST)

    def work():
        parser = backend.FastCGIParser()
        parser.feed(data)
        parser = backend.FastCGIParser()
        for i in range(0, len(data), 9001):  # records straddle feeds: the held buffer
            parser.feed(memoryview(data)[i:i + 9001])
    assert growth(work) < SLACK
    assert sys.getrefcount(data) == 2  # no buffer export or reference left behind


def test_parser_dropped_with_held_record_and_open_params(backend):
    def work():
        parser = backend.FastCGIParser()
        # Two begun requests with PARAMS half sent, and half a 64 KiB record held.
        parser.feed(f.encode_begin_request(1) + f.encode_begin_request(2)
                    + f.encode_record(f.FCGI_PARAMS, 1, PARAMS[:100])
                    + f.encode_record(f.FCGI_STDIN, 2, b'x' * 65000)[:40000])
        assert parser.pending == 40000
    assert growth(work) < SLACK


@pytest.mark.parametrize('data', [
    b'\x02' + f.encode_record(f.FCGI_STDIN, 1, b'x')[1:],
    f.encode_begin_request(1) + f.encode_stream(f.FCGI_PARAMS, 1, b'\x05\x05abc'),
    f.encode_begin_request(1) + f.encode_stream(f.FCGI_PARAMS, 1, PARAMS * 3),
    f.encode_record(f.FCGI_STDIN, 1, b'y' * 5000) + f.encode_record(f.FCGI_BEGIN_REQUEST, 1, b'x'),
], ids=['version', 'params', 'cap', 'begin'])
def test_parser_errors(backend, data):
    def work():
        parser = backend.FastCGIParser(max_params_bytes=1000, max_params_pairs=2)
        with pytest.raises(FastCGIError):
            for i in range(0, len(data), 3000):
                parser.feed(bytearray(data[i:i + 3000]))
    assert growth(work) < SLACK


def test_parser_is_collected(backend):
    parser = backend.FastCGIParser()
    parser.feed(REQUEST[:100])
    ref = weakref.ref(parser)
    del parser
    assert ref() is None


def test_frame_stdout_and_decode_params(backend):
    payload = bytearray(200000)

    def work():
        backend.frame_stdout(3, payload, 65528)
        backend.frame_stdout(3, memoryview(payload)[:1001], 8184)
        f.decode_params(PARAMS)
    assert growth(work) < SLACK
    assert sys.getrefcount(payload) == 2


def test_compiled_decode_params():
    from tests.conftest import COMPILED
    if COMPILED is None:
        pytest.skip('flupfast._speedups is not built')
    from flupfast import _speedups
    names = [('HTTP_%d' % i, 'v') for i in range(600)]  # more names than the cache holds
    many = f.encode_params(names)
    bad = PARAMS + b'\x85'

    def work():
        _speedups.decode_params(PARAMS)
        _speedups.decode_params(many, 1000)
        with pytest.raises(FastCGIError):
            _speedups.decode_params(bad)
    assert growth(work) < SLACK


def chunks_of(body, size, kind=bytes):
    chunks = [kind(body[i:i + size]) for i in range(0, len(body), size)]
    chunks.append(b'')
    return iter(chunks).__next__


BODY = (b'line of text\n' * 300) + b'y' * 70000 + b'\nend'


@pytest.mark.parametrize('kind', [bytes, bytearray, memoryview])
def test_input_stream_every_method(backend, kind):
    def work():
        stream = backend.InputStream(chunks_of(BODY, 4096, kind))
        stream.readline()
        stream.read(10)
        stream.readline(5)
        stream.readlines(300)
        for _ in range(50):
            next(stream)
        stream.read(70000)  # across many chunks
        stream.read()
        stream = backend.InputStream(chunks_of(BODY, 65536, kind))
        list(stream)
        stream = backend.InputStream(chunks_of(BODY, 65536, kind))
        stream.read(1000)
        stream.drain()
    assert growth(work) < SLACK


def test_input_stream_dropped_with_unread_data(backend):
    def work():
        stream = backend.InputStream(chunks_of(BODY, 30000))
        stream.read(5)           # the rest of a referenced chunk
        stream = backend.InputStream(chunks_of(BODY, 30000))
        stream.read(50000)       # a private buffer
    assert growth(work) < SLACK


def test_input_stream_pull_errors(backend):
    def work():
        chunks = [b'abc\n' * 100, b'partial']

        def pull():
            if chunks:
                return chunks.pop(0)
            raise ClientDisconnected('gone')
        stream = backend.InputStream(pull)
        stream.readline()
        with pytest.raises(ClientDisconnected):
            stream.read()
        assert stream.read(403) == b'abc\n' * 99 + b'partial'  # kept across the error
        with pytest.raises(ClientDisconnected):
            stream.read(10 ** 6)
        with pytest.raises(ClientDisconnected):
            stream.drain()
    assert growth(work) < SLACK


def test_input_stream_chunk_references(backend):
    chunk = b'z' * 65536
    base = sys.getrefcount(chunk)
    for _ in range(100):
        stream = backend.InputStream(iter([chunk, chunk, b'']).__next__)
        stream.read(65536)
        stream.read(100)
        stream.readline()
        del stream
    assert sys.getrefcount(chunk) == base


def test_input_stream_cycle_is_collected(backend):
    # The pull of a real connection refers back to what holds the stream.
    holder = {}
    stream = backend.InputStream(lambda: holder['stream'] and b'')  # noqa: F821 (del'd below)
    holder['stream'] = stream
    stream.read(1)
    ref = weakref.ref(stream)
    del stream, holder
    gc.collect()
    assert ref() is None


# -- AJP13 ------------------------------------------------------------------------------------

AJP_REQUEST = ajp_client.forward_request(
    method='PATCH', uri='/u', headers=[('Host', 'h'), ('X-%s' % ('k' * 150), 'v' * 300),
                                       ('Content-Length', '70000')],
    attributes=[('query_string', 'q=1'), ('ssl_key_size', 256), ('secret', 's'),
                ('req_attribute', ('AJP_REMOTE_PORT', '1234'))])
AJP_WIRE = (ajp_client.packet(AJP_REQUEST) + ajp_client.body_packets(b's' * 70000, 65530)
            + ajp_client.CPING)


def test_ajp_parser_whole_and_split_feeds(backend):
    data = bytearray(AJP_WIRE)

    def work():
        backend.AJPParser().feed(data)
        parser = backend.AJPParser()
        for i in range(0, len(data), 9001):  # packets straddle feeds: the held buffer
            parser.feed(memoryview(data)[i:i + 9001])
        parser = backend.AJPParser()
        parser.feed(data[:40000])  # dropped with half a 64 KiB packet held
        assert parser.pending
    assert growth(work) < SLACK
    assert sys.getrefcount(data) == 2  # no buffer export or reference left behind


@pytest.mark.parametrize('data', [
    b'GET / HTTP/1.1\r\n', ajp_client.packet(b'x' * 5000) + b'\x12\x34\xff\xff',
    ajp_client.packet(b'y' * 9998) + b'\x00' * 3000,       # garbage behind a held packet
    ajp_client.packet(b'y' * 2995) + b'\x12' + b'\x00' * 10,  # bad magic in the held bytes
], ids=['magic', 'cap', 'after-held', 'held'])
def test_ajp_parser_errors(backend, data):
    def work():
        parser = backend.AJPParser()
        with pytest.raises(AJPError):
            for i in range(0, len(data), 3000):
                parser.feed(bytearray(data[i:i + 3000]))
    assert growth(work) < SLACK


def test_ajp_parser_is_collected(backend):
    parser = backend.AJPParser()
    parser.feed(AJP_WIRE[:100])
    ref = weakref.ref(parser)
    del parser
    assert ref() is None


def test_ajp_decoders_and_frame_body(backend):
    payload = bytearray(200000)
    bad = [AJP_REQUEST[:-1], AJP_REQUEST[:300], AJP_REQUEST + b'\x00',
           ajp_client.forward_request(method=0xFF), b'\x00\x09abc']
    long_name = ajp_client.forward_request(headers=[('N' * 1000, 'v')])  # a heap buffer key

    def work():
        backend.decode_forward_request(AJP_REQUEST)
        backend.decode_forward_request(bytearray(long_name))
        backend.decode_body_chunk(b'\x00\x03abc')
        backend.decode_body_chunk(memoryview(payload)[:5000])
        for data in bad:
            with pytest.raises(AJPError):
                backend.decode_forward_request(data)
        with pytest.raises(AJPError):
            backend.decode_body_chunk(bad[-1])
        backend.frame_body(payload, 8184)
        backend.frame_body(memoryview(payload)[:1001], 65528)
        backend.frame_body(bytes(10), 8184)
    assert growth(work) < SLACK
    assert sys.getrefcount(payload) == 2


def test_header_decoders_scgi_and_uwsgi(backend):
    """The SCGI and uwsgi request decoders: whole, incomplete and malformed heads, a buffer
    handed in as a view (its reference count must not change)."""
    from flupfast.protocols import scgi, uwsgi
    from flupfast.protocols.errors import SCGIError, UWSGIError
    pairs = [('REQUEST_METHOD', 'POST'), ('HTTP_X_%s' % ('k' * 150), 'v' * 300)]
    good_scgi, good_uwsgi = scgi.encode_request(pairs, b'xy'), uwsgi.encode_request(pairs, b'xy')
    buffer = bytearray(good_uwsgi)
    bad_uwsgi = [b'\x05', b'\x00\x03\x00\x00\x05\x00A',
                 uwsgi.encode_request({'CONTENT_LENGTH': 'x'})]

    def work():
        backend.decode_scgi_request(good_scgi)
        backend.decode_uwsgi_request(good_uwsgi)
        backend.decode_uwsgi_request(memoryview(buffer))
        assert backend.decode_uwsgi_request(good_uwsgi[:40]) is None
        with pytest.raises(SCGIError):
            backend.decode_scgi_request(b'3:abc;')
        for data in bad_uwsgi:
            with pytest.raises(UWSGIError):
                backend.decode_uwsgi_request(data)
    assert growth(work) < SLACK
    assert sys.getrefcount(buffer) == 2


def test_send_buffers(backend):
    """The compiled twin takes a buffer view of each item for its first sendmsg and must
    release every one, also when the call raises."""
    import socket
    payload = bytearray(b'p' * 3000)
    a, b = socket.socketpair()
    gone_a, gone_b = socket.socketpair()
    gone_b.close()

    def work():
        backend.send_buffers(a, [b'head', payload, memoryview(payload)[:10]])
        b.recv(65536)
        with pytest.raises(OSError):
            backend.send_buffers(gone_a, [payload])
    try:
        assert growth(work) < SLACK
        assert sys.getrefcount(payload) == 2
        payload += b'x'  # resizable again: no buffer export left behind
    finally:
        for sock in (a, b, gone_a):
            sock.close()
