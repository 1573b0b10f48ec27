"""Parking in the threaded mode (flupfast/serving/parking.py): kept FastCGI connections idle
between requests hold no thread, pipelined requests are served before a connection parks, a
parked connection the peer closes is closed and forgotten, a stop closes parked connections at
once, and a ready connection is not left waiting behind a worker busy with a long request.
Runs on both backends; nothing depends on timing beyond "eventually" and generous bounds.
"""
import collections
import os
import select
import socket
import threading
import time
import types

import pytest

from flupfast import sockio
from flupfast.serving import parking
from flupfast.serving.job import Job, wait
from flupfast.serving.threaded import ThreadedMode
from flupfast.server import fcgi_base
from tests.fcgi_client import read_response, request_bytes
from tests.unit.connection_harness import FASTCGI_TWINS, use_twins
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(not parking.supported(), reason="no epoll")
WAIT = 30.0  # generous bound for wait_until on a loaded 2-core machine

SLOW = threading.Event()


def app(environ, start_response):
    if environ['PATH_INFO'] == '/slow':
        SLOW.wait(30)
    start_response('200 OK', [('Content-Type', 'text/plain')])
    return [b'hello ' + environ['PATH_INFO'].encode()]


@pytest.fixture
def served(backend, monkeypatch, tmp_path):
    """A ThreadedMode (parking on) serving FastCGI on a Unix socket in a thread:
    (mode, connect)."""
    use_twins(monkeypatch, backend, FASTCGI_TWINS + ('epoll_arm', 'epoll_ready_now'))
    SLOW.clear()
    server = fcgi_base.BaseFCGIServer(app)
    address = str(tmp_path / 'p.sock')
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(address)
    listener.listen(64)
    modes = []

    def make(**pool):
        pool = pool or {'min_spare': 1, 'max_spare': 5}
        mode = ThreadedMode(server._connectionClass, (server, None), **pool)
        thread = threading.Thread(target=mode.serve, args=(listener, 0.05), daemon=True)
        thread.start()
        modes.append((mode, thread))
        wait_until(lambda: mode.parked.open, WAIT)
        return mode

    socks = []

    def connect():
        sock = socket.socket(socket.AF_UNIX)
        sock.settimeout(30)
        sock.connect(address)
        socks.append(sock)
        return sock

    yield make, connect
    SLOW.set()
    for mode, thread in modes:
        mode.shutdown(5)
        thread.join(10)
    listener.close()
    for sock in socks:
        sock.close()


def ask(sock, uri='/', request_id=1):
    sock.sendall(request_bytes(uri, keep_conn=True, request_id=request_id))
    return read_response(sock, request_id, timeout=30)


def test_idle_kept_connections_hold_no_thread(served):
    make, connect = served
    mode = make()
    socks = [connect() for _ in range(12)]
    for round_ in range(3):
        for i, sock in enumerate(socks):
            assert ask(sock, '/%d-%d' % (round_, i)).body == b'hello /%d-%d' % (round_, i)
    # All twelve parked: no worker busy, none blocked in recv.
    wait_until(lambda: len(mode.parked._parked) == 12, WAIT)
    wait_until(lambda: mode.pool.busy_threads() == 0, WAIT)
    assert mode.pool.worker_count <= 5


def test_one_thread_serves_many_kept_connections(served):
    make, connect = served
    make(min_spare=1, max_spare=1, max_threads=1)
    socks = [connect() for _ in range(4)]
    for round_ in range(3):
        for sock in socks:  # each served, then parked: the next one gets the thread
            assert ask(sock).end == (0, 0)
    for sock in socks:
        assert ask(sock).end == (0, 0)  # none was ended to free the thread


def test_pipelined_requests_are_served_before_parking(served):
    make, connect = served
    make()
    sock = connect()
    sock.sendall(request_bytes('/a', keep_conn=True, request_id=1)
                 + request_bytes('/b', keep_conn=True, request_id=2))
    assert read_response(sock, 1, timeout=30).body == b'hello /a'
    assert read_response(sock, 2, timeout=30).body == b'hello /b'
    assert ask(sock, '/c').body == b'hello /c'


def _open_fds():
    return len(os.listdir('/proc/self/fd'))


def test_parked_connection_closed_by_the_peer_is_closed_and_forgotten(served):
    make, connect = served
    mode = make()
    assert ask(connect()).end == (0, 0)  # warm up: pool threads, epoll, buffers
    baseline = _open_fds()
    for _ in range(50):
        sock = connect()
        assert ask(sock).end == (0, 0)
        sock.close()
    wait_until(lambda: len(mode.parked._parked) <= 1, WAIT)
    wait_until(lambda: _open_fds() <= baseline, WAIT)


