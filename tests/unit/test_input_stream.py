"""wsgi.input (InputStream) on both backends: every read method against every way the body can
arrive (one chunk, many small chunks, single bytes), plus the spool."""
import io
import sys
import tracemalloc

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
    assert stream.at_eof is False and stream.bytes_read == 0
    assert drive(stream, method) == drive(ref, method)
    assert stream.bytes_read == ref.tell()  # counts exactly what was handed out
    assert stream.read() == ref.read()  # the rest (empty unless a hint stopped early)
    assert stream.readline() == b''
    assert stream.at_eof is True and stream.bytes_read == len(body)


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
    # A 1 MiB line in 2048 chunks. flup's readline joins its buffer with each new chunk and
    # searches it again from the start: quadratic in copies and in bytes scanned. Counted, not
    # timed: every chunk is pulled once, the line is built once (peak memory one line, not the
    # old buffer and a longer copy), and, on the pure twin whose calls a profiler can see, the
    # newline search covers each byte a bounded number of times with one join.
    chunk_size, count = 512, 2048
    data = b'x' * (chunk_size * count - 1) + b'\n'
    chunks = [data[i:i + chunk_size] for i in range(0, len(data), chunk_size)]
    pulls = []

    def pull():
        pulls.append(1)
        return chunks[len(pulls) - 1] if len(pulls) <= len(chunks) else b''
    stream = backend.InputStream(pull)
    scanned, joins = [0], [0]

    def profile(frame, event, arg):
        if event == 'c_call':
            owner = getattr(arg, '__self__', None)
            if type(owner) is bytes and arg.__name__ == 'find':
                scanned[0] += len(owner)
            elif type(owner) is bytes and arg.__name__ == 'join':
                joins[0] += 1
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        if backend.name == 'py':
            sys.setprofile(profile)
        try:
            line = stream.readline()
        finally:
            sys.setprofile(None)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert line == data
    assert len(pulls) == count
    assert peak < len(data) + (256 << 10), peak
    if backend.name == 'py':
        assert scanned[0] <= 2 * len(data) and joins[0] == 1, (scanned, joins)
    assert stream.readline() == b'' and len(pulls) == count + 1


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


# -- Exact behaviour, one test per rule (what the mutation run found unchecked) ---------------

@pytest.mark.parametrize('hint', [None, -1, 0, 1, 2, 3, 4, 5, 9, 10, 100])
def test_readlines_hint_stops_once_the_hint_is_reached(backend, hint):
    body = b'a\nbb\nccc\ndddd\n'
    stream = backend.InputStream(puller(body, 3))
    assert stream.readlines(hint) == io.BytesIO(body).readlines(hint)


def test_sizes_none_and_zero(backend):
    pulls = []
    chunks = [b'ab\ncd', b'']

    def pull():
        pulls.append(1)
        return chunks.pop(0)
    stream = backend.InputStream(pull)
    assert stream.read(0) == b'' and stream.readline(0) == b'' and pulls == []
    assert stream.readline(None) == b'ab\n'
    assert stream.read(None) == b'cd'
    assert stream.readable() is True
    stream.close()  # WSGI allows it; the stream stays usable
    assert stream.read() == b'' and stream.readline() == b''


@pytest.mark.parametrize('kind', [bytearray, memoryview])
def test_pulled_buffers_become_bytes_the_puller_may_reuse(backend, kind):
    buf = bytearray(b'line one\nline two\n')
    chunks = [kind(buf), b'']
    stream = backend.InputStream(lambda: chunks.pop(0))
    first = stream.readline()
    buf[:] = b'X' * len(buf)  # the receive buffer is reused
    assert (first, stream.readline(), stream.read()) == (b'line one\n', b'line two\n', b'')
    assert type(first) is bytes


@pytest.mark.parametrize('method', ['read', 'read_n', 'readline', 'readline_n'])
def test_a_failed_pull_keeps_what_was_gathered_for_the_next_read(backend, method):
    script = [b'ab', b'cd', ClientDisconnected('gone for now'), b'e\nf', b'']

    def pull():
        item = script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item
    stream = backend.InputStream(pull)
    assert stream.read(1) == b'a'
    call = {'read': lambda: stream.read(), 'read_n': lambda: stream.read(100),
            'readline': lambda: stream.readline(), 'readline_n': lambda: stream.readline(100)}
    with pytest.raises(ClientDisconnected, match='gone for now'):
        call[method]()
    assert stream.bytes_read == 1
    rest = call[method]()
    assert rest == {'read': b'bcde\nf', 'read_n': b'bcde\nf', 'readline': b'bcde\n',
                    'readline_n': b'bcde\n'}[method]
    assert stream.bytes_read == 1 + len(rest)


