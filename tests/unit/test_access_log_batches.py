"""The access log's batches (flupfast.ops.access_log): many requests make few writes, a burst
is written within the flush delay once the process idles, and lines are written whole and in
order: to a file several forked processes append to, to a pipe, at exit and on SIGTERM."""
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from flupfast.ops import access_log
from flupfast.ops.access_log import PIPE_BUF, AccessLog
from tests.unit.test_ops import hello, run
from tests.waiting import wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 10.0
NEVER = 3600.0  # a flush delay no test waits for: only the size, a flush or the exit write


def numbered(log, count, first=0, width=0):
    """``count`` requests through the gateway, REQUEST_URI /0, /1, ... (padded to ``width``
    characters with x, so lines can be made long)."""
    for number in range(first, first + count):
        uri = '/%d' % number
        log.end(({'REQUEST_URI': uri + 'x' * max(0, width - len(uri))}, time.time()),
                _Response, False)


class _Response:
    status = b'200 OK'
    sent = 2
    headers_sent = True


def lines_of(path):
    with open(path, 'rb') as f:
        return f.read().decode().splitlines()


class WriteSpy:
    """os.write, counted and recorded for one fd."""

    def __init__(self, monkeypatch, log):
        self.log = log
        self.sizes = []
        self.chunks = []
        real = os.write

        def write(fd, data):
            if fd == self.log._fd:
                self.sizes.append(len(data))
                self.chunks.append(bytes(data))
            return real(fd, data)
        monkeypatch.setattr(os, 'write', write)


def test_many_requests_make_few_writes(tmp_path, monkeypatch, backend):
    path = tmp_path / 'a.log'
    log = AccessLog(str(path), flush_delay=NEVER)
    spy = WriteSpy(monkeypatch, log)
    requests = 2000
    for _ in range(requests):
        run(backend, hello, log)
    assert len(spy.sizes) < requests // 50  # 32 KiB batches of ~80-byte lines
    assert all(size <= log.buffer_size + 200 for size in spy.sizes)
    log.close()
    lines = lines_of(path)
    # The same request each time (its time aside: 2,000 requests may straddle a second).
    assert len(lines) == requests and len({re.sub(r'\[[^]]*\]', '', line) for line in lines}) == 1
    assert len(spy.sizes) < requests // 50


def test_a_burst_is_written_within_the_flush_delay_once_idle(tmp_path, monkeypatch):
    path = tmp_path / 'a.log'
    log = AccessLog(str(path), '%(U)s', flush_delay=0.05)
    spy = WriteSpy(monkeypatch, log)
    numbered(log, 300)
    assert spy.sizes == []  # kept: no write per request
    # No flush, no close, no further request: the flusher writes them.
    wait_until(lambda: len(lines_of(path)) == 300, TIMEOUT)
    assert lines_of(path) == ['/%d' % n for n in range(300)]
    numbered(log, 5, first=300)  # a second burst after the idle time: its own round
    wait_until(lambda: len(lines_of(path)) == 305, TIMEOUT)
    assert lines_of(path)[300:] == ['/%d' % n for n in range(300, 305)]
    assert len(spy.sizes) <= 4
    log.close()


