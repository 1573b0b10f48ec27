"""The prefork pool policy as a pure function (no fork), the child loop over socketpairs, and
the flup facade's argument checks."""
import mmap
import os
import random
import socket
import threading

import pytest

from flupfast import _impl
from flupfast.scgi_connection import SCGIConnection

from flupfast.serving.prefork import (
    BUSY, EXITING, IDLE, STATUS_BUSY, STATUS_IDLE, ChildBoard, PoolChange, PoolLimits,
    decide_pool_change, notify_parent, serve_child)
from flupfast.limits import FORK_RETIRE_SPACING
from flupfast.server.preforkserver import PreforkServer
from tests.waiting import wait_until

WAIT = 10.0  # generous bound for a child's report on a loaded machine


def simulate(limits, states, steps, rng):
    """Apply the policy repeatedly while children randomly turn busy/idle; new pids grow."""
    next_pid = max(states, default=100) + 1
    for _ in range(steps):
        change = decide_pool_change(states, limits)
        assert not (change.spawn and change.retire)
        for pid in change.retire:
            assert states[pid] == IDLE
            states[pid] = EXITING
        for _ in range(change.spawn):
            states[next_pid] = IDLE
            next_pid += 1
        assert len(states) <= limits.max_children
        yield dict(states)
        # The world moves: exiting children get reaped, others change state.
        for pid in [pid for pid, state in states.items() if state == EXITING]:
            del states[pid]
        for pid, _state in list(states.items()):
            states[pid] = rng.choice((IDLE, BUSY))


def test_starts_with_max_spare_children():
    # flup spawns maxSpare children at start (preforkserver.py:145-146).
    assert decide_pool_change({}, PoolLimits(1, 5, 50)) == PoolChange(spawn=5)
    assert decide_pool_change({}, PoolLimits(2, 2, 6)) == PoolChange(spawn=2)


def test_grows_to_max_children_under_load():
    limits = PoolLimits(min_spare=1, max_spare=2, max_children=6)
    states = {10: IDLE, 11: IDLE}
    for _ in range(20):
        # Each idle child gets a connection (busy); the parent reacts.
        for pid, state in states.items():
            if state == IDLE:
                states[pid] = BUSY
                break
        change = decide_pool_change(states, limits)
        assert not change.retire
        for _ in range(change.spawn):
            states[max(states) + 1] = IDLE
    assert len(states) == 6
    assert all(state == BUSY for state in states.values())
    # Saturated: nothing more to do, even with zero idle children.
    assert decide_pool_change(states, limits) == PoolChange()


def test_spawns_enough_for_min_spare_in_one_step():
    limits = PoolLimits(min_spare=3, max_spare=4, max_children=10)
    states = {pid: BUSY for pid in range(1, 5)}
    assert decide_pool_change(states, limits) == PoolChange(spawn=3)
    # ... but never past max_children.
    states = {pid: BUSY for pid in range(1, 9)}
    assert decide_pool_change(states, limits) == PoolChange(spawn=2)


def test_shrinks_to_max_spare_highest_pids_first():
    limits = PoolLimits(min_spare=1, max_spare=2, max_children=6)
    states = {30: IDLE, 10: IDLE, 50: BUSY, 20: IDLE, 40: IDLE}
    assert decide_pool_change(states, limits) == PoolChange(retire=(30, 40))


def test_exiting_children_count_towards_total_but_are_not_idle():
    limits = PoolLimits(min_spare=1, max_spare=2, max_children=3)
    # Two exiting, one busy: no idle child, but the total is at max_children.
    states = {1: EXITING, 2: EXITING, 3: BUSY}
    assert decide_pool_change(states, limits) == PoolChange()
    states = {1: EXITING, 3: BUSY}
    assert decide_pool_change(states, limits) == PoolChange(spawn=1)


@pytest.mark.parametrize("limits", [
    PoolLimits(1, 1, 1), PoolLimits(1, 2, 6), PoolLimits(2, 5, 50), PoolLimits(3, 3, 4)])
def test_invariants_under_random_load(limits):
    rng = random.Random(1234)
    for states in simulate(limits, {}, 300, rng):
        idle = sum(state == IDLE for state in states.values())
        assert len(states) <= limits.max_children
        assert idle <= limits.max_spare
        # After the step, min_spare idle children exist unless the pool is full.
        assert idle >= limits.min_spare or len(states) == limits.max_children