def test_ready_connection_is_served_while_a_worker_runs_a_long_request(served):
    make, connect = served
    make()
    slow, quick = connect(), connect()
    assert ask(quick).end == (0, 0)  # parked
    slow.sendall(request_bytes('/slow', keep_conn=True))
    time.sleep(0.1)
    started = time.monotonic()
    assert ask(quick, '/q').body == b'hello /q'
    assert time.monotonic() - started < 5  # not behind the long request
    SLOW.set()
    assert read_response(slow, timeout=30).body == b'hello /slow'


def test_shutdown_closes_parked_connections_at_once(served):
    make, connect = served
    mode = make()
    socks = [connect() for _ in range(3)]
    for sock in socks:
        assert ask(sock).end == (0, 0)
    wait_until(lambda: len(mode.parked._parked) == 3, WAIT)
    started = time.monotonic()
    mode.shutdown(5)
    assert time.monotonic() - started < 2  # not the grace
    for sock in socks:
        assert sock.recv(10) == b''


class _Tracked:
    """What ParkedSet.park needs of a _TrackedJob."""

    def __init__(self, sock):
        self.client = sock
        self.fd = sock.fileno()
        self.registered = False
        self.park_token = None


class _ArmHook:
    """The set's epoll, with a hook run right after each successful register/modify: the
    moment epoll_ctl has armed the connection and the parking thread waits for the GIL."""

    def __init__(self, epoll, after_arm):
        self._epoll = epoll
        self._after_arm = after_arm

    def register(self, fd, mask):
        self._epoll.register(fd, mask)
        self._after_arm()

    def modify(self, fd, mask):
        self._epoll.modify(fd, mask)
        self._after_arm()

    def __getattr__(self, name):
        return getattr(self._epoll, name)


def test_connection_parked_again_by_another_thread_inside_the_first_park(monkeypatch):
    """Python's epoll_ctl releases the GIL: once a connection is armed, another worker may
    take it, serve its next request and park it again before the parking thread has run
    another line. The second park must re-arm, not register again: that failed with EEXIST
    and the connection was closed under the web server (resets behind 16 kept connections).
    (The pure twin's arm, whose Python calls the hook can see; the compiled one keeps the GIL
    and cannot be entered so.)"""
    monkeypatch.setattr(parking._impl, 'epoll_arm', sockio.epoll_arm)
    ours, peer = socket.socketpair()
    epoll = select.epoll()
    parked = parking.ParkedSet(hand_off=lambda tracked: None)
    tracked = _Tracked(ours)
    nested = []

    def another_worker():
        if nested:
            return
        nested.append(True)
        peer.send(b'next request')
        events = epoll.poll(5)
        assert [fd for fd, _ in events] == [tracked.fd]
        assert parked._own(tracked, tracked.park_token)
        assert ours.recv(100) == b'next request'
        nested.append(parked.park(tracked))

    parked._epoll = _ArmHook(epoll, another_worker)
    parked.open = True
    try:
        assert parked.park(tracked)
        assert nested == [True, True]
        peer.send(b'one more')  # still watched, armed once
        assert [fd for fd, _ in epoll.poll(5)] == [tracked.fd]
        assert parked._parked == {tracked.fd: tracked}
    finally:
        parked.open = False
        epoll.close()
        ours.close()
        peer.close()


@pytest.mark.parametrize('flag_says_registered', [True, False])
def test_park_completes_whatever_the_registered_flag_guessed(flag_says_registered):
    """The job's ``registered`` flag is a guess at what epoll holds: a wrong one costs a
    second epoll_ctl, never the connection."""
    ours, peer = socket.socketpair()
    parked = parking.ParkedSet(hand_off=lambda tracked: None)
    parked._epoll = epoll = select.epoll()
    parked.open = True
    tracked = _Tracked(ours)
    try:
        if not flag_says_registered:
            epoll.register(tracked.fd, 0)  # in the set, though the flag says not
        tracked.registered = flag_says_registered
        assert parked.park(tracked)
        peer.send(b'request')
        assert [fd for fd, _ in epoll.poll(5)] == [tracked.fd]
    finally:
        parked.open = False
        epoll.close()
        ours.close()
        peer.close()


