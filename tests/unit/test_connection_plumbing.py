"""The socket plumbing every connection shares (flupfast/connection.py), on its own: the
per-thread receive buffer, a receive's limit, the held send queue, ``send_file``, the lingering
close, the abrupt end's bounded wait, the overloaded refusal's time budget, and the logged loop's
lines. What its mutation run left alive (tests/README.md). Seen from the peer's end of a
socketpair or a loopback TCP connection; the abrupt end's wait on a fake clock, not the wall's.
"""
import errno
import logging
import select
import socket
import threading
import types
import uuid

import pytest

from flupfast import connection
from flupfast.body import ClientDisconnected
from flupfast.connection import Connection, LoggedConnection
from flupfast.sockio import receive_buffer
from flupfast.limits import (COALESCE_LIMIT, OVERLOAD_ANSWER_SECONDS, RECV_BUFFER_SIZE,
                             RESET_DRAIN_SECONDS)
from flupfast.protocols.errors import ProtocolError
from tests.conftest import install_backend
from tests.unit.connection_harness import (JOIN_TIMEOUT, SOCKET_TIMEOUT, read_to_eof,
                                           read_until_reset, tcp_pair)


@pytest.fixture
def use_backend(backend, monkeypatch):
    """recv_into, send_buffers and close_socket (the twins the plumbing calls) of ``backend``."""
    install_backend(monkeypatch, backend)
    return backend


@pytest.fixture
def pair():
    """(ours, theirs): the peer's end and the connection's, with timeouts: a connection that
    blocks or never closes fails its test instead of hanging it."""
    ours, theirs = socket.socketpair()
    ours.settimeout(SOCKET_TIMEOUT)
    theirs.settimeout(SOCKET_TIMEOUT)
    yield ours, theirs
    ours.close()
    theirs.close()


def in_thread(target, *args):
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def joined(thread):
    thread.join(JOIN_TIMEOUT)
    return not thread.is_alive()


def nothing_there(sock):
    return not select.select([sock], [], [], 0)[0]


def read_exactly(sock, size):
    data = b''
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, data[-16:]
        data += chunk
    return data


def late_bytes_refused(ours, ending):
    """Whether the connection's end closed without reading what we send after its FIN (no
    lingering): our late send is refused (EPIPE) or, once ``ending`` (its thread) is over, the
    bytes it left unread reset us. A lingering close reads them and our EOF, and ends quietly."""
    try:
        ours.sendall(b'late')
        ours.shutdown(socket.SHUT_WR)
    except BrokenPipeError:
        return True
    assert joined(ending)
    try:
        assert ours.recv(1) == b''
    except ConnectionResetError:
        return True
    return False


# --- the receive buffer and a receive's limit

def test_a_thread_reuses_its_receive_buffer_and_another_thread_has_its_own():
    buf, view = receive_buffer()
    assert len(buf) == RECV_BUFFER_SIZE and view.obj is buf
    again, again_view = receive_buffer()
    assert again is buf and again_view.obj is buf
    other = []
    assert joined(in_thread(lambda: other.append(receive_buffer()[0])))
    assert other[0] is not buf and len(other[0]) == RECV_BUFFER_SIZE


def test_a_receive_takes_at_most_its_limit_and_the_rest_stays(use_backend, pair):
    ours, theirs = pair
    conn = Connection(theirs, '')
    ours.sendall(b'0123456789')
    assert bytes(conn.recv_some(4)) == b'0123'
    assert bytes(conn.recv_some()) == b'456789'
    ours.shutdown(socket.SHUT_WR)
    assert bytes(conn.recv_some(4)) == b''


# --- the held send queue

