"""Leader/follower accept in the threaded mode (flupfast/serving/leader.py and its compiled
twin): the Leader's contract on both backends, and the mode's promises with it: the worker that
accepts serves, no connection of a burst is lost while every worker is busy, maxThreads is
honoured, the loop thread accepts only when no worker is free, a stop ends the followers.
Concurrency is shown by events and counts, never by elapsed time.
"""
import contextlib
import os
import select
import socket
import threading

import pytest

from flupfast.serving import threaded
from flupfast.serving.job import Job
from flupfast.serving.threaded import ThreadedMode
from flupfast.server.threadedserver import ThreadedServer
from tests.waiting import wait_until

WAIT = 30.0


@pytest.fixture
def unix_listener(tmp_path):
    address = str(tmp_path / "l.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(address)
    listener.listen(64)
    listener.setblocking(False)
    yield listener, address
    listener.close()


def _connect(address, family=socket.AF_UNIX):
    sock = socket.socket(family)
    sock.settimeout(WAIT)
    sock.connect(address)
    return sock


@contextlib.contextmanager
def _led_once(leader, address, family=socket.AF_UNIX):
    """A peer connects and ``leader`` leads once: (client, addr, peer); all closed after,
    the leader too."""
    peer = _connect(address, family)
    try:
        client, addr = leader.lead()
        try:
            yield client, addr, peer
        finally:
            client.close()
    finally:
        peer.close()
        leader.close()


def test_a_tcp_peer_gone_before_its_address_is_nothing_to_take(backend, monkeypatch):
    """The compiled leader reads a TCP peer's address with getpeername(): a peer that reset
    first is nothing to take (None: the worker leads again; the socket closed), as in the
    prefork child, not an "accept() failed" with a pause. The pure twin's accept() has the
    address already and gives the connection."""
    listener = socket.socket(socket.AF_INET)
    listener.bind(('127.0.0.1', 0))
    listener.listen(8)
    listener.setblocking(False)
    with listener:
        leader = backend.Leader(listener)

        def gone(sock):
            raise OSError(107, 'Transport endpoint is not connected')
        monkeypatch.setattr(socket.socket, 'getpeername', gone)
        peer = _connect(listener.getsockname(), socket.AF_INET)
        try:
            accepted = leader.lead()
            monkeypatch.undo()
            if backend.name == 'cy':
                assert accepted is None
                assert peer.recv(1) == b''  # closed, not left open
            else:
                client, addr = accepted
                with client:
                    assert addr == peer.getsockname()
        finally:
            peer.close()
            leader.close()


def _lead_in_thread(leader, out):
    thread = threading.Thread(target=lambda: out.append(leader.lead()), daemon=True)
    thread.start()
    return thread


# -- the Leader, on both backends ---------------------------------------------------------------

def test_lead_accepts_a_blocking_close_on_exec_socket(backend, unix_listener):
    listener, address = unix_listener
    with _led_once(backend.Leader(listener), address) as (client, addr, peer):
        assert addr == ""  # what socket.accept() gives for an unnamed AF_UNIX peer
        assert client.gettimeout() is None and client.getblocking()
        assert not os.get_inheritable(client.fileno())
        assert (client.family, client.type) == (listener.family, listener.type)
        peer.sendall(b"x")
        assert client.recv(1) == b"x"
        # A whole socket.socket (the compiled twin builds it without socket.py's
        # __init__, knowing its slots): a stream closed first leaves the socket open;
        # close() then waits for a second stream, and the stream's close closes the fd.
        assert type(client) is socket.socket and client._closed is False
        assert list(socket.socket.__slots__) == ["__weakref__", "_io_refs", "_closed"]
        client.makefile("rb").close()
        assert client.fileno() != -1
        stream = client.makefile("rb")
        client.close()
        assert client._closed and client.fileno() != -1  # the stream holds the fd
        peer.sendall(b"y")
        assert stream.read(1) == b"y"
        stream.close()
        assert client.fileno() == -1
        assert "closed" in repr(client)


@pytest.mark.parametrize("family", [socket.AF_UNIX, socket.AF_INET])
@pytest.mark.parametrize("default_timeout", [None, 2.5])
def test_the_accepted_socket_is_what_socket_accept_gives(backend, tmp_path, monkeypatch,
                                                          family, default_timeout):
    """The compiled twin writes an accepted fd's socket state itself (no getsockname per
    connection); the socket is the one socket.accept() builds, with a default timeout too."""
    listener = socket.socket(family)
    listener.bind(str(tmp_path / "l.sock") if family == socket.AF_UNIX else ("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    address = listener.getsockname()
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(default_timeout)
    try:
        leader = backend.Leader(listener)
        with _led_once(leader, address, family) as (client, addr, peer):
            theirs_peer = _connect(address, family)
            listener.setblocking(True)
            theirs, their_addr = listener.accept()
            with theirs, theirs_peer:
                def seen(sock):
                    return (type(sock), sock.family, sock.type, sock.proto, sock.gettimeout(),
                            sock.getblocking(), os.get_inheritable(sock.fileno()),
                            sock.getsockname())
                assert seen(client) == seen(theirs)
                assert client.gettimeout() == default_timeout
                assert addr == (peer.getsockname() if family == socket.AF_INET else "")
                peer.sendall(b"x")
                assert client.recv(1) == b"x"
                fd = client.fileno()
                client.close()
                assert client.fileno() == -1
                with pytest.raises(OSError):
                    os.fstat(fd)
    finally:
        socket.setdefaulttimeout(previous)
        listener.close()


class _TaggedSocket(socket.socket):  # no __slots__ of its own: it has a __dict__
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tag = "init ran"


def test_a_socket_subclass_is_built_by_its_own_init(backend, unix_listener, monkeypatch):
    """socket.socket replaced by a subclass (its __slots__ inherited): the accepted socket is
    one of it, its __init__ run (found in review: the compiled twin skipped it)."""
    listener, address = unix_listener
    peer = _connect(address)  # a plain socket, before the class is replaced
    monkeypatch.setattr(socket, "socket", _TaggedSocket)
    leader = backend.Leader(listener)
    try:
        client, _ = leader.lead()
        with client, peer:
            assert type(client) is _TaggedSocket and client.tag == "init ran"
    finally:
        leader.close()


def test_an_init_wrapped_after_the_start_is_called(backend, unix_listener, monkeypatch):
    """socket.socket.__init__ wrapped by instrumentation once the server runs: the next
    accepted socket goes through it (found in review: the compiled twin never called it)."""
    listener, address = unix_listener
    leader = backend.Leader(listener)
    calls = []
    stock = socket.socket.__init__

    def traced(self, *args, **kwargs):
        stock(self, *args, **kwargs)
        if kwargs.get("fileno") is not None:  # an accepted one, not the peer's
            calls.append(self.fileno())
    monkeypatch.setattr(socket.socket, "__init__", traced)
    with _led_once(leader, address) as (client, _, _peer):
        assert calls == [client.fileno()]


# In a process of its own: an audit hook cannot be taken out again.
AUDIT_SCRIPT = r"""
import socket, sys, tempfile
from flupfast._speedups import Leader
events = []
sys.addaudithook(lambda event, args: events.append(event) if event == "socket.__new__" else None)
path = tempfile.mkdtemp() + "/l.sock"
listener = socket.socket(socket.AF_UNIX)
listener.bind(path)
listener.listen(8)
listener.setblocking(False)
leader = Leader(listener)
seen = []
for default_timeout in (None, None, 2.5):  # the first also makes the layout check's pair
    socket.setdefaulttimeout(default_timeout)
    peer = socket.socket(socket.AF_UNIX)
    peer.connect(path)
    del events[:]
    client, _ = leader.lead()
    seen.append(len(events))
    client.close()
    peer.close()
print(seen[1:])
"""


def test_the_compiled_accept_skips_the_sockets_init_where_it_may(tmp_path):
    """The compiled accept builds the socket without _socket's init (and its getsockname)
    with no default timeout, up to CPython 3.13 (the layouts it knows): no "socket.__new__"
    audit event, which the init raises; with a default timeout the init runs."""
    import subprocess
    import sys
    from tests.conftest import COMPILED
    if COMPILED is None:
        pytest.skip("flupfast._speedups is not built")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", AUDIT_SCRIPT], capture_output=True, timeout=60,
                         cwd=root, env=dict(os.environ, PYTHONPATH=root))
    assert out.returncode == 0, out.stderr.decode()
    direct = sys.version_info < (3, 14)
    assert out.stdout.decode().strip() == str([0 if direct else 1, 1])


STATE_SCRIPT = r"""
import socket
from flupfast._speedups import Leader
listener = socket.socket(socket.AF_INET)
listener.bind(("127.0.0.1", 0))
listener.listen(8)
listener.setblocking(False)
leader = Leader(listener)
seen = []
for _ in range(2):  # the first makes the layout check's pair
    peer = socket.create_connection(listener.getsockname())
    client, _ = leader.lead()
    # What reads the module's state (3.12+): the errors it holds, a new socket from this one.
    try:
        client.sendto(b"x", ("name.invalid.", 9))
    except socket.gaierror:
        seen.append("gaierror")
    try:
        client._accept()
    except OSError:
        seen.append("oserror")
    copy = client.dup()
    peer.sendall(b"ok")
    seen.append(copy.recv(2).decode())
    copy.close()
    client.close()
    peer.close()
print(seen[3:])
"""


def test_a_socket_built_without_the_init_has_what_the_init_sets(backend):
    """From CPython 3.12 on a socket also holds its module's state, which only _socket's init
    sets: the compiled accept copies it, so what reads it (its errors, a dup) works as on a
    socket from accept(). In a process of its own: a missing state would crash it."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = STATE_SCRIPT.replace("flupfast._speedups", "flupfast.serving.leader") \
        if backend.name == 'py' else STATE_SCRIPT
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60,
                         cwd=root, env=dict(os.environ, PYTHONPATH=root))
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().strip() == str(["gaierror", "oserror", "ok"])


def test_lead_builds_a_replaced_socket_class_by_calling_it(backend, unix_listener,
                                                           monkeypatch):
    # A socket class the compiled twin does not know (other slots) is called, not built.
    class Tagged(socket.socket):
        __slots__ = ("tag",)

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.tag = "called"

    monkeypatch.setattr(socket, "socket", Tagged)
    listener, address = unix_listener
    with _led_once(backend.Leader(listener), address) as (client, _, _):
        assert type(client) is Tagged and client.tag == "called"


def test_lead_gives_a_tcp_peer_address_as_accept_does(backend):
    listener = socket.socket(socket.AF_INET)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    try:
        with _led_once(backend.Leader(listener), listener.getsockname(),
                       socket.AF_INET) as (client, addr, peer):
            assert addr == peer.getsockname() == client.getpeername()
    finally:
        listener.close()


def test_each_wake_ends_exactly_one_wait(backend, unix_listener):
    listener, _ = unix_listener
    leader = backend.Leader(listener)
    try:
        for _ in range(3):
            leader.wake()
        for _ in range(3):
            out = []
            _lead_in_thread(leader, out).join(WAIT)
            assert out == [None]  # each finds its own wakeup (none drained another's)
        out = []
        waiting = _lead_in_thread(leader, out)
        waiting.join(0.2)
        assert waiting.is_alive() and not out  # no wakeup left: it waits
        leader.wake()
        waiting.join(WAIT)
        assert out == [None]
    finally:
        leader.close()


def test_close_ends_the_leader_and_every_follower(backend, unix_listener):
    listener, _ = unix_listener
    leader = backend.Leader(listener)
    out = []
    threads = [_lead_in_thread(leader, out) for _ in range(4)]
    leader.close()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()
    assert out == [None] * 4
    assert leader.lead() is None  # and any later one
    assert leader.closed


def test_one_connection_goes_to_one_of_many_waiting_leaders(backend, unix_listener):
    listener, address = unix_listener
    leader = backend.Leader(listener)
    out = []
    threads = [_lead_in_thread(leader, out) for _ in range(3)]
    peer = _connect(address)
    try:
        wait_until(lambda: len(out) == 1, WAIT)
        assert out[0] is not None
        out[0][0].close()
    finally:
        leader.close()
        for thread in threads:
            thread.join(WAIT)
        peer.close()
    assert out[1:] == [None, None]


def test_more_waiting_leaders_than_sets_one_connection_one_wake_then_close(backend,
                                                                          unix_listener):
    """More waiting workers than the compiled twin has sets of their own: the rest follow on
    the leader lock; still one connection to one of them, one wakeup to one, a stop to all."""
    listener, address = unix_listener
    leader = backend.Leader(listener)
    out = []
    threads = [_lead_in_thread(leader, out) for _ in range(20)]
    peer = _connect(address)
    try:
        wait_until(lambda: len(out) == 1, WAIT)
        assert out[0] is not None
        out[0][0].close()
        leader.wake()
        wait_until(lambda: len(out) == 2, WAIT)
        assert out[1] is None
    finally:
        leader.close()
        for thread in threads:
            thread.join(WAIT)
        peer.close()
    assert out[2:] == [None] * 18 and not any(thread.is_alive() for thread in threads)


def test_one_wake_ends_exactly_one_of_many_waiting_leaders(backend, unix_listener):
    """The compiled twin's waiting workers each have their own epoll set (EPOLLEXCLUSIVE):
    the kernel may wake more than one for the wakeup byte, but only one takes it."""
    listener, _ = unix_listener
    leader = backend.Leader(listener)
    out = []
    threads = [_lead_in_thread(leader, out) for _ in range(3)]
    try:
        leader.wake()
        wait_until(lambda: len(out) == 1, WAIT)
        alive = [thread for thread in threads if thread.is_alive()]
        alive[0].join(0.2)
        assert len(out) == 1 and len(alive) == 2  # the other two wait on
    finally:
        leader.close()
        for thread in threads:
            thread.join(WAIT)
    assert out == [None, None, None]


def test_connections_after_a_leading_thread_exited_still_reach_a_waiting_one(backend,
                                                                               unix_listener):
    """Threads that led once and exited: the epoll sets they waited on (compiled twin) go to
    the next waiting threads and take no wakeup meant for them meanwhile."""
    listener, address = unix_listener
    leader = backend.Leader(listener)
    peers = []
    try:
        for _ in range(3):
            out = []
            thread = _lead_in_thread(leader, out)
            peers.append(_connect(address))
            thread.join(WAIT)
            assert not thread.is_alive() and out[0] is not None
            out[0][0].close()
        waiting = []
        threads = [_lead_in_thread(leader, waiting) for _ in range(2)]
        peers.append(_connect(address))
        wait_until(lambda: len(waiting) == 1, WAIT)
        assert waiting[0] is not None
        waiting[0][0].close()
        leader.close()
        for thread in threads:
            thread.join(WAIT)
        assert waiting[1:] == [None]
    finally:
        leader.close()
        for peer in peers:
            peer.close()


# -- the mode -----------------------------------------------------------------------------------

class GatedJob(Job):
    """Answers one line once ``gate`` is set; records its thread and the jobs running at once."""

    def __init__(self, client, addr, state):
        self.client = client
        self.state = state

    def run(self):
        state = self.state
        with state["lock"]:
            state["running"] += 1
            state["most"] = max(state["most"], state["running"])
            state["threads"].append(threading.current_thread())
        state["started"].release()
        try:
            state["gate"].wait(WAIT)
            self.client.recv(100)
            self.client.sendall(b"ok\n")
        finally:
            with state["lock"]:
                state["running"] -= 1
            self.client.close()
        return 1

    def refuse_overloaded(self):
        self.client.sendall(b"overloaded\n")
        self.client.close()


def _state():
    return {"lock": threading.Lock(), "running": 0, "most": 0, "threads": [],
            "started": threading.Semaphore(0), "gate": threading.Event()}


@pytest.fixture
def serve_mode(backend, monkeypatch, unix_listener):
    """Start a ThreadedMode of GatedJobs on the backend's Leader: (mode, state, address)."""
    monkeypatch.setattr(threaded._impl, "Leader", backend.Leader)
    listener, address = unix_listener
    started = []

    def start(**options):
        state = _state()
        mode = ThreadedMode(GatedJob, (state,), **options)
        accepts = []
        original = mode._accept_one

        def counting(sock, tcp):
            accepts.append(threading.current_thread())
            return original(sock, tcp)
        mode._accept_one = counting
        mode.loop_accepts = accepts
        # A loop timeout longer than any test: the loop wakes for a stop or because a worker
        # woke it (the last free one took a connection), never on its own.
        thread = threading.Thread(target=mode.serve, args=(listener, 3600), daemon=True)
        thread.start()
        wait_until(lambda: mode._leading, WAIT)
        started.append((mode, thread, state))
        return mode, state, address

    yield start
    for mode, thread, state in started:
        state["gate"].set()
        mode.shutdown(5)
        thread.join(WAIT)
        assert not thread.is_alive()
        wait_until(lambda: mode.pool.worker_count == 0, WAIT)


def _ask(sock):
    sock.sendall(b"req\n")
    return sock.recv(20)


def test_the_worker_that_accepts_serves_and_the_loop_accepts_nothing(serve_mode):
    mode, state, address = serve_mode(min_spare=1, max_spare=4, max_threads=8)
    state["gate"].set()
    for _ in range(20):
        sock = _connect(address)
        assert _ask(sock) == b"ok\n"
        sock.close()
    assert mode.loop_accepts == []  # no hand-off: every connection was a worker's
    assert all(t.name == "flupfast-worker" for t in state["threads"])


def test_a_burst_with_every_worker_busy_loses_no_connection(serve_mode):
    mode, state, address = serve_mode(min_spare=1, max_spare=2, max_threads=2, max_queued=64)
    socks = [_connect(address) for _ in range(2)]
    for _ in range(2):
        assert state["started"].acquire(timeout=WAIT)  # both workers busy, gated
    socks += [_connect(address) for _ in range(10)]  # all at once, nobody free to accept
    # The loop took over accepting (no worker left to lead) and queued them.
    wait_until(lambda: mode.pool.idle_count <= -10, WAIT)
    state["gate"].set()
    assert [_ask(sock) for sock in socks] == [b"ok\n"] * 12
    assert state["most"] == 2  # maxThreads honoured throughout
    assert mode.pool.worker_count <= 2
    for sock in socks:
        sock.close()


def test_overloaded_is_still_answered_beyond_the_queue(serve_mode):
    mode, state, address = serve_mode(min_spare=1, max_spare=1, max_threads=1, max_queued=1)
    busy = _connect(address)
    assert state["started"].acquire(timeout=WAIT)
    queued = _connect(address)
    wait_until(lambda: mode.pool.idle_count == -1, WAIT)
    refused = _connect(address)
    assert refused.recv(20) == b"overloaded\n"
    state["gate"].set()
    assert _ask(busy) == b"ok\n" and _ask(queued) == b"ok\n"
    assert len(mode.loop_accepts) >= 2  # the loop accepted what no worker could
    for sock in (busy, queued, refused):
        sock.close()


def test_a_new_leader_takes_over_once_a_worker_is_free_again(serve_mode):
    mode, state, address = serve_mode(min_spare=1, max_spare=3, max_threads=3, max_queued=4)
    busy = [_connect(address) for _ in range(3)]
    for _ in range(3):
        assert state["started"].acquire(timeout=WAIT)
    wait_until(lambda: mode.listener_watched, WAIT)  # no worker free: the loop accepts
    state["gate"].set()
    assert [_ask(sock) for sock in busy] == [b"ok\n"] * 3
    wait_until(lambda: mode.pool.idle_count == 3, WAIT)
    sock = _connect(address)  # wakes the loop, which then sees free workers and stops watching
    assert _ask(sock) == b"ok\n"
    sock.close()
    wait_until(lambda: not mode.listener_watched, WAIT)
    before = len(mode.loop_accepts)
    for _ in range(6):
        # Each worker back first: with a serving worker slow to return, the one that
        # accepts next can be the last free one (``exhausted``), and then the loop rightly
        # watches again.
        wait_until(lambda: mode.pool.idle_count == 3, WAIT)
        sock = _connect(address)
        assert _ask(sock) == b"ok\n"
        sock.close()
    assert len(mode.loop_accepts) == before  # the workers lead again
    for sock in busy:
        sock.close()


class CountingLeader:
    """A Leader that records how many threads wait in ``lead()`` at once."""

    def __init__(self, leader_class, listener):
        self._leader = leader_class(listener)
        self._lock = threading.Lock()
        self.inside = 0
        self.most = 0

    def lead(self):
        with self._lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        try:
            return self._leader.lead()
        finally:
            with self._lock:
                self.inside -= 1

    def __getattr__(self, name):
        return getattr(self._leader, name)


@pytest.fixture
def counting_leader(backend, monkeypatch):
    made = []

    def make(listener):
        made.append(CountingLeader(backend.Leader, listener))
        return made[-1]
    monkeypatch.setattr(threaded._impl, "Leader", make)
    return made


def test_at_most_max_leaders_free_workers_wait_on_the_leader(serve_mode, counting_leader):
    """Six free workers: two wait on the listening socket, the other four on the pool's
    condition (a connection wakes one thread, not one of six that then queue for the GIL)."""
    mode, state, address = serve_mode(min_spare=1, max_spare=6, max_threads=6)
    leader, = counting_leader
    wait_until(lambda: leader.inside == 2, WAIT)  # the pool's max_leaders (limits.py)
    wait_until(lambda: mode.pool.idle_count == 6, WAIT)
    state["gate"].set()
    for _ in range(10):
        sock = _connect(address)
        assert _ask(sock) == b"ok\n"
        sock.close()
    assert leader.most == 2 and mode.pool.leaders_waiting <= 2
    assert mode.loop_accepts == []


def test_a_free_worker_is_woken_to_lead_only_when_no_leader_waits(serve_mode, counting_leader):
    """The first leader to take a connection is not replaced (the other still waits: the
    per-connection wake-up the bound saves); the second is, by one free worker, so the loop
    never has to accept. Workers back from their jobs fill the places again."""
    mode, state, address = serve_mode(min_spare=1, max_spare=6, max_threads=6)
    leader, = counting_leader
    wait_until(lambda: leader.inside == 2 and mode.pool.idle_count == 6, WAIT)
    busy = [_connect(address)]
    assert state["started"].acquire(timeout=WAIT)
    wait_until(lambda: leader.inside == 1, WAIT)
    busy.append(_connect(address))
    assert state["started"].acquire(timeout=WAIT)
    wait_until(lambda: leader.inside == 1 and mode.pool.idle_count == 4, WAIT)
    busy.append(_connect(address))  # taken by the worker woken to lead, not by the loop
    assert state["started"].acquire(timeout=WAIT)
    wait_until(lambda: leader.inside == 1 and mode.pool.idle_count == 3, WAIT)
    assert leader.most == 2 and mode.loop_accepts == [] and not mode.listener_watched
    state["gate"].set()
    assert [_ask(sock) for sock in busy] == [b"ok\n"] * 3
    wait_until(lambda: leader.inside == 2 and mode.pool.idle_count == 6, WAIT)
    for sock in busy:
        sock.close()


def test_leaders_woken_for_queued_jobs_leave_a_free_worker_leading(serve_mode, counting_leader):
    """Both waiting leaders are woken to run queued jobs that take long: a free worker on the
    condition leads in their place, or a new connection would wait in the backlog until a job
    ended (the loop does not accept while workers are free)."""
    mode, state, address = serve_mode(min_spare=1, max_spare=6, max_threads=6)
    leader, = counting_leader
    wait_until(lambda: leader.inside == 2 and mode.pool.idle_count == 6, WAIT)
    release, running = threading.Event(), threading.Semaphore(0)

    class Blocking:
        def run(self):
            running.release()
            release.wait(WAIT)  # set at the end of the test (they block 3x longer than its waits)
    try:
        for _ in range(2):
            assert mode.pool.add_job(Blocking())
        for _ in range(2):
            assert running.acquire(timeout=WAIT)
        wait_until(lambda: leader.inside >= 1, WAIT / 3)
        state["gate"].set()
        sock = _connect(address)
        sock.settimeout(WAIT / 3)
        assert _ask(sock) == b"ok\n"
        sock.close()
        assert mode.loop_accepts == []
    finally:
        release.set()


def test_facade_keeps_the_classic_loop_for_an_overridden_mainloop_periodic():
    class Periodic(ThreadedServer):
        def _mainloopPeriodic(self):
            pass

    plain = ThreadedServer(maxSpare=1)
    custom = Periodic(maxSpare=1)
    try:
        assert plain._servingMode.leader_follower is True
        assert custom._servingMode.leader_follower is False
    finally:
        plain.shutdown()
        custom.shutdown()


def test_a_closed_leader_accepts_nothing_even_with_a_connection_ready(backend, unix_listener):
    listener, address = unix_listener
    leader = backend.Leader(listener)
    peer = _connect(address)
    try:
        leader.close()
        assert leader.lead() is None
        listener.setblocking(True)
        client, _ = listener.accept()  # still in the backlog: nobody took it
        client.close()
    finally:
        peer.close()



@pytest.mark.skipif(not os.path.isdir('/proc/self/fd'), reason='counts fds in /proc')
def test_many_threads_leading_once_leave_no_pile_of_epoll_sets(backend, unix_listener):
    """The compiled twin's epoll sets are made once, not per thread (a pool ends and starts
    workers for years): the process's open fds do not grow with the threads that led."""
    listener, _ = unix_listener
    leader = backend.Leader(listener)
    try:
        def open_fds():
            return len(os.listdir('/proc/self/fd'))

        for _ in range(10):
            out = []
            leader.wake()
            _lead_in_thread(leader, out).join(WAIT)
        before = open_fds()
        for _ in range(200):
            out = []
            leader.wake()
            _lead_in_thread(leader, out).join(WAIT)
            assert out == [None]
        assert open_fds() == before
    finally:
        leader.close()


class _Answering(Job):
    ran = []

    def __init__(self, client, addr):
        self.client = client

    def run(self):
        _Answering.ran.append(1)
        with self.client:
            self.client.sendall(b"answer")
        return 1

    def refuse_overloaded(self):
        self.client.close()


@pytest.mark.parametrize("timeout", [None, 5.0])
def test_a_job_handed_over_just_before_the_stop_is_served(timeout):
    """The accept loop's last connection goes to a free worker that has not woken yet when
    the stop comes: the stop waits for it as for a running job (found in review: the queue
    was dropped and the client closed unanswered)."""
    for _ in range(5):
        mode = ThreadedMode(_Answering, parking=False, leader_follower=False, min_spare=1,
                            max_spare=2, max_threads=4)
        ours, theirs = socket.socketpair()
        _Answering.ran = []
        with ours:
            mode.dispatch(_Answering(theirs, ""), theirs)
            assert mode.shutdown(timeout) == []
            ours.settimeout(WAIT)
            assert ours.recv(16) == b"answer" and _Answering.ran == [1]


def test_a_wakeup_and_a_connection_together_take_the_connection(backend, unix_listener):
    """One wait that reports both a wakeup and the listener (the kernel offers a connection to
    one set of exclusive waiters): the connection is taken and the wakeup goes on to the next
    lead(), whichever comes first (found in review: the compiled leader left the connection
    in the backlog, where the other waiting leader was never told of it)."""
    listener, address = unix_listener
    leader = backend.Leader(listener)
    peer = _connect(address)
    try:
        leader.wake()
        wait_until(lambda: select.select([listener], [], [], 0)[0], WAIT)
        got = [leader.lead(), leader.lead()]
        accepted = [g for g in got if g is not None]
        assert len(accepted) == 1 and got.count(None) == 1
        accepted[0][0].close()
        if backend.name == "cy" and hasattr(select, "EPOLLEXCLUSIVE"):
            # Its sets are exclusive waiters: the one that saw the connection takes it (the
            # pure twin's one shared set shows it again to the next leader).
            assert got[0] is not None
    finally:
        peer.close()
        leader.close()
