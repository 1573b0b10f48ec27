"""The prefork parent (the arbiter): forks children, tracks their states from the scoreboard and
their status bytes, applies the pool policy, retires, reaps, and shuts down within bounds. It
must not know the protocol, run the app, wait on a peer, or leave a child unreaped.
"""
import errno
import gc
import logging
import mmap
import os
import random
import select
import selectors
import signal
import socket
import sys
import time

from flupfast import _impl
from flupfast.limits import (
    FORK_DRAIN_GRACE, FORK_INTERRUPT_GRACE, FORK_KILL_WAIT, FORK_OVERLOAD_WAIT, FORK_RETIRE_DELAY,
    FORK_SPAWN_BACKOFF, FORK_TERM_GRACE)
from flupfast.serving.job import JobSource
from flupfast.serving.listen import set_cloexec
from flupfast.serving.prefork.child import (
    DRAIN_SIGNAL, EXIT_REQUEST_TIMEOUT, ChildBoard, ChildDrain)
from flupfast.serving.prefork.overload import OverloadGuard
from flupfast.serving.prefork.policy import (
    BUSY, BUSY_SPAN, EXCESS_CHECK, EXITING, FULL_AT, IDLE, NEXT_LOOK, NEXT_LOOK_AT, NO_GUARD_AT,
    PARENT_SAMPLE, POOL_STATE_SIZE, REAP_POLL, SLOT_EMPTY, SLOT_UNREPORTED, STATUS_BUSY,
    STATUS_IDLE, PoolLimits, child_request_limit, decide_pool_change, retire_after_delay)
from flupfast.serving.prefork.recycle import MemoryWatch
from flupfast.serving.signals import LoopControl

__all__ = ["ChildRecord", "PreforkMode"]

logger = logging.getLogger("flupfast")


def _hold_drain_signal():
    """Block DRAIN_SIGNAL in this thread for a fork: the child starts with it blocked and
    sets its disposition (_become_child) before it takes it, so a drain sent to a child just
    born does not end it by the signal's default action. Returns the function that lets it
    through again in the parent."""
    if DRAIN_SIGNAL is None or DRAIN_SIGNAL in signal.pthread_sigmask(
            signal.SIG_BLOCK, (DRAIN_SIGNAL,)):
        return _nothing
    return _release_drain_signal


def _release_drain_signal():
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (DRAIN_SIGNAL,))


def _nothing():
    pass


class ChildRecord:
    """The parent's view of one child: its end of the status socketpair and its state."""
    __slots__ = ("pid", "sock", "state", "slot")

    def __init__(self, pid, sock, state=IDLE, slot=None):
        self.pid = pid
        self.sock = sock
        self.state = state
        self.slot = slot  # its byte on the scoreboard, or None

    def __repr__(self):
        return "<ChildRecord pid=%d %s>" % (self.pid, self.state)