def test_limits_validation():
    with pytest.raises(ValueError):
        PoolLimits(0, 5, 50)
    with pytest.raises(ValueError):
        PoolLimits(3, 2, 50)
    with pytest.raises(ValueError):
        PoolLimits(1, 5, 4)


# -- flup facade arguments (preforkserver.py:94-119) ---------------------------------------------

def test_facade_validation_messages_match_flup():
    with pytest.raises(ValueError, match=r"^minSpare must be at least 1!$"):
        PreforkServer(minSpare=0)
    with pytest.raises(ValueError, match=r"^maxSpare must be greater than, or equal to, "
                                         r"minSpare!$"):
        PreforkServer(minSpare=3, maxSpare=2)
    message = r"^sockTimeout must be an int or float, greater than or equal to 0$"
    for bad in (-1, "1", None, True):
        with pytest.raises(ValueError, match=message):
            PreforkServer(sockTimeout=bad)


def test_facade_normalises_max_children():
    server = PreforkServer(maxSpare=8, maxChildren=3, sockTimeout=2.5)
    assert server._maxChildren == 8
    assert server._maxSpare == 8 and server._minSpare == 1
    assert server._sockTimeout == 2.5 and server._maxRequests == 0
    assert server._children == {}


# -- the child loop, in-process over socketpairs -------------------------------------------------

class CountingJob:
    """Serves one request per line until EOF or max_requests; returns the count."""
    max_requests = "unset"
    seen_limits = []
    seen_timeouts = []

    def __init__(self, sock, addr, tag):
        self.sock = sock
        self.tag = tag

    def run(self):
        CountingJob.seen_limits.append(self.max_requests)
        CountingJob.seen_timeouts.append(self.sock.gettimeout())
        served = 0
        with self.sock, self.sock.makefile("rwb") as stream:
            for _ in stream:
                stream.write(self.tag + b"\n")
                stream.flush()
                served += 1
                if self.max_requests is not None and served >= self.max_requests:
                    break
        return served


class ListenPair:
    """A real listening socket on a Unix path, non-blocking as the prefork parent makes it."""

    def __init__(self, tmp_path):
        self.path = str(tmp_path / "l.sock")
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(self.path)
        self.sock.listen(8)
        self.sock.setblocking(False)

    def request(self, lines):
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(10)
            client.connect(self.path)
            replies = []
            with client.makefile("rwb") as stream:
                for _ in range(lines):
                    stream.write(b"x\n")
                    stream.flush()
                    replies.append(stream.readline())
            return replies


def recv_exact(sock, size):
    sock.settimeout(10)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _compiled_serve_child():
    from tests.conftest import COMPILED_ERROR, compiled_required
    try:
        from flupfast._speedups import serve_child as compiled
    except ImportError:
        if compiled_required():
            pytest.fail('the compiled backend is required: %s' % COMPILED_ERROR)
        pytest.skip('flupfast._speedups is not built')
    return compiled


@pytest.fixture(params=['py', 'cy'])
def child_loop(request):
    """The child loop of one backend: the pure serve_child or its compiled twin."""
    return serve_child if request.param == 'py' else _compiled_serve_child()


def run_child_loop(tmp_path, max_requests, allowed=lambda addr: True, loop=serve_child,
                   timeout=5.0, board=None):
    listen = ListenPair(tmp_path)
    parent, child = socket.socketpair()
    child.setblocking(False)
    CountingJob.seen_limits = []
    CountingJob.seen_timeouts = []
    thread = threading.Thread(target=loop, args=(
        listen.sock, child, CountingJob, (b"ok",), allowed, max_requests, timeout, board))
    thread.start()
    return listen, parent, child, thread


def stop_child_loop(listen, parent, child, thread):
    """Close the parent's end (the child exits at its EOF), then the rest."""
    parent.close()
    thread.join(10)
    assert not thread.is_alive()
    listen.sock.close()
    child.close()


