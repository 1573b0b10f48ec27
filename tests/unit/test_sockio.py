"""recv_into and close_socket, both twins (flupfast/sockio.py, _cython/sockio.pxi): the bytes
already there (the compiled twin's GIL-held MSG_DONTWAIT try), nothing there yet and a slow
peer (the would-block path must wait as Python does), EOF, a reset, the socket's timeout, a
non-blocking socket, the limit, and close's effects, as Python's own socket methods give them.
Concurrency is shown by events, never by elapsed time."""
import os
import socket
import struct
import threading

import pytest

WAIT = 30.0


@pytest.fixture(autouse=True)
def threads_contend(backend):
    """The compiled receive tries the data already there only in a process with a Leader
    (thread mode): make one, so each test runs that path."""
    if hasattr(backend, "Leader"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind("\0flupfast-sockio-test-%d" % os.getpid())
            listener.listen(1)
            listener.setblocking(False)
            backend.Leader(listener).close()


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.settimeout(WAIT)
    yield a, b
    a.close()
    b.close()


def test_bytes_already_there_are_received_at_once(backend, pair):
    a, b = pair
    b.sendall(b'hello')
    buf = bytearray(64)
    assert backend.recv_into(a, buf) == 5
    assert bytes(buf[:5]) == b'hello'


def test_at_most_limit_bytes_the_rest_stays(backend, pair):
    a, b = pair
    b.sendall(b'abcdefgh')
    buf = bytearray(64)
    assert backend.recv_into(a, buf, 3) == 3
    assert bytes(buf[:3]) == b'abc'
    assert backend.recv_into(a, buf) == 5
    assert bytes(buf[:5]) == b'defgh'


def test_into_a_memoryview_slice(backend, pair):
    a, b = pair
    b.sendall(b'xyz')
    buf = bytearray(10)
    assert backend.recv_into(a, memoryview(buf)[4:], 0) == 3
    assert bytes(buf) == b'\0\0\0\0xyz\0\0\0'


def test_nothing_there_yet_waits_for_a_slow_peer(backend, pair):
    """The would-block path: the receive starts before the peer sends, and returns what it
    sends later (the compiled twin's first try finds EAGAIN)."""
    a, b = pair
    buf = bytearray(64)
    got = []
    started = threading.Event()

    def receive():
        started.set()
        got.append(backend.recv_into(a, buf))

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    assert started.wait(WAIT)
    thread.join(0.05)
    assert thread.is_alive() and not got  # waiting, not failed with EAGAIN
    b.sendall(b'late')
    thread.join(WAIT)
    assert got == [4] and bytes(buf[:4]) == b'late'


def test_eof_is_zero(backend, pair):
    a, b = pair
    b.close()
    assert backend.recv_into(a, bytearray(8)) == 0


def test_the_sockets_timeout_is_honoured(backend, pair):
    a, _ = pair
    a.settimeout(0.05)
    with pytest.raises(socket.timeout):
        backend.recv_into(a, bytearray(8))


def test_a_non_blocking_socket_raises_blocking_io_error(backend, pair):
    a, _ = pair
    a.setblocking(False)
    with pytest.raises(BlockingIOError):
        backend.recv_into(a, bytearray(8))


def test_a_reset_raises_connection_reset(backend):
    listener = socket.socket()
    listener.bind(('127.0.0.1', 0))
    listener.listen(1)
    peer = socket.create_connection(listener.getsockname(), timeout=WAIT)
    ours, _ = listener.accept()
    ours.settimeout(WAIT)
    try:
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
        peer.close()  # RST
        with pytest.raises(ConnectionResetError):
            backend.recv_into(ours, bytearray(8))
    finally:
        ours.close()
        listener.close()


@pytest.mark.parametrize('limit', [-1, 9])
def test_a_bad_limit_raises_value_error(backend, pair, limit):
    a, b = pair
    b.sendall(b'x')
    with pytest.raises(ValueError):
        backend.recv_into(a, bytearray(8), limit)


@pytest.mark.parametrize('answer', [64 << 20, 9, -1, None])
def test_a_count_the_buffer_cannot_hold_raises_value_error(backend, answer):
    """A socket class of one's own may answer anything; the compiled callers copy as many
    bytes as it says (found in review: 64 MiB read out of the 256 KiB receive buffer)."""
    class Liar:
        def recv_into(self, buf, limit=0):
            return answer

        def fileno(self):
            return -1
    with pytest.raises(ValueError, match='Liar.recv_into'):
        backend.recv_into(Liar(), bytearray(8))


def test_a_read_only_buffer_raises_type_error(backend, pair):
    a, b = pair
    b.sendall(b'x')
    with pytest.raises(TypeError):
        backend.recv_into(a, b'readonly')


def test_a_closed_socket_raises_oserror(backend, pair):
    a, _ = pair
    a.close()
    with pytest.raises(OSError):
        backend.recv_into(a, bytearray(8))


def test_close_closes_the_fd_and_the_peer_sees_eof(backend, pair):
    a, b = pair
    fd = a.fileno()
    backend.close_socket(a)
    assert a.fileno() == -1 and a._closed
    assert '[closed]' in repr(a)
    with pytest.raises(OSError):
        os.fstat(fd)
    b.settimeout(WAIT)
    assert b.recv(1) == b''


def test_close_twice_is_a_no_op(backend, pair):
    a, _ = pair
    backend.close_socket(a)
    backend.close_socket(a)
    assert a.fileno() == -1


def test_close_keeps_the_fd_while_a_makefile_stream_holds_it(backend, pair):
    """As socket.close(): the fd goes with the last makefile() stream."""
    a, b = pair
    stream = a.makefile('rb')
    backend.close_socket(a)
    b.sendall(b'still\n')
    assert stream.readline() == b'still\n'
    stream.close()
    assert a.fileno() == -1


def test_close_of_another_socket_class_is_its_own_close(backend):
    closed = []

    class Sock(socket.socket):
        def close(self):
            closed.append(True)
            super().close()

    a, b = socket.socketpair()
    sock = Sock(a.family, a.type, a.proto, fileno=a.detach())
    try:
        backend.close_socket(sock)
        assert closed == [True] and sock.fileno() == -1
    finally:
        b.close()


# In a process of its own, with no Leader: the receive of a process whose one thread serves
# (a prefork child). The compiled twin reads the socket's state in place and waits without
# the GIL on a blocking socket; what it gives must be what Python's own method gives.
ONE_THREAD_SCRIPT = r"""
import os, signal, socket, sys, threading
from MODULE import recv_into
seen = []
buf = bytearray(64)

a, b = socket.socketpair()
b.sendall(b"there")
seen.append(bytes(buf[:recv_into(a, buf)]))

# Nothing there yet: the wait must let another thread run (the GIL released).
def late():
    b.sendall(b"late")
thread = threading.Timer(0.05, late)
thread.start()
seen.append(bytes(buf[:recv_into(a, buf)]))
thread.join()

# A signal during the wait: its handler runs, and the receive goes on.
def handler(signum, frame):
    seen.append("handler")
    b.sendall(b"after")
signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.05)
seen.append(bytes(buf[:recv_into(a, buf)]))

# A handler that raises ends the receive with its exception.
def raising(signum, frame):
    raise KeyboardInterrupt
signal.signal(signal.SIGALRM, raising)
signal.setitimer(signal.ITIMER_REAL, 0.05)
try:
    recv_into(a, buf)
except KeyboardInterrupt:
    seen.append("raised")

b.sendall(b"abcdef")
seen.append(recv_into(a, buf, 2))
n = recv_into(a, memoryview(buf)[10:])
seen.append(bytes(buf[10:10 + n]))
a.settimeout(0.05)
try:
    recv_into(a, buf)
except socket.timeout:
    seen.append("timeout")
a.setblocking(False)
try:
    recv_into(a, buf)
except BlockingIOError:
    seen.append("would block")
a.setblocking(True)
b.close()
seen.append(recv_into(a, buf))
a.close()
try:
    recv_into(a, buf)
except OSError:
    seen.append("closed")
print(seen)
"""

ONE_THREAD_SEEN = [b"there", b"late", "handler", b"after", "raised", 2, b"cdef", "timeout",
                   "would block", 0, "closed"]


def test_a_process_with_one_serving_thread_receives_as_python_does(backend):
    """No Leader in the process (a prefork child): bytes there, a slow peer while another
    thread runs, a signal handler during the wait (one that returns, one that raises), the
    limit, a view, the socket's timeout, a non-blocking socket, EOF and a closed socket."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    module = "flupfast.sockio" if backend.name == 'py' else "flupfast._speedups"
    script = ONE_THREAD_SCRIPT.replace("MODULE", module)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60,
                         cwd=root, env=dict(os.environ, PYTHONPATH=root))
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().strip() == repr(ONE_THREAD_SEEN)