def test_held_sends_leave_together_once_they_reach_the_coalesce_limit(use_backend, pair):
    """``hold`` keeps what is queued while it is under COALESCE_LIMIT; the send that reaches
    the limit sends everything, and counting starts again from nothing."""
    ours, theirs = pair
    conn = Connection(theirs, '')
    conn.send([b'a' * (COALESCE_LIMIT - 2), b'b'], hold=True)
    assert nothing_there(ours)  # one byte under the limit
    # exactly the limit: sent (in a thread: more than a socketpair buffers)
    sender = in_thread(conn.send, [b'c'], True)
    assert read_exactly(ours, COALESCE_LIMIT) == b'a' * (COALESCE_LIMIT - 2) + b'bc'
    assert joined(sender)
    conn.send([b'd' * (COALESCE_LIMIT - 1)], hold=True)
    assert nothing_there(ours)  # the count started again at 0
    sender = in_thread(conn.send, [b'e'])  # not held: everything queued goes
    assert read_exactly(ours, COALESCE_LIMIT) == b'd' * (COALESCE_LIMIT - 1) + b'e'
    assert joined(sender)


def test_send_file_sends_from_the_files_position_and_leaves_it_at_the_end(pair, tmp_path):
    ours, theirs = pair
    path = tmp_path / 'body'
    path.write_bytes(b'0123456789')
    with open(path, 'rb') as f:
        f.seek(3)
        Connection(theirs, '').send_file(f)
        assert f.tell() == 10
    theirs.shutdown(socket.SHUT_WR)
    assert read_to_eof(ours) == b'3456789'


class _WatchedLock:
    """A lock that says whether it was held while the connection sent."""

    def __init__(self, sock):
        self._lock = threading.Lock()
        self._sock = sock
        self.held_while_sending = []

    def __enter__(self):
        self._lock.acquire()

    def __exit__(self, *exc):
        self.held_while_sending.append(self._lock.locked())
        self._lock.release()


@pytest.mark.parametrize('send', ['send', 'send_file'])
def test_a_connection_with_a_send_lock_sends_under_it(use_backend, pair, tmp_path, send):
    """Only a multiplexed FastCGI connection has a ``_send_lock`` (its request threads send
    beside the reading thread); where one is set, every send is made under it."""
    ours, theirs = pair
    conn = Connection(theirs, '')
    assert conn._send_lock is None  # one thread serves it: nothing to hold
    conn._send_lock = lock = _WatchedLock(theirs)
    if send == 'send':
        conn.send([b'under'])
    else:
        path = tmp_path / 'body'
        path.write_bytes(b'under')
        with open(path, 'rb') as f:
            conn.send_file(f)
    assert lock.held_while_sending == [True]
    assert read_exactly(ours, 5) == b'under'


def test_only_a_multiplexed_fastcgi_connection_takes_a_send_lock(pair):
    from flupfast.fastcgi_connection import FastCGIConfig, FastCGIConnection
    server = types.SimpleNamespace()
    for multiplexed in (False, True):
        conn = FastCGIConnection(pair[1], '', server, config=FastCGIConfig(multiplexed))
        assert (type(conn._send_lock) is type(threading.Lock())) is multiplexed


# --- the lingering close

def test_a_lingering_close_reads_until_the_peers_eof_then_closes(use_backend, pair):
    ours, theirs = pair
    conn = Connection(theirs, '')
    closer = in_thread(conn.linger_close, 60.0)
    assert ours.recv(1) == b''  # half-closed: our FIN
    ours.sendall(b'the body nobody read')  # read and dropped, not refused
    ours.shutdown(socket.SHUT_WR)
    assert joined(closer)  # at our EOF, not after its 60 s
    assert conn.closed and theirs.fileno() == -1


def test_a_lingering_close_ends_at_once_at_an_eof_with_nothing_before_it(use_backend, pair):
    ours, theirs = pair
    ours.shutdown(socket.SHUT_WR)
    conn = Connection(theirs, '')
    closer = in_thread(conn.linger_close, 60.0)
    assert ours.recv(1) == b''
    assert joined(closer) and conn.closed