def test_child_counts_requests_not_connections(tmp_path, child_loop):
    listen, parent, child, thread = run_child_loop(tmp_path, max_requests=3, loop=child_loop)
    try:
        assert listen.request(2) == [b"ok\n", b"ok\n"]
        assert recv_exact(parent, 2) == STATUS_BUSY + STATUS_IDLE
        # One request left: the job is told so and stops after it, then the child retires.
        assert listen.request(1) == [b"ok\n"]
        thread.join(10)
        assert not thread.is_alive()
        assert CountingJob.seen_limits == [3, 1]
        # Busy was reported, idle was not: the child left instead.
        assert recv_exact(parent, 1) == STATUS_BUSY
        parent.setblocking(False)
        with pytest.raises(BlockingIOError):
            parent.recv(1)
    finally:
        for sock in (listen.sock, parent, child):
            sock.close()


def test_child_exits_when_parent_closes_and_checks_allow_list(tmp_path, child_loop):
    seen = []

    def refuse(addr):
        seen.append(addr)
        return False

    listen, parent, child, thread = run_child_loop(tmp_path, 0, allowed=refuse, loop=child_loop)
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(10)
            client.connect(listen.path)
            assert client.recv(1) == b""  # refused: closed without a word
        assert seen == [""]
        parent.close()
        thread.join(10)
        assert not thread.is_alive()
        assert CountingJob.seen_limits == []
    finally:
        listen.sock.close()
        child.close()


def test_child_without_a_check_admits_every_peer(tmp_path, child_loop):
    """``is_client_allowed`` None (the front end admits everybody): served, nothing asked."""
    listen, parent, child, thread = run_child_loop(tmp_path, 0, allowed=None, loop=child_loop)
    try:
        assert listen.request(1) == [b"ok\n"]
    finally:
        stop_child_loop(listen, parent, child, thread)


def test_child_gives_a_tcp_peer_as_accept_does(child_loop):
    """Over TCP the allow-list and the job get the peer's (host, port), as socket.accept()
    gives it (the compiled child accepts in C), and the job's socket is a socket.socket with
    the child's client timeout, its family and type the listener's."""
    seen = []
    listener = socket.socket(socket.AF_INET)
    listener.bind(('127.0.0.1', 0))
    listener.listen(8)
    listener.setblocking(False)
    parent, child = socket.socketpair()
    child.setblocking(False)
    CountingJob.seen_limits, CountingJob.seen_timeouts = [], []

    def allowed(addr):
        seen.append(addr)
        return True
    thread = threading.Thread(target=child_loop, args=(
        listener, child, CountingJob, (b"ok",), allowed, 0, 7.5, None))
    thread.start()
    try:
        with socket.create_connection(listener.getsockname(), timeout=10) as client:
            with client.makefile("rwb") as stream:
                stream.write(b"x\n")
                stream.flush()
                assert stream.readline() == b"ok\n"
            assert seen == [client.getsockname()]
        assert CountingJob.seen_timeouts == [7.5]
    finally:
        parent.close()
        thread.join(10)
        assert not thread.is_alive()
        listener.close()
        child.close()


def test_unlimited_child_tells_job_none(tmp_path, child_loop):
    listen, parent, child, thread = run_child_loop(tmp_path, 0, loop=child_loop)
    try:
        assert listen.request(1) == [b"ok\n"]
        assert recv_exact(parent, 2) == STATUS_BUSY + STATUS_IDLE
        assert CountingJob.seen_limits == [None]
        # sockTimeout > 0 is the accepted socket's timeout (flup made the listener blocking).
        assert CountingJob.seen_timeouts == [5.0]
    finally:
        stop_child_loop(listen, parent, child, thread)


class _OneLine(SCGIConnection):
    """An SCGI connection whose request is one line answered "served" (its ``run`` is
    flupfast's own)."""
    calls = []

    def _serve(self):
        self._sock.recv(64)
        self._sock.sendall(b"served\n")
        self.served = 1


class _OwnRun(_OneLine):
    def run(self):
        _OneLine.calls.append("own run")
        return super().run()