@pytest.fixture
def bare_set(backend, monkeypatch):
    """A ParkedSet with its epoll and no waiter thread (the test plays the waiter), and a
    factory of parked socket pairs: (parked, park) where park() -> (tracked, peer)."""
    monkeypatch.setattr(parking._impl, 'epoll_arm', backend.epoll_arm)
    monkeypatch.setattr(parking._impl, 'epoll_ready_now', backend.epoll_ready_now)
    parked = parking.ParkedSet(hand_off=lambda tracked: None)
    parked._epoll = select.epoll()
    parked.open = True
    socks = []

    def park():
        ours, peer = socket.socketpair()
        socks.extend((ours, peer))
        tracked = _Tracked(ours)
        assert parked.park(tracked)
        return tracked, peer
    yield parked, park
    parked.open = False
    parked._epoll.close()
    for sock in socks:
        sock.close()


def _take_in_thread(parked, out, enter=True):
    def worker():
        if enter:
            parked.enter()
        out.append(parked.take_ready())
    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    return thread


def test_a_connection_the_waiter_finds_ready_wakes_the_worker_waiting_on_the_set(
        bare_set, monkeypatch):
    """One-shot: a readiness goes to whoever polls first. When that is the waiter while a
    worker waits on the set, the worker must still get the connection now, not after its
    linger (it slept through it, and behind nginx the whole server stalled)."""
    parked, park = bare_set
    monkeypatch.setattr(parking, 'LINGER', 60.0)
    tracked, peer = park()
    peer.send(b'request')
    assert [fd for fd, _ in parked._epoll.poll(5)] == [tracked.fd]  # the waiter's poll
    out = []
    thread = _take_in_thread(parked, out)  # the last worker running: waits LINGER on the set
    wait_until(lambda: parked._polling == 1, WAIT, 'the worker waiting on the set')
    assert parked._offer([(tracked, tracked.park_token)]) == []  # back in the set, armed
    thread.join(WAIT)
    assert out == [tracked]
    assert parked._offered == collections.deque()


def test_what_the_waiter_finds_while_no_worker_waits_on_the_set_is_offered(bare_set):
    parked, park = bare_set
    tracked, peer = park()
    ready = [(tracked, tracked.park_token)]
    assert parked._offer(ready) == ready
    parked.enter()
    assert parked.take_ready() is tracked  # a worker back from a request takes it first


def test_one_worker_takes_ready_connections_while_the_chains_owner_runs_short_requests(
        bare_set, monkeypatch):
    """Workers that end a request while another one takes ready connections go back to the
    pool (one thread serving back to back, not several queueing for the GIL); once the
    owner has been in a request longer than CHAIN_HANDOVER (it waits: a backend, a sleep),
    the next one takes over."""
    parked, park = bare_set
    clock = [100.0]
    monkeypatch.setattr(parking, 'monotonic', lambda: clock[0])
    first, first_peer = park()
    second, second_peer = park()
    first_peer.send(b'request')
    second_peer.send(b'request')
    parked.enter()
    parked.enter()
    assert parked.take_ready() in (first, second)  # this thread owns the chain, in a request
    out = []
    _take_in_thread(parked, out, enter=False).join(WAIT)
    assert out == [None]  # the owner's request has just begun: the other goes back
    clock[0] += parking.CHAIN_HANDOVER * 2
    _take_in_thread(parked, out, enter=False).join(WAIT)
    assert out[1] in (first, second) and out[1] is not out[0]  # a long request: taken over
    assert parked._chain[0] not in (None, threading.get_ident())


def test_a_worker_that_leaves_the_set_gives_up_the_chain(bare_set):
    parked, park = bare_set
    tracked, peer = park()
    peer.send(b'request')
    parked.enter()
    assert parked.take_ready() is tracked
    assert parked._chain[0] == threading.get_ident()
    parked.leave()
    assert parked._chain == (None, None)


def test_a_worker_about_to_wait_on_the_set_takes_the_waiters_offers_instead(bare_set):
    """The waiter may offer between a worker's look at the offers and its wait on the set:
    under the lock, the wait is not begun then."""
    parked, park = bare_set
    tracked, peer = park()
    parked._offered.append((tracked, tracked.park_token))
    started = time.monotonic()
    assert parked._poll(60.0) is None
    assert time.monotonic() - started < 30 and parked._polling == 0


def test_a_connection_the_waiter_cannot_put_back_goes_to_the_pool(bare_set, monkeypatch):
    parked, park = bare_set
    given = []
    parked._hand_off = given.append
    tracked, peer = park()
    parked._polling = 1

    def refuse(*args):
        raise OSError("epoll_ctl failed")
    monkeypatch.setattr(parked, '_arm', refuse)
    assert parked._offer([(tracked, tracked.park_token)]) == []
    assert given == [tracked] and tracked.fd not in parked._parked