def test_a_lingering_close_ends_after_its_time_when_the_peer_never_does(use_backend, pair):
    ours, theirs = pair
    conn = Connection(theirs, '')
    closer = in_thread(conn.linger_close, 0.2)
    assert ours.recv(1) == b''
    assert joined(closer)  # then nothing reads our late bytes
    assert conn.closed and late_bytes_refused(ours, closer)


def test_a_lingering_close_under_a_second_still_reads(use_backend, pair):
    """Bytes already sent when it starts are read, not left to reset us, however slowly we
    then answer its FIN (no time window: a loaded machine cannot make it fail)."""
    ours, theirs = pair
    ours.sendall(b'the body nobody read')
    conn = Connection(theirs, '')
    closer = in_thread(conn.linger_close, 0.9)
    assert ours.recv(1) == b''
    ours.shutdown(socket.SHUT_WR)
    assert joined(closer) and conn.closed
    assert ours.recv(1) == b''  # a close that left them unread resets us here


# --- the abrupt end

class FakeClock:
    """connection.py's ``time``: ``sleep`` advances ``monotonic`` instead of waiting."""

    def __init__(self):
        self.now = 1000.0
        self.slept = []

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        assert len(self.slept) < 10000, 'the wait does not end'
        self.slept.append(seconds)
        self.now += seconds


def stuck_tcp_connection():
    """A TCP connection whose send queue the peer does not take (it never reads): what
    ``end_abruptly`` waits on before its reset. (ours, theirs)."""
    ours, theirs, _ = tcp_pair()
    ours.settimeout(SOCKET_TIMEOUT)
    theirs.setblocking(False)
    try:
        while True:
            theirs.send(b'x' * 65536)
    except BlockingIOError:
        pass
    theirs.setblocking(True)
    return ours, theirs


def test_the_reset_waits_for_the_send_queue_only_what_the_drain_left(use_backend, monkeypatch):
    """The wait for the peer to take what was sent, and the drain before it, share one
    RESET_DRAIN_SECONDS: a drain that took 0.6 s leaves the wait 0.4 s, used to its end
    (polling at most every 50 ms), not more; then the reset."""
    clock = FakeClock()
    monkeypatch.setattr(connection, 'time', types.SimpleNamespace(
        monotonic=clock.monotonic, sleep=clock.sleep))
    ours, theirs = stuck_tcp_connection()
    with ours, theirs:
        conn = Connection(theirs, ours.getsockname())

        def drain(deadline):
            clock.now += 0.6
        conn.end_abruptly(drain=drain)
        left = RESET_DRAIN_SECONDS - 0.6
        assert left - 0.05 <= sum(clock.slept) <= left + 1e-9, clock.slept
        assert max(clock.slept) <= 0.05
        assert conn.closed
        assert read_until_reset(ours)[1]


def test_a_web_server_silent_during_the_drain_ends_it_after_its_time(use_backend, pair):
    """The drain reads with RESET_DRAIN_SECONDS as the socket's timeout: a web server that
    neither sends nor closes does not hold the connection's thread."""
    ours, theirs = pair
    conn = Connection(theirs, '')
    ender = in_thread(lambda: conn.end_abruptly(b'FORBIDDEN', lambda deadline: conn.recv_some()))
    assert read_to_eof(ours) == b'FORBIDDEN'
    assert joined(ender) and conn.closed


# --- the overloaded refusal

class Refusing(Connection):
    """A protocol whose refusal reads a head line (a byte at a time: what follows it stays
    unread) and answers ``BUSY``."""

    def _answer_overloaded(self):
        head = b''
        while not head.endswith(b'\n'):
            data = bytes(self.recv_some(1))
            if not data:
                raise EOFError
            head += data
        self.send([b'BUSY'])