@pytest.mark.parametrize("job_class", [_OneLine, _OwnRun])
def test_child_runs_a_connection_through_its_run(tmp_path, child_loop, monkeypatch, job_class):
    """The compiled child hands a connection whose ``run`` is flupfast's own straight to the
    compiled connection loop (no Python ``run`` frame, so not through _impl.run_scgi); a
    ``run`` of a subclass is called."""
    real = _impl.run_scgi
    monkeypatch.setattr(_impl, "run_scgi", lambda conn: (_OneLine.calls.append("_impl"),
                                                         real(conn))[1])
    _OneLine.calls = []
    listen = ListenPair(tmp_path)
    parent, child = socket.socketpair()
    child.setblocking(False)
    thread = threading.Thread(target=child_loop, args=(
        listen.sock, child, job_class, (object(),), None, 0, None, None))
    thread.start()
    try:
        assert listen.request(1) == [b"served\n"]
        assert recv_exact(parent, 2) == STATUS_BUSY + STATUS_IDLE
    finally:
        stop_child_loop(listen, parent, child, thread)
    compiled = child_loop is not serve_child and _impl._speedups is not None
    expected = (["own run"] if job_class is _OwnRun else []) + \
        ([] if compiled and job_class is _OneLine else ["_impl"])
    assert _OneLine.calls == expected


def test_notify_parent_reports_a_gone_parent():
    parent, child = socket.socketpair()
    with child:
        assert notify_parent(child, STATUS_IDLE) is True
        assert parent.recv(1) == STATUS_IDLE
        parent.close()
        assert notify_parent(child, STATUS_IDLE) is False


# -- the scoreboard: children report in shared memory, waking the parent only when needed ------


def run_board_child(tmp_path, loop, size, min_spare, pool_state=None):
    """A child loop reporting in slot 3 of a ``size``-byte board (``min_spare``, max_spare 5),
    its sibling in slot 0 idle: (shared, listen, parent, child, thread)."""
    import mmap
    from flupfast.serving.prefork import SLOT_UNREPORTED, ChildBoard
    shared = mmap.mmap(-1, size)
    shared[0] = STATUS_IDLE[0]
    shared[3] = SLOT_UNREPORTED
    board = ChildBoard(shared, 3, min_spare, 5, pool_state)
    return (shared,) + run_child_loop(tmp_path, 0, loop=loop, timeout=None, board=board)


def test_board_child_spares_a_full_pools_parent(tmp_path, child_loop):
    """With the pool full (the parent's word), a child going busy wakes the parent neither
    below min_spare (no spawn can help) nor at none idle when the parent has no overload
    guard or will look within PARENT_SAMPLE anyway; it does when that look is further off."""
    import mmap
    import time
    from flupfast.serving.prefork.policy import (
        FULL_AT, NEXT_LOOK, NEXT_LOOK_AT, NO_GUARD_AT, POOL_STATE_SIZE)
    state = mmap.mmap(-1, POOL_STATE_SIZE)
    state[FULL_AT] = 1
    # one idle sibling: going busy leaves 1 idle, below min_spare 3, in a full pool
    shared, listen, parent, child, thread = run_board_child(tmp_path, child_loop, 8, 3, state)
    try:
        wait_until(lambda: shared[3] == STATUS_IDLE[0], WAIT)
        parent.setblocking(False)
        assert listen.request(1) == [b"ok\n"]
        wait_until(lambda: shared[3] == STATUS_IDLE[0], WAIT)
        _assert_no_report(parent)
        shared[0] = STATUS_BUSY[0]  # now this one going busy leaves none idle
        for no_guard, next_look, wakes in ((0, 0.0, False), (1, 60.0, False), (0, 60.0, True)):
            state[NO_GUARD_AT] = no_guard
            NEXT_LOOK.pack_into(state, NEXT_LOOK_AT, time.monotonic() + next_look)
            assert listen.request(1) == [b"ok\n"]
            wait_until(lambda: shared[3] == STATUS_IDLE[0], WAIT)
            if wakes:
                parent.setblocking(True)
                assert recv_exact(parent, 1) == STATUS_BUSY, (no_guard, next_look)
                parent.setblocking(False)
            else:
                _assert_no_report(parent)
        state[FULL_AT] = 0  # not full: none idle always wakes it
        NEXT_LOOK.pack_into(state, NEXT_LOOK_AT, time.monotonic())
        assert listen.request(1) == [b"ok\n"]
        parent.setblocking(True)
        assert recv_exact(parent, 1) == STATUS_BUSY
    finally:
        stop_child_loop(listen, parent, child, thread)