def test_drain_counts_the_unread_rest_and_keeps_none_of_it(backend):
    script = [b'abc\ndef', b'ghi', ClientDisconnected('mid-drain'), b'jk', b'']

    def pull():
        item = script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item
    stream = backend.InputStream(pull)
    assert stream.readline() == b'abc\n'
    with pytest.raises(ClientDisconnected):
        stream.drain()
    assert stream.drain() == 2  # what came after the failure; nothing drained is readable
    assert stream.read() == b'' and stream.at_eof is True
    assert stream.drain() == 0


def test_spool_accounts_memory_and_drops_what_comes_after_close():
    spool = Spool(memory_limit=10)
    spool.push(b'')
    assert spool.memory_used == 0
    spool.push(b'abc')
    spool.push(bytearray(b'efgh'))
    assert spool.memory_used == 7
    assert spool.pull() == b'abc' and spool.memory_used == 4
    spool.push(b'ijklmn')  # exactly at the limit: still in memory
    assert spool.memory_used == 10 and spool._file is None
    spool.push(b'o')  # past it: this and what follows go to the file
    assert spool._file is not None and spool.memory_used == 10
    spool.end()
    assert [spool.pull() for _ in range(4)] == [b'efgh', b'ijklmn', b'o', b'']
    spool.close()
    assert spool.memory_used == 0 and spool._file is None
    spool.push(b'late')
    assert spool.memory_used == 0


def test_spool_file_is_read_back_in_chunk_size_pieces():
    spool = Spool(memory_limit=0, chunk_size=4)
    spool.push(b'0123456789')
    spool.end()
    assert [spool.pull() for _ in range(4)] == [b'0123', b'4567', b'89', b'']
    spool.close()


def test_spool_abort_and_close_wake_a_reader_with_their_reasons():
    spool = Spool()
    spool.abort()
    with pytest.raises(ClientDisconnected, match='^the web server closed the connection mid-body$'):
        spool.pull()
    spool = Spool()
    spool.abort('custom reason')
    with pytest.raises(ClientDisconnected, match='^custom reason$'):
        spool.pull()
    spool = Spool()
    spool.close()
    with pytest.raises(ClientDisconnected, match='^the request body was released$'):
        spool.pull()
    spool = Spool()
    spool.push(b'kept')
    spool.abort()
    assert spool.pull() == b'kept'  # what arrived is still read before the error


def test_spool_directory_is_private_per_process_and_remade_when_gone():
    import os
    import stat
    from flupfast import body
    path = body.spool_directory()
    assert body.spool_directory() == path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    spool = Spool(memory_limit=0)
    spool.push(b'x')
    assert os.listdir(path) == []  # the file has no name
    spool.close()
    body._remove_spool_dir(os.getpid() + 1, path)  # another process's handler: not ours
    assert os.path.isdir(path)
    body._remove_spool_dir(os.getpid(), path)
    assert not os.path.exists(path)
    body._remove_spool_dir(os.getpid(), path)  # already gone: at exit, nothing to complain of
    again = body.spool_directory()
    assert again != path and os.path.isdir(again)


def test_spool_pull_waits_for_more_once_the_file_is_read_up():
    import threading
    spool = Spool(memory_limit=0)
    spool.push(b'first')
    assert spool.pull() == b'first'
    # Everything in the file is read and the body has not ended: the next pull waits.
    timer = threading.Timer(0.05, spool.push, args=(b'second',))
    timer.start()
    assert spool.pull() == b'second'
    timer.join()
    spool.end()
    assert spool.pull() == b''
    spool.close()


def test_spool_file_lives_unnamed_in_the_private_directory():
    import os
    from flupfast import body
    spool = Spool(memory_limit=0)
    spool.push(b'x')
    where = os.readlink('/proc/self/fd/%d' % spool._file.fileno())
    assert where.startswith(body.spool_directory() + '/') and where.endswith('(deleted)') \
        or os.path.dirname(where) == body.spool_directory()
    spool.close()


