"""The pieces behind the fault tests, in process: the pool's queue bound, the threaded mode's
hand-off (queue, "overloaded" refusal, idle persistent jobs ended when their thread is needed
or at stop), the prefork parent's "overloaded" answer (OverloadGuard, without fork), and the
per-request deadline watchdog (any thread, the main thread's blocking
calls, the app's SIGALRM handler and alarm left alone, no stray exception after a request
ends). Nothing here depends on timing beyond "eventually" and "at least this long".
"""
import signal
import socket
import threading
import time

import pytest

from flupfast.deadline import TimeoutException, request_deadline
from flupfast.serving.threaded import ThreadedMode
from flupfast.serving.job import WAIT, Job
from flupfast.serving.threadpool import ThreadPool
from tests.reliability import fault_harness
from tests.waiting import wait_until


class Blocking:
    """A job that runs until released."""

    def __init__(self):
        self.started = threading.Event()
        self.release = threading.Event()
        self.ran = False

    def run(self):
        self.started.set()
        self.release.wait(30)
        self.ran = True


@pytest.fixture
def pool():
    pools = []

    def make(**kw):
        p = ThreadPool(**kw)
        pools.append(p)
        return p
    yield make
    for p in pools:
        p.shutdown(5)


def test_queue_limit_bounds_jobs_waiting_for_a_thread(pool):
    p = pool(min_spare=1, max_spare=2, max_threads=2)
    busy = [Blocking(), Blocking()]
    for job in busy:
        assert p.add_job(job, queue_limit=2)
        assert job.started.wait(10)
    assert p.busy_threads() == 2
    queued = [Blocking(), Blocking()]
    assert all(p.add_job(job, queue_limit=2) for job in queued)
    assert p.idle_count == -2  # two jobs wait for a thread
    assert p.add_job(Blocking(), queue_limit=2) is False  # beyond the bound
    assert p.add_job(Blocking(), allow_queuing=False) is False
    for job in busy + queued:
        job.release.set()
    wait_until(lambda: all(job.ran for job in queued), fault_harness.WAIT)


class FakeConnection(Job):
    """A persistent-connection job: serves ``requests`` then waits idle, as FastCGI KEEP_CONN
    and AJP do, asking ``on_idle`` first; ``refuse_overloaded`` records the refusal."""

    def __init__(self, sock, addr, log):
        self.sock = sock
        self.log = log
        self.refused = False
        self.served = 0

    def run(self):
        self.log.append(("run", self))
        while True:
            data = self.sock.recv(100)  # a "request": one line
            self.idle = False
            if not data:
                break
            self.sock.sendall(b"ok\n")
            self.served += 1
            self.idle = True
            if self.on_idle(self, False) is not WAIT:
                self.log.append(("ended-idle", self))
                break
        self.sock.close()
        return self.served

    def refuse_overloaded(self):
        self.refused = True
        self.sock.recv(100)  # the request head first, as the real connections do
        self.sock.sendall(b"overloaded\n")
        self.sock.close()


def one_thread_mode(tmp_path):
    """A ThreadedMode of one thread and a queue of one, serving FakeConnections on a Unix
    socket in a thread: (log, address, mode, listener, thread)."""
    log = []
    address = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(address)
    listener.listen(64)
    mode = ThreadedMode(FakeConnection, (log,), max_queued=1, min_spare=1, max_spare=1,
                        max_threads=1)
    thread = threading.Thread(target=mode.serve, args=(listener, 0.05), daemon=True)
    thread.start()
    return log, address, mode, listener, thread


def connect(address, line=b"req\n"):
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(60)  # only a bound: the machine may be loaded
    sock.connect(address)
    if line:
        sock.sendall(line)
    return sock


def test_threaded_mode_queues_refuses_and_ends_idle_connections(tmp_path):
    log, address, mode, listener, thread = one_thread_mode(tmp_path)
    try:
        first = connect(address)
        assert first.recv(10) == b"ok\n"  # served; now idle on its thread
        queued = connect(address)
        # Its thread was needed: the idle first connection ended, and the queued one runs.
        assert first.recv(10) == b""
        assert queued.recv(10) == b"ok\n"
        # Idle with nobody waiting, it keeps the thread until another connection needs it.
        waiting = connect(address, line=None)
        assert queued.recv(10) == b""
        waiting.sendall(b"req\n")
        assert waiting.recv(10) == b"ok\n"
    finally:
        mode.shutdown(5)
        thread.join(10)
        listener.close()
    # Stop: the idle connection was ended at once, not after the grace.
    assert waiting.recv(10) == b""
    for sock in (first, queued, waiting):
        sock.close()