def test_threads_logging_at_once_lose_no_line(tmp_path):
    path = tmp_path / 'a.log'
    log = AccessLog(str(path), '%(U)s', flush_delay=0.001, buffer_size=512)
    threads = [threading.Thread(target=numbered, args=(log, 2000, 10000 * t))
               for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    log.close()
    lines = lines_of(path)
    assert sorted(lines) == sorted('/%d' % (10000 * t + n) for t in range(4) for n in range(2000))
    for t in range(4):  # each thread's lines in its order
        mine = [int(line[1:]) for line in lines if int(line[1:]) // 10000 == t]
        assert mine == sorted(mine)


def test_a_pipe_gets_whole_lines_at_most_pipe_buf_at_a_time(tmp_path, monkeypatch):
    fifo = tmp_path / 'fifo'
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    received = bytearray()
    try:
        log = AccessLog(str(fifo), '%(U)s', flush_delay=NEVER)
        spy = WriteSpy(monkeypatch, log)
        numbered(log, 100, width=150)           # 15 KiB: four pieces or more
        numbered(log, 1, first=100, width=PIPE_BUF + 100)  # a line longer than PIPE_BUF
        numbered(log, 3, first=101)

        def drain():
            try:
                while True:
                    chunk = os.read(reader, 65536)
                    if not chunk:
                        return
                    received.extend(chunk)
            except BlockingIOError:
                return
        writer = threading.Thread(target=log.close)  # the pipe holds 64 KiB: no reader needed
        writer.start()
        writer.join(TIMEOUT)
        drain()
    finally:
        os.close(reader)
    assert len(spy.chunks) >= 5
    for chunk in spy.chunks:
        assert chunk.endswith(b'\n')
        assert len(chunk) <= PIPE_BUF or chunk.count(b'\n') == 1  # only a long line alone
    lines = received.decode().splitlines()
    assert [re.match(r'/(\d+)', line).group(1) for line in lines] == \
        [str(n) for n in range(104)]


def _child_logging(log, child, count):
    for number in range(count):
        # Lengths vary from 40 to ~1000 bytes: batches end at arbitrary places.
        log.end(({'REQUEST_URI': '/c%d/%d/%s' % (child, number, 'y' * ((number * 37) % 960))},
                 time.time()), _Response, False)
    log.flush()


@pytest.mark.parametrize('target', ['file', 'fifo'])
def test_forked_children_appending_at_once_never_split_a_line(tmp_path, target):
    path = tmp_path / 'shared'
    received = bytearray()
    reader = None
    if target == 'fifo':
        os.mkfifo(path)
        reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    log = AccessLog(str(path), '%(U)s', flush_delay=NEVER, buffer_size=16384)
    go_r, go_w = os.pipe()
    children, count = [], 1500
    try:
        for child in range(4):
            pid = os.fork()
            if pid == 0:  # pragma: no cover (the child)
                status = 1
                try:
                    os.read(go_r, 1)  # all start together
                    _child_logging(log, child, count)
                    status = 0
                finally:
                    os._exit(status)
            children.append(pid)
        os.write(go_w, b'1234')

        def ended():  # a FIFO is read meanwhile: the writers would block on a full one
            if reader is not None:
                try:
                    received.extend(os.read(reader, 65536))
                except BlockingIOError:
                    pass
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid:
                assert status == 0
                children.remove(pid)
            return not children
        wait_until(ended, 60, what='the writing children to end', interval=0.001)
        if reader is not None:
            try:
                while True:
                    chunk = os.read(reader, 65536)
                    if not chunk:
                        break
                    received.extend(chunk)
            except BlockingIOError:
                pass
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        for fd in (go_r, go_w) + ((reader,) if reader is not None else ()):
            os.close(fd)
        log.close()
    data = bytes(received) if reader is not None else path.read_bytes()
    lines = data.decode().splitlines()
    assert len(lines) == 4 * count
    seen = {child: [] for child in range(4)}
    for line in lines:
        match = re.fullmatch(r'/c(\d)/(\d+)/(y*)', line)
        assert match, line[:80]  # a piece of another line inside would break the pattern
        child, number = int(match.group(1)), int(match.group(2))
        assert len(match.group(3)) == (number * 37) % 960
        seen[child].append(number)
    assert all(numbers == list(range(count)) for numbers in seen.values())


EXIT_SCRIPT = '''
import os, signal, sys, time
from flupfast.ops import access_log
log = access_log.AccessLog(sys.argv[1], '%(U)s', flush_delay=3600)
how = sys.argv[2]
if how == 'fork':
    pid = os.fork()
    if pid:
        sys.exit(os.waitpid(pid, 0)[1] >> 8)
for n in range(5):
    log.end(({'REQUEST_URI': '/%d' % n}, time.time()), None, True)
if how == 'sigterm':
    access_log.flush_on_signals()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
sys.exit(3)
'''


@pytest.mark.parametrize('how, status', [('exit', 3), ('fork', 3), ('sigterm', -signal.SIGTERM)])
def test_kept_lines_are_written_at_exit_and_on_sigterm(tmp_path, how, status):
    """A process's end writes its lines (a forked child too); SIGTERM at its default action
    still ends the process by SIGTERM, after the write."""
    path = tmp_path / 'a.log'
    proc = subprocess.run([sys.executable, '-c', EXIT_SCRIPT, str(path), how], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), timeout=TIMEOUT * 3,
                          capture_output=True)
    assert proc.returncode == status, proc.stderr
    assert lines_of(path) == ['/%d' % n for n in range(5)]


def test_flush_on_signals_leaves_an_apps_handler_alone(monkeypatch):
    handler = lambda signum, frame: None  # noqa: E731
    monkeypatch.setattr(access_log, '_logs', {object()})  # as if a log were open
    old = signal.signal(signal.SIGTERM, handler)
    try:
        access_log.flush_on_signals(('SIGTERM',))
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, old)