def test_a_job_that_cannot_park_bypasses_the_parked_set():
    """SCGI's one request and AJP's connection never park: their worker must not wait on the
    parked set after the job (the last one running would linger there 20 ms, counted busy)."""
    from flupfast.serving.threaded import _TrackedJob

    class NeverParks(Job):
        ran = False

        def run(self):
            self.ran = True
            return 1

    class Recording:
        def __getattr__(self, name):
            raise AssertionError('the parked set was used: %s' % name)

    ours, peer = socket.socketpair()
    try:
        job = NeverParks()
        active = set()
        mode = types.SimpleNamespace(idle_answers=(wait, None))  # the mode's two answers
        tracked = _TrackedJob(job, ours, active, mode=mode, parked=Recording(), pool=None)
        active.add(tracked)
        assert tracked.run() == 1
        assert job.ran and not active
        assert job.on_idle is wait  # the mode's answer without the parked set
        assert tracked._parked is None  # never to be told PARK
    finally:
        ours.close()
        peer.close()


def test_a_served_job_is_freed_by_reference_counting():
    """The mode's idle answer stored on a job holds no reference back to its _TrackedJob: a
    job <-> tracked cycle per connection was left to the garbage collector (a collection
    every ~150 new connections, ~4k instructions per request)."""
    import gc
    import weakref

    from flupfast.serving.threaded import _TrackedJob

    class Once(Job):
        def run(self):
            return 1

    mode = ThreadedMode(Once, pool=object(), parking=False)
    ours, peer = socket.socketpair()
    gc.disable()
    try:
        job = Once()
        tracked = _TrackedJob(job, ours, set(), mode)
        assert tracked.run() == 1
        assert job.on_idle == mode._idle_answer
        gone = weakref.ref(job)
        del job, tracked
        assert gone() is None
    finally:
        gc.enable()
        ours.close()
        peer.close()


def test_the_last_worker_leaving_wakes_a_waiting_waiter_and_only_then_notifies():
    """leave() notifies the waiter (so it watches the set itself again) when it waits on the
    condition, and skips Condition.notify's Python code after every connection otherwise."""
    parked = parking.ParkedSet(hand_off=lambda tracked: None)
    notified = []
    parked.enter()
    parked.enter()

    def waiter():
        with parked._cond:
            parked._waiter_waits = True
            notified.append(parked._cond.wait(30))
            parked._waiter_waits = False
    thread = threading.Thread(target=waiter)
    thread.start()
    try:
        wait_until(lambda: parked._cond._waiters, 10, 'the waiter on the condition')
        parked.leave()  # one worker still runs: no notify
        assert not notified
        parked.leave()
        thread.join(10)
        assert notified == [True]
    finally:
        with parked._cond:
            parked._cond.notify_all()
        thread.join(10)
    notifies = []
    parked._cond.notify = lambda *a: notifies.append(a)
    parked.enter()
    parked.leave()  # the waiter is not waiting: nothing to notify
    assert notifies == []


def test_epoll_arm_and_ready_now_twins_agree(backend):
    """Arm (either guess), report once (one-shot), re-arm; ready_now never waits; a closed set
    raises ValueError as Python's epoll methods do."""
    ours, peer = socket.socketpair()
    epoll = select.epoll()
    try:
        assert backend.epoll_ready_now(epoll) == -1
        backend.epoll_arm(epoll, ours.fileno(), parking.PARKED_MASK, True)  # wrong guess: new
        peer.send(b'x')
        assert backend.epoll_ready_now(epoll) == ours.fileno()
        assert backend.epoll_ready_now(epoll) == -1  # one-shot: reported once
        backend.epoll_arm(epoll, ours.fileno(), parking.PARKED_MASK, False)  # wrong: re-arm
        assert backend.epoll_ready_now(epoll) == ours.fileno()
        backend.epoll_arm(epoll, ours.fileno(), parking.PARKED_MASK, True)
        assert backend.epoll_ready_now(epoll) == ours.fileno()
        with pytest.raises(OSError):
            backend.epoll_arm(epoll, 10 ** 6, parking.PARKED_MASK, False)  # no such fd
    finally:
        epoll.close()
        ours.close()
        peer.close()
    with pytest.raises(ValueError):
        backend.epoll_ready_now(epoll)
    with pytest.raises(ValueError):
        backend.epoll_arm(epoll, 0, parking.PARKED_MASK, True)