def test_threaded_mode_answers_overloaded_beyond_the_queue(tmp_path):
    log, address, mode, listener, thread = one_thread_mode(tmp_path)
    try:
        busy = connect(address, line=None)     # holds the thread: never sends a request
        wait_until(lambda: len(log) == 1, fault_harness.WAIT)
        queued = connect(address)              # waits for the thread
        refused = connect(address)             # beyond the bound
        assert refused.recv(20) == b"overloaded\n"
        busy.sendall(b"req\n")
        assert busy.recv(10) == b"ok\n"
        assert busy.recv(10) == b""            # ended idle: the queued one needs the thread
        assert ("ended-idle", log[0][1]) in log  # by its own idle check, before waiting
        assert queued.recv(10) == b"ok\n"
    finally:
        mode.shutdown(5)
        thread.join(10)
        listener.close()
    for sock in (busy, queued, refused):
        sock.close()



class FirstRequestConnection(FakeConnection):
    """A one-request job waiting ``idle`` for its request with nothing ``served``, as an SCGI
    connection waits for its header (so that a stop ends the wait)."""

    def run(self):
        self.log.append(("run", self))
        self.idle = True
        data = self.sock.recv(100)
        self.idle = False
        if data:
            self.sock.sendall(b"ok\n")
            self.served = 1
        self.sock.close()


def test_threaded_mode_never_ends_a_connection_whose_first_request_is_on_its_way(tmp_path):
    """A queued connection may take the thread of a persistent connection between requests,
    not that of a new one that has not sent its request yet: that request would be lost."""
    log = []
    address = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(address)
    listener.listen(64)
    mode = ThreadedMode(FirstRequestConnection, (log,), max_queued=1, min_spare=1,
                        max_spare=1, max_threads=1)
    thread = threading.Thread(target=mode.serve, args=(listener, 0.05), daemon=True)
    thread.start()
    try:
        first = connect(address, line=None)
        # on the one thread, waiting for its request
        wait_until(lambda: len(log) == 1, fault_harness.WAIT)
        queued = connect(address)
        wait_until(lambda: mode.pool.idle_count < 0, fault_harness.WAIT)  # queued behind it
        time.sleep(0.2)  # let the accept loop finish the hand-off (no assertion on timing)
        first.sendall(b"req\n")
        assert first.recv(10) == b"ok\n"
        assert queued.recv(10) == b"ok\n"
    finally:
        mode.shutdown(5)
        thread.join(10)
        listener.close()
    for sock in (first, queued):
        sock.close()

# -- the deadline watchdog ----------------------------------------------------------------------

def test_deadline_raises_in_a_non_main_thread():
    reports = []
    outcome = []

    def request():
        try:
            with request_deadline(0.2, reports.append):
                while True:
                    pass
        except TimeoutException:
            outcome.append("timeout")

    thread = threading.Thread(target=request)
    thread.start()
    thread.join(30)
    assert outcome == ["timeout"]
    assert reports[0] == "Timeout Exceeded\n" and "request" in reports[1]


def test_deadline_interrupts_a_blocking_call_of_the_main_thread_and_leaves_sigalrm():
    def app_handler(signum, frame):
        pass
    previous = signal.signal(signal.SIGALRM, app_handler)
    signal.setitimer(signal.ITIMER_REAL, 1000)
    try:
        a, b = socket.socketpair()
        with a, b:
            with pytest.raises(TimeoutException):
                with request_deadline(0.2, lambda message: None):
                    a.recv(10)  # blocks in C
        assert signal.getsignal(signal.SIGALRM) is app_handler
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_no_stray_timeout_after_requests_that_end_at_their_deadline():
    # Requests that finish right around their deadline: the exception either ends the request
    # or is cancelled; it never surfaces after the request.
    for _ in range(200):
        try:
            with request_deadline(0.001, lambda message: None):
                deadline = time.monotonic() + 0.001
                while time.monotonic() < deadline:
                    pass
        except TimeoutException:
            pass
        for _ in range(2000):  # plenty of bytecodes for a pending exception to fire on
            pass


# -- the prefork parent's overloaded answer (OverloadGuard), without fork ----------------------

class RefusingJob(Job):
    """A job the parent only ever asks to refuse: it waits for ``release``, then answers."""

    def __init__(self, sock, addr, release):
        self.sock = sock
        self.release = release

    def run(self):
        raise AssertionError("the prefork parent never runs a job")

    def refuse_overloaded(self):
        self.release.wait(30)
        self.sock.sendall(b"overloaded\n")
        self.sock.close()


class PlainJob:
    """A flup-style job class: no refuse_overloaded."""

    def __init__(self, sock, addr):
        self.sock = sock

    def run(self):
        raise AssertionError("the prefork parent never runs a job")


@pytest.fixture
def exhausted_pool(tmp_path):
    """A PreforkMode (max_children=1) whose one child the parent sees busy, its non-blocking
    listening socket and a selector, as the parent loop has them: (mode, listener, selector,
    address). Nothing forks: the test plays the child's part."""
    import selectors

    from flupfast.serving.prefork import BUSY, ChildRecord, PreforkMode
    made = []

    def make(job_class, job_args=(), wait=0.3):
        address = str(tmp_path / ("s%d.sock" % len(made)))
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(address)
        listener.listen(16)
        listener.setblocking(False)
        mode = PreforkMode(job_class, job_args, min_spare=1, max_spare=1, max_children=1,
                           overload_wait=wait)
        mode.children = {1: ChildRecord(1, None, BUSY)}
        selector = selectors.DefaultSelector()
        made.append((mode, listener, selector))
        return mode, listener, selector, address
    yield make
    for mode, listener, selector in made:
        mode._overload.close()
        selector.close()
        listener.close()