def test_board_child_reports_in_its_slot_and_stays_quiet(tmp_path, child_loop):
    # the idle sibling: going busy leaves min_spare=1 idle
    shared, listen, parent, child, thread = run_board_child(tmp_path, child_loop, 8, 1)
    try:
        wait_until(lambda: shared[3] == STATUS_IDLE[0], WAIT)
        assert listen.request(2) == [b"ok\n", b"ok\n"]
        wait_until(lambda: shared[3] == STATUS_IDLE[0], WAIT)
        parent.setblocking(False)
        with pytest.raises(BlockingIOError):
            parent.recv(1)  # idle count stayed within [min_spare, max_spare]: no wake-up
        # The sibling turns busy: now this child's request leaves no idle child, so it wakes
        # the parent when it turns busy (and not when it is idle again: 1 idle is enough).
        shared[0] = STATUS_BUSY[0]
        assert listen.request(1) == [b"ok\n"]
        assert recv_exact(parent, 1) == STATUS_BUSY
        wait_until(lambda: shared[3] == STATUS_IDLE[0], WAIT)
        parent.setblocking(False)
        with pytest.raises(BlockingIOError):
            parent.recv(1)
        # Too many idle siblings: turning idle wakes the parent so it can retire some.
        for slot in (0, 1, 2, 4, 5):
            shared[slot] = STATUS_IDLE[0]
        assert listen.request(1) == [b"ok\n"]
        assert recv_exact(parent, 1) == STATUS_IDLE
    finally:
        stop_child_loop(listen, parent, child, thread)


def _assert_no_report(parent):
    try:
        data = parent.recv(16)
    except BlockingIOError:
        return
    raise AssertionError("the child reported %r" % data)


def test_board_child_wakes_the_parent_at_a_crossing_not_past_it(tmp_path, child_loop):
    """Past a line (below min_spare but some idle; above max_spare + 1) the parent, which
    reads the whole board when it wakes, was told already: no wake-up per request."""
    # one idle sibling: busy leaves 1 idle, min_spare 3
    shared, listen, parent, child, thread = run_board_child(tmp_path, child_loop, 16, 3)
    try:
        wait_until(lambda: shared[3] == STATUS_IDLE[0], WAIT)
        parent.setblocking(False)
        try:  # the first report (idle 2 < min_spare 3) may or may not have crossed: drain
            parent.recv(16)
        except BlockingIOError:
            pass
        assert listen.request(2) == [b"ok\n", b"ok\n"]
        wait_until(lambda: shared[3] == STATUS_IDLE[0], WAIT)
        _assert_no_report(parent)  # 1 idle while busy: below min_spare, but not a crossing
        for slot in (4, 5, 6, 7, 8, 9, 10):  # 8 idle with this one: past max_spare + 1
            shared[slot] = STATUS_IDLE[0]
        assert listen.request(1) == [b"ok\n"]
        wait_until(lambda: shared[3] == STATUS_IDLE[0], WAIT)
        _assert_no_report(parent)
        shared[0] = STATUS_BUSY[0]  # now this one turning busy leaves none idle: a crossing
        for slot in (4, 5, 6, 7, 8, 9, 10):
            shared[slot] = STATUS_BUSY[0]
        assert listen.request(1) == [b"ok\n"]
        parent.setblocking(True)
        assert recv_exact(parent, 1) == STATUS_BUSY
    finally:
        stop_child_loop(listen, parent, child, thread)


def test_parent_reads_board_and_falls_back_to_status_bytes():
    import mmap
    from flupfast.serving.prefork import SLOT_UNREPORTED, ChildRecord, PreforkMode
    mode = PreforkMode(CountingJob, min_spare=1, max_spare=2, max_children=4)
    mode._board = mmap.mmap(-1, 4)
    try:
        mode.children = {
            10: ChildRecord(10, None, IDLE, slot=0),   # reports on the board
            11: ChildRecord(11, None, BUSY, slot=1),   # never wrote its slot: status bytes
            12: ChildRecord(12, None, EXITING, slot=2),
        }
        mode._board[0] = STATUS_BUSY[0]
        mode._board[1] = SLOT_UNREPORTED
        mode._board[2] = STATUS_IDLE[0]
        mode._read_board()
        assert {pid: c.state for pid, c in mode.children.items()} == {
            10: BUSY, 11: BUSY, 12: EXITING}
        assert mode._free_slot() == 3
    finally:
        mode._board.close()