class PreforkMode(JobSource, LoopControl):
    """A preforked pool in the manner of Apache httpd: at least ``min_spare`` idle children,
    at most ``max_children`` in all, idle ones above ``max_spare`` retired. A child retires
    after ``max_requests`` requests if that is positive.

    ``sock_timeout``: 0 (default) leaves accepted sockets blocking; above 0 it is their timeout
    in seconds (flup's made the listening socket blocking instead: prefork-sock-timeout). The listening socket
    is always made non-blocking: the children share it and race for each connection.

    With every child busy and ``max_children`` reached, connections wait in the listen queue;
    those still waiting after ``overload_wait`` seconds are answered "overloaded" by the
    parent (OverloadGuard; None: never, as flup's connections wait without bound).

    Hooks: ``is_client_allowed(addr)`` (checked in the child after accept), ``child_main(sock,
    parent_sock)`` (the child's loop; default ``self._child``), ``restore_signals()`` (run in
    each child; default restores the handlers saved by ``install_signals``).

    Like flup's, ``run()`` in a child ends with ``SystemExit(0)``: code after ``run()`` does
    not run in children, ``finally`` blocks around it do (kept on purpose:
    code after ``run()`` in a flup app expects to be the parent).
    """

    def __init__(self, job_class, job_args=(), *, min_spare=1, max_spare=5, max_children=50,
                 max_requests=0, sock_timeout=0, is_client_allowed=None, child_main=None,
                 restore_signals=None, overload_wait=FORK_OVERLOAD_WAIT,
                 max_requests_jitter=0, max_memory=0):
        super().__init__()
        self.limits = PoolLimits(min_spare, max_spare, max(max_spare, max_children))
        if type(sock_timeout) not in (int, float) or sock_timeout < 0:
            raise ValueError("sock_timeout must be an int or float >= 0")
        self.job_class = job_class
        self.job_args = tuple(job_args)
        self.max_requests = max_requests
        self.max_requests_jitter = max_requests_jitter  # each child: + randint(0, jitter)
        self.max_memory = max_memory  # bytes of RSS after which a child is replaced; 0: none
        self.overload_wait = overload_wait
        self.sock_timeout = sock_timeout
        self.is_client_allowed = is_client_allowed or (lambda addr: True)
        self.child_main = child_main or self._child
        self.restore_child_signals = restore_signals or self.restore_signals
        self.children = {}           # pid -> ChildRecord
        self.purge_requested = False
        self._purge_pids = set()     # children to replace once idle (SIGUSR1)
        self._selector = None
        self._in_child = False
        self._spawn_blocked_until = 0.0
        self._excess = None          # retire_after_delay's state: (since, fewest) or None
        self._sampling_until = 0.0   # the loop looks every PARENT_SAMPLE until then
        self._excess_until = 0.0     # ... and every EXCESS_CHECK until then
        self._board = None           # the scoreboard (shared mmap) while serving
        self._pool_state = None      # ... and the parent's word to the children (policy.py)
        self._child_board = None     # in a child: its ChildBoard
        # The status page's per-child slots (flupfast.ops.workers.PreforkWorkers), indexed
        # like the scoreboard, or None (no status page: no cost).
        self.worker_slots = None
        self._overload = OverloadGuard(self)
        self.terminated_requests = 0  # children the request timeout ended (replaced, no crash)

    @property
    def overload_wait(self):
        """Seconds connections may wait with the pool exhausted before the parent answers
        them "overloaded"; None: never."""
        return self._overload_wait

    @overload_wait.setter
    def overload_wait(self, seconds):
        if seconds is not None and (type(seconds) not in (int, float) or seconds < 0):
            raise ValueError("overload_wait must be None or an int or float >= 0")
        self._overload_wait = seconds

    # -- signals: the handlers only set flags ------------------------------------------------

    def on_purge_signal(self, signum, frame):
        self.purge_requested = True

    def on_child_signal(self, signum, frame):
        pass  # the wakeup byte already ended the wait; the loop reaps

    def default_handlers(self):
        handlers = super().default_handlers()
        handlers[signal.SIGUSR1] = self.on_purge_signal
        handlers[signal.SIGCHLD] = self.on_child_signal
        return handlers

    def request_purge(self):
        """Replace every current child, each once it is idle (SIGUSR1); any thread."""
        self.purge_requested = True
        self.signals.wake()

    # -- the parent loop ---------------------------------------------------------------------

    def run(self, sock):
        """Install the default handlers, run the pool until stopped, restore them. Returns True
        when stopped by SIGHUP (or ``stop(reload=True)``)."""
        self.reset()
        self.install_signals()
        try:
            return self.serve(sock)
        finally:
            self.restore_signals()

    def serve(self, sock):
        """The parent loop alone (handlers are the caller's business)."""
        sock.setblocking(False)
        set_cloexec(sock)
        signals = self.signals
        signals.open()
        self._in_child = False
        self._selector = selector = selectors.DefaultSelector()
        self._board = mmap.mmap(-1, self.limits.max_children)  # shared, zero-filled
        self._pool_state = mmap.mmap(-1, POOL_STATE_SIZE)  # shared, zero-filled
        try:
            selector.register(signals, selectors.EVENT_READ, None)
            overload = self._overload
            while self.keep_going:
                self._tend_pool(sock)
                timeout = overload.tend(sock, selector)
                timeout = self._excess_timeout(timeout)
                timeout = self._sampling_timeout(timeout)
                ready = selector.select(timeout)
                reap = not ready  # the periodic tick reaps as a safety net
                while ready:
                    for key, _ in ready:
                        if key.data is None:
                            signals.drain()
                            reap = True  # SIGCHLD (or another signal)
                        elif key.data is overload:
                            overload.on_waiting()  # the listening socket, watched
                        elif not self._read_status(key.data):
                            reap = True  # a child closed its end
                    # Read every report already waiting before judging the pool: acting on
                    # a stale "busy" forks children that are retired a moment later.
                    ready = selector.select(0)
                if reap:
                    self.reap_children()
        finally:
            if not self._in_child:
                # Also on an unexpected error: never leave children behind.
                self._overload.close()
                self.retire_all_children()
                selector.close()
                self._selector = None
                signals.close()
                self._board.close()
                self._board = None
                self._pool_state.close()
                self._pool_state = None
                # What the forks froze is collectable again once this run ends (frozen for
                # good, each app a library reload loop replaced stayed in memory); while it
                # runs it stays frozen, so the parent's collections do not touch, and unshare,
                # the pages its children share with it.
                gc.unfreeze()
        return self.reload_requested

    def _read_board(self):
        """Take each live child's state from its scoreboard slot (where it reports)."""
        board = self._board
        if board is None:
            return
        for child in self.children.values():
            if child.slot is None or child.state == EXITING:
                continue
            mark = board[child.slot]
            if mark != SLOT_UNREPORTED:
                child.state = IDLE if mark == STATUS_IDLE[0] else BUSY

    def pool_exhausted(self):
        """No child is idle and none may be added: connections can only wait."""
        self._read_board()
        children = self.children
        return (len(children) >= self.limits.max_children
                and not any(child.state == IDLE for child in children.values()))

    def _tend_pool(self, sock):
        self._read_board()
        if self.worker_slots is not None:
            self.worker_slots.sample()
        if self.purge_requested:
            self.purge_requested = False
            self._purge_pids = set(self.children)
        if self._purge_pids:
            self._purge_pids.intersection_update(self.children)
            for pid in [pid for pid in self._purge_pids if self.children[pid].state == IDLE]:
                self._purge_pids.discard(pid)
                self.retire_child(pid)
        change = decide_pool_change(
            {pid: child.state for pid, child in self.children.items()}, self.limits)
        retire, self._excess = retire_after_delay(change.retire, self._excess,
                                                  time.monotonic())
        for pid in retire:
            self.retire_child(pid)
        # No fork while an "overloaded" answer runs (OverloadGuard.answering): it ends within
        # OVERLOAD_ANSWER_SECONDS and wakes the loop.
        if change.spawn and time.monotonic() >= self._spawn_blocked_until \
                and not self._overload.answering():
            for _ in range(change.spawn):
                if not self.spawn_child(sock):
                    self._spawn_blocked_until = time.monotonic() + FORK_SPAWN_BACKOFF
                    break
        if self._pool_state is not None:  # read by the children (ChildBoard, ChildDrain)
            self._pool_state[FULL_AT] = len(self.children) >= self.limits.max_children

    def _sampling_timeout(self, timeout):
        """The loop's wait, shortened to PARENT_SAMPLE for BUSY_SPAN after a look found the
        pool exhausted, to EXCESS_CHECK after one found an excess; told to the children, which
        then leave the parent alone (policy.py, "The parent's word")."""
        now = time.monotonic()
        state = self._pool_state
        full = state[FULL_AT]
        if full and not any(child.state == IDLE for child in self.children.values()):
            self._sampling_until = now + BUSY_SPAN
        if self._excess is not None:
            self._excess_until = now + BUSY_SPAN
        if full and now < self._sampling_until:
            timeout = min(timeout, PARENT_SAMPLE)
        if now < self._excess_until:
            timeout = min(timeout, EXCESS_CHECK)
        state[NO_GUARD_AT] = self.overload_wait is None
        NEXT_LOOK.pack_into(state, NEXT_LOOK_AT, now + timeout)
        return timeout

    def _excess_timeout(self, timeout):
        """The loop's wait, shortened to EXCESS_CHECK while an excess of idle children waits
        out FORK_RETIRE_DELAY (and to the moment it has lasted that long)."""
        if self._excess is None:
            return timeout
        since = self._excess[0]
        return min(timeout, EXCESS_CHECK, max(0.0, since + FORK_RETIRE_DELAY - time.monotonic()))

    def _read_status(self, child):
        """Take a child's pending reports; returns False when the child has gone."""
        if child.sock is None:
            return False  # released earlier in this round
        try:
            data = child.sock.recv(64)  # all pending reports: the last one is current
        except BlockingIOError:
            return True
        except OSError:
            data = b""  # ECONNRESET: the child is gone
        if data:
            if child.state != EXITING:
                child.state = BUSY if data[-1:] == STATUS_BUSY else IDLE
            return True
        self._release(child)  # EOF: the child exited (or is exiting)
        return False

    def _release(self, child):
        """Close the parent's end of a child's socket; the child is EXITING until reaped."""
        if child.slot is not None and self._board is not None:
            self._board[child.slot] = SLOT_EMPTY  # no longer counted idle by its siblings
        if child.sock is not None:
            if self._selector is not None:
                try:
                    self._selector.unregister(child.sock)
                except (KeyError, ValueError):
                    pass
            child.sock.close()
            child.sock = None
        child.state = EXITING

    def retire_child(self, pid):
        """Ask a child to exit: closing our end makes its poll() see EOF (flup :225-229)."""
        child = self.children.get(pid)
        if child is not None:
            self._release(child)

    def reap_children(self):
        """Collect every exited child without blocking (waitpid(-1, WNOHANG) in a loop)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is None:
                continue  # not one of ours (the front end may fork too)
            self._release(child)
            if child.slot is not None and self.worker_slots is not None:
                self.worker_slots.reaped(child.slot)
            child.slot = None  # free for the next child
            if os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_REQUEST_TIMEOUT:
                self.terminated_requests += 1
                logger.info("child %d ended by the request timeout; replacing it", pid)
            elif self.keep_going and os.WIFSIGNALED(status):
                logger.warning("child %d killed by signal %d", pid, os.WTERMSIG(status))
            elif self.keep_going and os.WEXITSTATUS(status):
                logger.warning("child %d exited with status %d", pid, os.WEXITSTATUS(status))

    def spawn_child(self, sock):
        """Fork one child. Returns True in the parent on success, False if fork failed for
        lack of resources; in the child it does not return (SystemExit)."""
        slot = self._free_slot()
        if slot is not None:
            self._board[slot] = SLOT_UNREPORTED
            if self.worker_slots is not None:
                self.worker_slots.prepare(slot)
        parent_end, child_end = socket.socketpair()  # Python makes both close-on-exec
        parent_end.setblocking(False)
        child_end.setblocking(False)
        # The parent's objects go to the GC's permanent generation first: a collection in the
        # child would otherwise write to every inherited object's header and unshare its page.
        gc.freeze()
        release_drain_signal = _hold_drain_signal()
        try:
            pid = os.fork()
        except OSError as exc:
            release_drain_signal()
            parent_end.close()
            child_end.close()
            if exc.errno in (errno.EAGAIN, errno.ENOMEM):
                logger.error("cannot fork a child: %s", exc)
                return False
            raise
        if pid:
            release_drain_signal()
            child_end.close()
            child = self.children[pid] = ChildRecord(pid, parent_end, slot=slot)
            if self._selector is not None:
                self._selector.register(parent_end, selectors.EVENT_READ, child)
            return True
        # In the child.
        self._in_child = True
        if self.worker_slots is not None:
            self.worker_slots.attach(slot)
        if slot is not None:
            limits = self.limits
            self._child_board = ChildBoard(self._board, slot, limits.min_spare,
                                           limits.max_spare, self._pool_state)
        status = 0
        try:
            parent_end.close()
            self._become_child()
            self.child_main(sock, child_end)
        except KeyboardInterrupt:
            pass  # SIGINT from the parent's shutdown (flup :340-341)
        except Exception:
            logger.exception("prefork child %d failed", os.getpid())
            status = 1
        sys.exit(status)

    def _free_slot(self):
        """The lowest scoreboard slot no child holds, or None (no board, or all taken: the
        child then reports by status bytes only)."""
        if self._board is None:
            return None
        taken = {child.slot for child in self.children.values()}
        for slot in range(len(self._board)):
            if slot not in taken:
                return slot
        return None

    def _become_child(self):
        # Own process group, so a terminal's Ctrl-C reaches only the parent (flup :327-329).
        os.setpgid(0, 0)
        self.restore_child_signals()
        if DRAIN_SIGNAL is not None:
            # Until a child loop sets its handler (the stock _child does; a flup-style override
            # does not), the drain word is nothing to die of: its default action ends the
            # process at once, a busy request with it. It was blocked across the fork, so
            # one sent before this line is dropped here, not fatal.
            signal.signal(DRAIN_SIGNAL, signal.SIG_IGN)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, (DRAIN_SIGNAL,))
        self.signals.close()
        for child in self.children.values():
            if child.sock is not None:
                child.sock.close()
        self.children = {}
        self._purge_pids = set()
        if self._selector is not None:
            self._selector.close()  # our copy of the parent's epoll fd
            self._selector = None
        random.seed()  # do not share the parent's random sequence (flup :374-384)

    @property
    def child_number(self):
        """In a child: the N of its "worker N" title, its scoreboard slot + 1 (slots are reused,
        so N stays within max_children); its pid if it has no slot."""
        board = self._child_board
        return board.slot + 1 if board is not None else os.getpid()

    def _child(self, sock, parent_sock, check_peers=True):
        """The child's main loop: ``serve_child`` (the backend's twin) with this mode's
        settings; ``check_peers`` False: the front end admits every peer (no call per
        connection)."""
        drain = ChildDrain(self._child_board, sock)
        if DRAIN_SIGNAL is not None:
            signal.signal(DRAIN_SIGNAL, drain.on_signal)
        job_class = _impl.ChildJobs(self.new_job, drain)
        if self.max_memory:
            job_class = MemoryWatch(self.max_memory).wrap(job_class)
        # random was seeded afresh in this child (_become_child): each draws its own jitter.
        max_requests = child_request_limit(self.max_requests, self.max_requests_jitter,
                                           random.randint)
        _impl.serve_child(sock, parent_sock, job_class, self.job_args,
                          self.is_client_allowed if check_peers else None, max_requests,
                          self.sock_timeout or None, self._child_board)

    # -- shutdown ------------------------------------------------------------------------------

    def retire_all_children(self):
        """Close every child's socket: idle children exit at once, busy ones once their job
        ends (DRAIN_SIGNAL ends a persistent connection's idle wait). Those still running
        after FORK_DRAIN_GRACE get SIGINT, SIGTERM after FORK_INTERRUPT_GRACE more, SIGKILL after
        FORK_TERM_GRACE more. Returns when every child is reaped (or FORK_KILL_WAIT after SIGKILL).

        Every child gets DRAIN_SIGNAL, not only those the board shows busy: one may accept
        between the board's read and its socket's close, and an idle one only wakes to find
        its parent gone."""
        for child in list(self.children.values()):
            self._release(child)
        if DRAIN_SIGNAL is not None:
            self._signal_children(DRAIN_SIGNAL, list(self.children))
        stages = [(FORK_DRAIN_GRACE, signal.SIGINT), (FORK_INTERRUPT_GRACE, signal.SIGTERM),
                  (FORK_TERM_GRACE, signal.SIGKILL), (FORK_KILL_WAIT, None)]
        deadline = time.monotonic()
        for grace, next_signal in stages:
            deadline += grace
            while self._wait_children(deadline):
                pass
            if not self.children:
                return
            if next_signal is None:
                logger.error("children %s could not be reaped", sorted(self.children))
                return
            logger.warning("shutdown: sending %s to %d child(ren) still running",
                           signal.Signals(next_signal).name, len(self.children))
            self._signal_children(next_signal, list(self.children))

    def _wait_children(self, deadline):
        """Reap; wait a little if children remain. Returns False when done or past deadline."""
        self.reap_children()
        remaining = deadline - time.monotonic()
        if not self.children or remaining <= 0:
            return False
        # SIGCHLD writes to the wakeup socket when handlers are installed; poll regardless.
        poller = select.poll()
        if self.signals.fileno() >= 0:
            poller.register(self.signals, select.POLLIN)
        poller.poll(min(remaining, REAP_POLL) * 1000.0)
        self.signals.drain()
        return True

    def _signal_children(self, signum, pids):
        for pid in pids:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