def prefork_has_waiting(listener):
    from flupfast.serving.listen import has_waiting
    return has_waiting(listener)


def _waiting(selector, guard):
    """The parent loop's part: the watched listener turned readable."""
    assert [key.data for key, _ in selector.select(10)] == [guard]
    guard.on_waiting()


def test_overload_guard_watches_only_when_exhausted_and_restarts_its_clock(exhausted_pool):
    from flupfast.serving.prefork import BUSY, IDLE, PARENT_TICK
    mode, listener, selector, address = exhausted_pool(RefusingJob, (threading.Event(),), wait=1.0)
    guard = mode._overload
    child = mode.children[1]
    child.state = IDLE
    assert guard.tend(listener, selector) == PARENT_TICK
    assert not selector.get_map()  # a child is idle: the parent leaves connections to it
    child.state = BUSY
    guard.tend(listener, selector)
    assert selector.get_key(listener).data is guard  # exhausted: watching for a connection
    first = connect(address)
    _waiting(selector, guard)
    assert not selector.get_map()  # the clock runs; no busy loop on a readable socket
    assert 0 < guard.tend(listener, selector) <= 1.0
    # The child took it (it freed up and is busy again): the queue is empty, so the clock
    # restarts with the next connection and nothing is refused.
    listener.accept()[0].close()
    time.sleep(1.05)
    guard.tend(listener, selector)
    assert selector.get_key(listener).data is guard
    assert not guard.answering()
    first.close()
    # The next connection gets its own full wait; past it, a child is idle: nothing refused.
    second = connect(address)
    _waiting(selector, guard)
    assert 0 < guard.tend(listener, selector) <= 1.0
    assert not guard.answering()
    time.sleep(1.05)
    child.state = IDLE
    assert guard.tend(listener, selector) == PARENT_TICK
    assert not guard.answering() and not selector.get_map()
    second.close()


def test_overload_guard_refuses_after_the_wait_and_forks_only_when_done(exhausted_pool, caplog):
    release = threading.Event()
    mode, listener, selector, address = exhausted_pool(RefusingJob, (release,))
    guard = mode._overload
    spawned = []
    mode.spawn_child = lambda sock: spawned.append(sock) or True
    guard.tend(listener, selector)
    clients = [connect(address) for _ in range(2)]
    _waiting(selector, guard)
    started = time.monotonic()

    def answering():
        if guard.answering():
            return True
        guard.tend(listener, selector)  # the parent loop's rounds
        return False
    wait_until(answering, 10)
    assert time.monotonic() - started >= 0.25  # not before the bound
    assert not prefork_has_waiting(listener)  # both were accepted
    assert caplog.text.count("answering 'overloaded'") == 1
    assert "all 1 children busy and connections waiting for" in caplog.text
    # The child exits meanwhile: its replacement waits until no answer runs (a child forked
    # now would inherit the refused connections).
    mode.children = {}
    mode._tend_pool(listener)
    assert spawned == []
    release.set()
    for client in clients:
        assert client.recv(20) == b"overloaded\n"
        client.close()
    wait_until(lambda: not guard.answering(), fault_harness.WAIT)
    mode._tend_pool(listener)
    assert spawned == [listener]
    guard.tend(listener, selector)  # not exhausted any more: the burst is summed up
    assert "a child is free again; 2 connection(s) were answered 'overloaded'" in caplog.text
    assert caplog.text.count("answering 'overloaded'") == 1


def test_overload_guard_bounds_its_answers_and_closes_jobs_without_refusal(
        exhausted_pool, monkeypatch):
    from flupfast.serving.prefork import overload
    monkeypatch.setattr(overload, "MAX_OVERLOAD_ANSWERS", 2)
    release = threading.Event()
    mode, listener, selector, address = exhausted_pool(RefusingJob, (release,), wait=0)
    guard = mode._overload
    guard.tend(listener, selector)
    clients = [connect(address) for _ in range(3)]
    _waiting(selector, guard)
    guard.tend(listener, selector)
    assert len(guard._answers) == 2 and prefork_has_waiting(listener)  # the third waits
    release.set()
    wait_until(lambda: not guard.answering(), fault_harness.WAIT)
    guard.tend(listener, selector)
    for client in clients:
        assert client.recv(20) == b"overloaded\n"
        client.close()
    # A job class without refuse_overloaded: the connection is closed, as in thread mode.
    mode, listener, selector, address = exhausted_pool(PlainJob, wait=0)
    guard = mode._overload
    guard.tend(listener, selector)
    client = connect(address)
    _waiting(selector, guard)
    guard.tend(listener, selector)
    try:
        assert client.recv(20) == b""
    except ConnectionResetError:  # closed with the request unread
        pass
    client.close()