def _tended_pool(monkeypatch, children, max_children):
    """A PreforkMode (min_spare 1, max_spare 2) with ``children`` idle children, a clock the
    test moves (``now[0]``), retirements recorded and no spawn allowed: (mode, now, retired)."""
    from flupfast.serving.prefork import arbiter as prefork
    from flupfast.serving.prefork import ChildRecord, PreforkMode
    now = [1000.0]
    monkeypatch.setattr(prefork.time, 'monotonic', lambda: now[0])
    mode = PreforkMode(object, min_spare=1, max_spare=2, max_children=max_children)
    retired = []

    def retire_child(pid):  # as the parent's: the child is exiting from then on
        retired.append(pid)
        mode.children[pid].state = EXITING
    monkeypatch.setattr(mode, 'retire_child', retire_child)
    monkeypatch.setattr(mode, 'spawn_child', lambda sock: pytest.fail('no spawn expected'))
    mode.children = {pid: ChildRecord(pid, None) for pid in range(1, children + 1)}
    return mode, now, retired


def test_idle_children_above_max_spare_retire_only_once_the_excess_lasts(monkeypatch):
    """Under load the idle count swings past maxSpare between requests: the parent retires
    the extras only when the excess has lasted FORK_RETIRE_DELAY, not at the first sight of it
    (retiring at once and forking again a moment later churned the pool)."""
    from flupfast.limits import FORK_RETIRE_DELAY
    mode, now, retired = _tended_pool(monkeypatch, 5, max_children=6)  # 5 idle, max 2

    mode._tend_pool(None)  # the excess is first seen: nothing yet
    now[0] += FORK_RETIRE_DELAY / 2
    mode._tend_pool(None)
    assert retired == []
    # A request takes children: the excess ends, and its clock with it.
    for pid in (1, 2, 3):
        mode.children[pid].state = BUSY
    mode._tend_pool(None)
    for pid in (1, 2, 3):
        mode.children[pid].state = IDLE
    now[0] += FORK_RETIRE_DELAY * 0.9
    mode._tend_pool(None)  # a new excess: its own clock starts
    now[0] += FORK_RETIRE_DELAY * 0.9
    mode._tend_pool(None)
    assert retired == []
    now[0] += FORK_RETIRE_DELAY * 0.2
    mode._tend_pool(None)
    assert retired == [5]  # the extras above maxSpare, highest pid first, one at a time
    for _ in range(2):
        now[0] += FORK_RETIRE_SPACING * 1.1
        mode._tend_pool(None)
    assert retired == [5, 4, 3]


def test_extras_retire_one_at_a_time_a_spacing_apart(monkeypatch):
    """A child's exit copies the pages it inherited (the interpreter's teardown writes to every
    object): after a burst the extras go one per FORK_RETIRE_SPACING, not all at once."""
    from flupfast.limits import FORK_RETIRE_DELAY
    mode, now, retired = _tended_pool(monkeypatch, 6, max_children=6)  # 6 idle: 4 extra
    mode._tend_pool(None)
    now[0] += FORK_RETIRE_DELAY
    mode._tend_pool(None)
    assert retired == [6]
    assert 0 < mode._excess_timeout(1.0) <= FORK_RETIRE_SPACING  # the parent wakes for it
    now[0] += FORK_RETIRE_SPACING * 0.6
    mode._tend_pool(None)
    assert retired == [6]
    now[0] += FORK_RETIRE_SPACING * 0.5
    mode._tend_pool(None)
    assert retired == [6, 5]
    mode.children[1].state = BUSY  # a request: one extra fewer, so one retirement fewer
    now[0] += FORK_RETIRE_SPACING * 1.1
    mode._tend_pool(None)
    assert retired == [6, 5, 4]
    mode.children[1].state = IDLE
    now[0] += FORK_RETIRE_SPACING * 1.1
    mode._tend_pool(None)
    assert retired == [6, 5, 4] and mode._excess is not None  # a new excess waits the delay