def test_a_refusal_lingers_for_the_rest_of_its_time(use_backend, pair):
    """Answered in well under OVERLOAD_ANSWER_SECONDS: the rest of that time is a lingering
    close, so the body the refusal never read is taken, not answered with a reset."""
    ours, theirs = pair
    conn = Refusing(theirs, '')
    ours.sendall(b'HEAD\nthe body the refusal does not read')
    refuser = in_thread(conn.refuse_overloaded)
    assert read_to_eof(ours) == b'BUSY'
    ours.shutdown(socket.SHUT_WR)
    assert joined(refuser) and conn.closed
    assert ours.recv(1) == b''  # a close that left the body unread resets us here


def test_a_silent_web_server_is_closed_once_the_refusals_time_is_up(use_backend, pair):
    """Nothing came within OVERLOAD_ANSWER_SECONDS: the head's read gives up, and with no time
    left the close does not linger (this runs in the accept loop's thread)."""
    ours, theirs = pair
    conn = Refusing(theirs, '')
    refuser = in_thread(conn.refuse_overloaded)
    ours.settimeout(OVERLOAD_ANSWER_SECONDS + SOCKET_TIMEOUT)
    assert ours.recv(1) == b''  # its FIN, after the head's read timed out
    assert late_bytes_refused(ours, refuser)
    assert conn.closed


# --- the logged loop

class Logged(LoggedConnection):
    """A protocol whose ``_serve`` raises ``error`` (if any)."""

    error = None

    def _serve(self):
        if self.error is not None:
            raise self.error


def run_logged(caplog, error=None, addr='', logger_name='flupfast-plumbing'):
    ours, theirs = socket.socketpair()
    ours.settimeout(SOCKET_TIMEOUT)
    with ours:
        conn = Logged(theirs, addr, None, None, logger_name)
        conn.error = error
        with caplog.at_level(logging.DEBUG, logger=logger_name):
            assert conn.run() == 0
        assert conn.closed and ours.recv(1) == b''
    return [(r.name, r.levelname, r.getMessage(), bool(r.exc_info)) for r in caplog.records]


def test_a_new_logger_name_logs_under_that_name(caplog):
    name = 'flupfast-plumbing-%s' % uuid.uuid4().hex
    assert run_logged(caplog, ProtocolError('bad magic'), logger_name=name) == [
        (name, 'ERROR', "Protocol error 'bad magic'", False)]


@pytest.mark.parametrize('addr', ['', '/run/app.sock', None])
def test_a_unix_socket_connection_logs_no_address_lines(caplog, addr):
    assert run_logged(caplog, addr=addr) == []


def test_a_web_server_that_left_is_one_warning_without_a_traceback(caplog):
    assert run_logged(caplog, ClientDisconnected('the web server closed the connection')) == [
        ('flupfast-plumbing', 'WARNING', 'the web server closed the connection', False)]


@pytest.mark.parametrize('error', [OSError(errno.EACCES, 'denied'), RuntimeError('bug')],
                         ids=['OSError', 'Exception'])
def test_an_error_is_flups_exception_line_with_its_traceback(caplog, error):
    assert run_logged(caplog, error) == [
        ('flupfast-plumbing', 'ERROR', 'Exception caught in Connection', True)]


def test_a_peer_gone_error_is_quiet(caplog):
    assert run_logged(caplog, BrokenPipeError(errno.EPIPE, 'Broken pipe')) == []


def test_a_request_timeout_report_is_logged_less_its_final_newline(caplog):
    """``request_deadline``'s report: each piece is one ERROR line, the stack's last source
    line whole."""
    ours, theirs = socket.socketpair()
    with ours, theirs, caplog.at_level(logging.ERROR, logger='flupfast-plumbing'):
        conn = Logged(theirs, '', None, 5, 'flupfast-plumbing')
        conn._timed_out('Timeout Exceeded\n')
        conn._timed_out('  File "app.py", line 3, in app\n    wait(TIMEOUT_MAX)\n    n = MAX\n')
    assert [r.getMessage() for r in caplog.records] == [
        'Timeout Exceeded',
        '  File "app.py", line 3, in app\n    wait(TIMEOUT_MAX)\n    n = MAX']