def test_spool_directory_is_remade_in_a_forked_child(monkeypatch):
    import os
    from flupfast import body
    registered = []
    monkeypatch.setattr(body.atexit, 'register', lambda *args: registered.append(args))
    monkeypatch.setattr(body, '_spool_dir', None)
    mine = body.spool_directory()
    assert os.path.basename(mine).startswith('flupfast-spool-')
    assert registered == [(body._remove_spool_dir, os.getpid(), mine)]
    pid = os.getpid()
    monkeypatch.setattr(body.os, 'getpid', lambda: pid + 1)  # as in a forked child
    child = body.spool_directory()
    assert child != mine and os.path.isdir(child) and body.spool_directory() == child
    assert registered[1] == (body._remove_spool_dir, pid + 1, child)
    for path in (mine, child):
        os.rmdir(path)


@pytest.mark.parametrize('method', ['read', 'read_n', 'readline', 'readline_n'])
def test_a_pull_failing_at_once_keeps_the_unread_rest_once(backend, method):
    script = [b'ab', ClientDisconnected('gone'), b'cd', b'']

    def pull():
        item = script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item
    stream = backend.InputStream(pull)
    assert stream.read(1) == b'a'
    call = {'read': lambda: stream.read(), 'read_n': lambda: stream.read(10),
            'readline': lambda: stream.readline(), 'readline_n': lambda: stream.readline(10)}
    with pytest.raises(ClientDisconnected):
        call[method]()
    assert call[method]() == b'bcd'


@pytest.mark.parametrize('size', [-1, 1, 2, 5])
def test_kept_bytes_that_start_with_a_newline_give_an_empty_line(backend, size):
    # After a failed pull the gathered bytes are unread from their first byte: a newline
    # there ends the next line at once.
    script = [b'\nab', ClientDisconnected('gone'), b'\ncd', b'']

    def pull():
        item = script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item
    stream = backend.InputStream(pull)
    with pytest.raises(ClientDisconnected):
        stream.read(10)
    assert stream.readline(size) == b'\n'
    assert stream.read() == b'ab\ncd'


def _read_all_with(stream, method):
    """The whole body through one of io.BufferedReader's other reading methods."""
    out = []
    while True:
        if method == 'read1':
            data = stream.read1()
        elif method.startswith('read1_'):
            data = stream.read1(int(method[6:]))
        else:  # readinto_N, readinto1_N
            name, size = method.split('_')
            buffer = bytearray(int(size))
            data = bytes(buffer[:getattr(stream, name)(buffer)])
        if not data:
            return b''.join(out)
        out.append(data)


@pytest.mark.parametrize('chunking', list(CHUNKINGS))
@pytest.mark.parametrize('method', ['read1', 'read1_3', 'readinto_5', 'readinto_65536',
                                    'readinto1_7'])
@pytest.mark.parametrize('body', BODIES[:5], ids=lambda b: 'len%d' % len(b))
def test_the_rest_of_a_buffered_reader_s_surface(backend, body, method, chunking):
    """What flup's SCGI hands the app (a socket's file, an io.BufferedReader) also reads
    wsgi.input here, on every protocol and both backends (found in review: the compiled
    backend's had no readinto, read1 or peek, and io.TextIOWrapper failed on it)."""
    stream = backend.InputStream(puller(body, CHUNKINGS[chunking]))
    assert _read_all_with(stream, method) == body
    assert stream.bytes_read == len(body) and stream.at_eof


@pytest.mark.parametrize('chunking', list(CHUNKINGS))
def test_peek_takes_nothing_and_text_io_wrapper_reads_the_body(backend, chunking):
    body = 'zwölf\nBoxkämpfer\n'.encode('utf-8') * 50
    stream = backend.InputStream(puller(body, CHUNKINGS[chunking]))
    assert (stream.readable(), stream.writable(), stream.seekable(), stream.closed) == (
        True, False, False, False)
    with pytest.raises(io.UnsupportedOperation):
        stream.fileno()
    first = stream.peek()
    assert first and body.startswith(first) and stream.bytes_read == 0
    assert stream.read1(0) == b'' and stream.peek(1) == first
    text = io.TextIOWrapper(stream, encoding='utf-8')
    assert text.readline() == 'zwölf\n'
    assert text.read() == body.decode('utf-8')[len('zwölf\n'):]
    assert stream.peek() == b'' and stream.read1() == b''
    text.close()  # closes the stream: the server still drains it


def test_readinto_a_read_only_buffer_takes_nothing(backend):
    """Refused before a byte is read, as io.BufferedReader does (found in review: the bytes
    read for it were lost)."""
    stream = backend.InputStream(puller(b'abcdef', 2))
    with pytest.raises(TypeError):
        stream.readinto(b'xx')
    assert stream.read() == b'abcdef' and stream.bytes_read == 6