def test_only_the_children_idle_through_the_whole_delay_retire(monkeypatch):
    """An idle count swinging above maxSpare retires the fewest extras seen over the delay,
    not the count of its last moment: children idle for only part of it were working."""
    from flupfast.limits import FORK_RETIRE_DELAY
    mode, now, retired = _tended_pool(monkeypatch, 7, max_children=8)  # 7 idle: 5 extra

    mode._tend_pool(None)
    now[0] += FORK_RETIRE_DELAY / 2
    for pid in (1, 2, 3, 4):  # busy a while: 3 idle, one above maxSpare
        mode.children[pid].state = BUSY
    mode._tend_pool(None)
    for pid in (1, 2, 3, 4):
        mode.children[pid].state = IDLE
    now[0] += FORK_RETIRE_DELAY / 2
    mode._tend_pool(None)
    assert retired == [7]


def test_the_parent_watches_the_scoreboard_while_an_excess_waits(monkeypatch):
    """Children wake the parent only when the idle count crosses a bound; while an excess
    waits out FORK_RETIRE_DELAY the parent looks every EXCESS_CHECK, so a dip back is seen."""
    from flupfast.limits import FORK_RETIRE_DELAY
    from flupfast.serving.prefork import EXCESS_CHECK
    mode, now, _ = _tended_pool(monkeypatch, 4, max_children=6)
    assert mode._excess_timeout(1.0) == 1.0  # no excess pending: the tick
    mode._tend_pool(None)
    assert mode._excess_timeout(1.0) == EXCESS_CHECK
    now[0] += FORK_RETIRE_DELAY - EXCESS_CHECK / 2
    assert mode._excess_timeout(1.0) == pytest.approx(EXCESS_CHECK / 2)


def test_the_parent_tells_its_children_when_it_looks_next(monkeypatch):
    """After a look finds a full pool exhausted the parent looks every PARENT_SAMPLE for
    BUSY_SPAN, after one finds an excess every EXCESS_CHECK; each wait is written to the pool
    state, where the children read that a wake-up is not needed (ChildBoard)."""
    import mmap
    from flupfast.serving.prefork.policy import (
        BUSY_SPAN, EXCESS_CHECK, FULL_AT, NEXT_LOOK, NEXT_LOOK_AT, NO_GUARD_AT, PARENT_SAMPLE,
        POOL_STATE_SIZE)
    mode, now, _ = _tended_pool(monkeypatch, 2, max_children=2)
    mode._pool_state = state = mmap.mmap(-1, POOL_STATE_SIZE)

    def next_look():
        return NEXT_LOOK.unpack_from(state, NEXT_LOOK_AT)[0] - now[0]
    assert mode._sampling_timeout(1.0) == 1.0  # not full: the tick
    assert next_look() == pytest.approx(1.0)
    state[FULL_AT] = 1
    assert mode._sampling_timeout(1.0) == 1.0  # full, but a child is idle
    for child in mode.children.values():
        child.state = BUSY
    assert mode._sampling_timeout(1.0) == PARENT_SAMPLE
    assert next_look() == pytest.approx(PARENT_SAMPLE)
    assert state[NO_GUARD_AT] == 0
    for child in mode.children.values():
        child.state = IDLE
    now[0] += BUSY_SPAN / 2
    assert mode._sampling_timeout(1.0) == PARENT_SAMPLE  # a child free: still sampling
    now[0] += BUSY_SPAN
    assert mode._sampling_timeout(1.0) == 1.0
    mode._excess = (now[0], 1)
    assert mode._sampling_timeout(1.0) == EXCESS_CHECK
    mode._excess = None
    now[0] += BUSY_SPAN / 2
    assert mode._sampling_timeout(1.0) == EXCESS_CHECK
    assert next_look() == pytest.approx(EXCESS_CHECK)
    mode.overload_wait = None
    mode._sampling_timeout(1.0)
    assert state[NO_GUARD_AT] == 1


# -- the retire hysteresis as a pure function ---------------------------------------------------

def test_retire_waits_out_the_delay_and_takes_the_fewest_extras_seen():
    from flupfast.limits import FORK_RETIRE_DELAY
    from flupfast.serving.prefork import retire_after_delay
    retire, excess = retire_after_delay((7, 8, 9), None, 100.0)
    assert retire == () and excess == (100.0, 3)
    retire, excess = retire_after_delay((8,), excess, 100.5)  # a dip: one extra only
    assert retire == () and excess == (100.0, 1)
    retire, excess = retire_after_delay((7, 8, 9), excess, 100.0 + FORK_RETIRE_DELAY)
    assert retire == (9,) and excess is None
    assert retire_after_delay((), (100.0, 2), 200.0) == ((), None)  # the excess ended


def test_importing_the_codecs_loads_nothing_of_the_serving_layer():
    """The pure codecs stand alone: with FLUPFAST_SPEEDUPS=0, _impl must not load the prefork
    child loop (the pure twin) until somebody asks for it."""
    import subprocess
    import sys
    code = ("import sys, flupfast.protocols.fastcgi, flupfast.protocols.scgi, "
            "flupfast.protocols.ajp, flupfast.protocols.ajp_webserver, flupfast.protocols.uwsgi, "
            "flupfast._impl as impl; "
            "print(sorted(m for m in sys.modules if m.startswith('flupfast.serving'))); "
            "impl.serve_child; print('flupfast.serving.prefork.child' in sys.modules)")
    env = dict(os.environ, FLUPFAST_SPEEDUPS='0')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env,
                         timeout=60, check=True).stdout.split('\n')
    assert out[:2] == ['[]', 'True']


class FlupEraJob(CountingJob):
    """A connection of flup's time: its run() returns nothing."""

    def run(self):
        CountingJob.run(self)


def test_a_run_that_returns_none_counts_one_request(tmp_path, child_loop):
    """flup's connections' run() returns None: with a request limit the child counts one per
    connection and retires at the limit (found in review: it died of a TypeError after every
    connection, and the parent forked a new one each time)."""
    listen = ListenPair(tmp_path)
    parent, child = socket.socketpair()
    child.setblocking(False)
    CountingJob.seen_limits = []
    thread = threading.Thread(target=child_loop, args=(
        listen.sock, child, FlupEraJob, (b"ok",), None, 2, 5.0, None))
    thread.start()
    try:
        assert listen.request(1) == [b"ok\n"]
        assert listen.request(1) == [b"ok\n"]
        thread.join(10)
        assert not thread.is_alive()  # retired after its two, not dead after its first
        assert CountingJob.seen_limits == [2, 1]
    finally:
        for sock in (listen.sock, parent, child):
            sock.close()


@pytest.mark.parametrize('answer, counted', [(None, 1), (3, 3), (True, 1)])
def test_served_count(answer, counted):
    from flupfast.serving.prefork.child import served_count
    assert served_count(answer) == counted
    with pytest.raises(TypeError):
        served_count(1.0)


class _LyingBuffer(bytearray):
    """A board whose len() says more than the memory it exports."""

    def __len__(self):
        return 1 << 20


class _BoardWithout(ChildBoard):
    """A board whose pool_state cannot be read (max_spare 0: the first idle report asks it)."""
    __slots__ = ()

    def __init__(self, buffer, slot):
        self.buffer, self.slot, self.min_spare, self.max_spare = buffer, slot, 0, 0

    @property
    def pool_state(self):
        raise RuntimeError('no pool state')


def test_a_slot_outside_the_boards_memory_is_refused(tmp_path, child_loop):
    """The slot is checked against the memory the board exports, not its len() (found in
    review: the compiled loop wrote outside it)."""
    listen = ListenPair(tmp_path)
    parent, child = socket.socketpair()
    try:
        board = ChildBoard(_LyingBuffer(4), 1000, 1, 5)
        with pytest.raises((ValueError, IndexError)):
            child_loop(listen.sock, child, CountingJob, (b"ok",), None, 0, 5.0, board)
    finally:
        for sock in (listen.sock, parent, child):
            sock.close()


def test_a_board_that_fails_to_read_leaves_its_memory_free(tmp_path, child_loop):
    """A board attribute that raises leaves no buffer exported (found in review: the mmap
    could no longer be closed)."""
    listen = ListenPair(tmp_path)
    parent, child = socket.socketpair()
    shared = mmap.mmap(-1, 8)
    try:
        with pytest.raises(RuntimeError, match='no pool state'):
            child_loop(listen.sock, child, CountingJob, (b"ok",), None, 0, 5.0,
                       _BoardWithout(shared, 0))
        shared.close()  # BufferError if a view were still exported
    finally:
        for sock in (listen.sock, parent, child):
            sock.close()
