"""The prefork mode: a parent keeps a pool of forked children that accept and run jobs.

Owns the pool policy (a pure function), spawning, status tracking, retiring, reaping and the
bounded shutdown, the "overloaded" answer when every child is busy, plus the child's accept ->
serve -> report loop. It must not know the protocol (a job answers "overloaded" itself), let
the parent run the app or wait on a peer, or leave a child unreaped.
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
import threading
import time
from dataclasses import dataclass

from flupfast.limits import FORK_OVERLOAD_WAIT, MAX_OVERLOAD_ANSWERS, OVERLOAD_ANSWER_SECONDS
from flupfast.output import shutdown_quietly
from flupfast.serving.job import END, WAIT, JobSource
from flupfast.serving.listen import (
    ACCEPT_EXHAUSTION_ERRNOS, ACCEPT_RETRY_ERRORS, is_tcp, set_cloexec, set_nodelay)
from flupfast.serving.signals import LoopControl

__all__ = [
    "BUSY", "IDLE", "STATUS_BUSY", "STATUS_IDLE", "EXITING", "EXCESS_CHECK", "PARENT_TICK",
    "RETIRE_DELAY", "DRAIN_GRACE", "SHUTDOWN_GRACE", "TERM_GRACE", "DRAIN_SIGNAL",
    "ChildBoard", "ChildDrain", "ChildRecord",
    "OverloadGuard", "PoolChange", "PoolLimits", "PreforkMode",
    "decide_pool_change", "notify_parent", "serve_child",
]

logger = logging.getLogger("flupfast")

# Status bytes a child sends its parent (flup preforkserver.py:414, :426). They are bytes: flup
# compared them with str, so every child looked idle and the pool never grew (flup bug 5).
STATUS_BUSY = b"\x00"
STATUS_IDLE = b"\xff"

# The scoreboard: one byte per child slot in memory shared by the parent and its children.
# A child writes its own slot (STATUS_IDLE or STATUS_BUSY) at every change and wakes the
# parent only when the pool needs it to act; the parent reads the slots whenever it wakes.
# SLOT_UNREPORTED: the parent's mark for a new child; a child loop that never writes its slot
# (a flup-style ``_child`` override) keeps it, and the parent then goes by the status bytes.
SLOT_EMPTY = 0x00
SLOT_UNREPORTED = 0x01

# Child states, as the parent sees them.
IDLE = "idle"        # waiting for a connection
BUSY = "busy"        # running a job
EXITING = "exiting"  # told to go, or seen to go (EOF); still a process until reaped

# The parent wakes at least this often even with nothing to do: a safety net for reaping and
# for flags set from another thread (signals and child events wake it at once).
PARENT_TICK = 1.0
# On shutdown (INT, TERM, HUP), busy children first get this long to finish their request in
# peace: they exit when it ends, finding the parent gone. flup sends SIGINT at once, failing
# every request in flight. A child holding a persistent connection (AJP, FastCGI KEEP_CONN)
# stays busy until the web server closes it, so the drain is bounded as the thread mode's.
DRAIN_GRACE = 5.0
# ... then SIGINT (KeyboardInterrupt in the job) and this long (flup's 10 s alarm, which never
# fired: bug 8) before SIGTERM ...
SHUTDOWN_GRACE = 10.0
# ... and SIGTERM this long before SIGKILL (a child may have its own SIGTERM handler).
TERM_GRACE = 2.0
# After SIGKILL, how long to wait for the kernel to let us reap the last children.
KILL_WAIT = 5.0
# Poll interval while waiting for children to exit (SIGCHLD usually wakes us sooner).
REAP_POLL = 0.05
# Idle children above max_spare are retired once the excess has lasted this long (Apache's
# prefork also trims its idle children once a second). Under steady load the idle count swings
# past max_spare between requests; retiring at once and forking again a moment later churned
# the pool (26 children forked in 7 s under a 16-connection hello load, 5 at its end), each fork
# and cold start paid by the requests behind it.
RETIRE_DELAY = 1.0
# While an excess waits out RETIRE_DELAY the parent reads the scoreboard this often: children
# wake it only when the idle count crosses min_spare or max_spare, so without a look of its own
# a dip back between them goes unseen and a count swinging around max_spare looks like a
# lasting excess.
EXCESS_CHECK = 0.05
# Pause after fork() fails for lack of resources before the loop tries again.
SPAWN_BACKOFF = 1.0
# Pause after accept() fails for lack of fds/memory in a child (see single.ACCEPT_BACKOFF).
ACCEPT_BACKOFF = 0.1

# Sent to the busy children when the parent stops: a child whose persistent connection (AJP,
# FastCGI KEEP_CONN) waits idle for the web server's next request ends it at once, one in a
# request ends the connection after it; then they exit, finding the parent gone. A real-time
# signal, which apps leave alone (SIGUSR1/SIGUSR2 are often theirs).
DRAIN_SIGNAL = signal.SIGRTMIN + 4 if hasattr(signal, "SIGRTMIN") else None
# accept4() on Linux never passes the listening socket's O_NONBLOCK on (accept(2)).
_ACCEPT_GIVES_BLOCKING = sys.platform.startswith("linux")

# Sends to the parent must not raise SIGPIPE if the process has it at its default action.
_SEND_FLAGS = getattr(socket, "MSG_NOSIGNAL", 0)


# -- the pool policy: a pure function ---------------------------------------------------------

@dataclass(frozen=True)
class PoolLimits:
    """flup's minSpare/maxSpare/maxChildren, already validated and normalised."""
    min_spare: int = 1
    max_spare: int = 5
    max_children: int = 50

    def __post_init__(self):
        if self.min_spare < 1:
            raise ValueError("min_spare must be at least 1")
        if self.max_spare < self.min_spare:
            raise ValueError("max_spare must be greater than or equal to min_spare")
        if self.max_children < self.max_spare:
            raise ValueError("max_children must be greater than or equal to max_spare")


@dataclass(frozen=True)
class PoolChange:
    """What the parent should do now: fork ``spawn`` children, retire the idle ``retire`` pids."""
    spawn: int = 0
    retire: tuple = ()


def decide_pool_change(states, limits):
    """Decide spawns and retirements from ``states`` ({pid: IDLE | BUSY | EXITING}).

    flup's rules (preforkserver.py:145-146, :210-229), with child states that work:
    * keep at least ``max_spare`` children in all (flup's "optimistic absolute minimum") and at
      least ``min_spare`` idle ones, never more than ``max_children`` in all (exiting children
      count until reaped: they are still processes);
    * with more than ``max_spare`` idle children, retire the extras, highest pids first.
    """
    total = len(states)
    idle = sorted(pid for pid, state in states.items() if state == IDLE)
    if len(idle) > limits.max_spare:
        return PoolChange(retire=tuple(idle[limits.max_spare:]))
    wanted = max(limits.max_spare - total, limits.min_spare - len(idle), 0)
    return PoolChange(spawn=max(0, min(wanted, limits.max_children - total)))


# -- the child side ---------------------------------------------------------------------------

def notify_parent(parent_sock, status):
    """Send a status byte to the parent. Returns False when the parent is gone (EPIPE)."""
    while True:
        try:
            parent_sock.send(status, _SEND_FLAGS)
            return True
        except BlockingIOError:
            # The parent is behind on reading; wait until it catches up (flup :364-366).
            poller = select.poll()
            poller.register(parent_sock, select.POLLOUT)
            poller.poll()
        except (BrokenPipeError, ConnectionResetError):
            return False


class ChildBoard:
    """A child's place on the scoreboard: the shared ``buffer`` (an anonymous shared mmap),
    its ``slot``, and the pool limits that say when the parent must be woken."""
    __slots__ = ("buffer", "slot", "min_spare", "max_spare")

    def __init__(self, buffer, slot, min_spare, max_spare):
        self.buffer = buffer
        self.slot = slot
        self.min_spare = min_spare
        self.max_spare = max_spare

    def report(self, parent_sock, status):
        """Mark this child ``status`` (STATUS_BUSY or STATUS_IDLE); tell the parent only when
        the idle count now calls for a spawn (below min_spare) or a retirement (above
        max_spare). Returns False when the parent is gone."""
        buffer = self.buffer
        buffer[self.slot] = status[0]
        idle = buffer[:].count(STATUS_IDLE)
        if idle < self.min_spare or idle > self.max_spare:
            return notify_parent(parent_sock, status)
        return True


def _child_poller(listen_sock, parent_sock):
    """What the child waits on. On Linux, epoll with EPOLLEXCLUSIVE on the shared listening
    socket wakes one idle child per connection instead of all of them (the thundering herd
    costs every child a wake-up and a failed accept per request)."""
    exclusive = getattr(select, 'EPOLLEXCLUSIVE', 0)
    if hasattr(select, 'epoll') and exclusive:
        poller = select.epoll()
        try:
            poller.register(listen_sock, select.EPOLLIN | exclusive)
        except OSError:  # kernels before 4.5
            poller.register(listen_sock, select.EPOLLIN)
        poller.register(parent_sock, select.EPOLLIN)
        return poller
    poller = select.poll()
    poller.register(listen_sock, select.POLLIN)
    poller.register(parent_sock, select.POLLIN)
    return poller


def serve_child(listen_sock, parent_sock, job_class, job_args, is_client_allowed,
                max_requests=0, client_timeout=None, board=None):
    """The child's loop: wait for a connection or word from the parent, accept, check the
    allow-list, report busy, run the job, count its requests, report idle.

    Returns when the parent closes its end (retire or shutdown), when the parent is gone, or
    after ``max_requests`` requests (if positive). Requests are counted, not connections: flup
    counts connections, so a kept-alive FastCGI connection served any number of requests. A
    job (serving/job.py) is told how many requests it may still serve (``max_requests``;
    None: unlimited); ``job.run()`` returns the number served.
    ``client_timeout`` becomes the accepted socket's timeout (None: blocking).
    ``board`` (a ChildBoard) reports through the scoreboard, waking the parent only when the
    pool must change; without it every change is a status byte (flup's protocol). Either
    way a gone parent ends the loop (its end of the socketpair polls readable at EOF).

    Every input is explicit and per-iteration work is kept small: this is the hot loop, and
    it is the one the compiled twin reimplements.
    """
    poller = _child_poller(listen_sock, parent_sock)
    parent_fd = parent_sock.fileno()
    accept = listen_sock.accept
    tcp = is_tcp(listen_sock)
    left = max_requests if max_requests > 0 else None
    if board is not None:
        report = board.report
        report(parent_sock, STATUS_IDLE)
    else:
        report = notify_parent
    while True:
        for fd, _ in poller.poll():
            if fd == parent_fd:
                # Any activity from the parent (EOF) means: exit (flup :390-395).
                return
        try:
            client, addr = accept()
        except ACCEPT_RETRY_ERRORS:
            continue  # another child won the race for this connection (flup :400-403)
        except OSError as exc:
            if exc.errno not in ACCEPT_EXHAUSTION_ERRNOS:
                raise
            logger.error("accept() failed in child %d: %s", os.getpid(), exc)
            time.sleep(ACCEPT_BACKOFF)
            continue
        # Normalise blocking mode: the listening socket is non-blocking, and whether the
        # accepted socket inherits that is OS-dependent (Linux: never; there a blocking
        # socket that should stay so costs no ioctl).
        if not (_ACCEPT_GIVES_BLOCKING and client_timeout is None
                and client.gettimeout() is None):
            client.settimeout(client_timeout)
        if tcp:
            set_nodelay(client)
        # Checked before reporting busy, as flup (:409-411).
        if not is_client_allowed(addr):
            client.close()
            continue
        report(parent_sock, STATUS_BUSY)
        job = job_class(client, addr, *job_args)
        job.max_requests = left
        try:
            served = job.run()
        except Exception:
            logger.exception("unhandled exception in job %r", job)
            client.close()
            served = 1
        if left is not None:
            left -= served
            if left <= 0:
                return  # retire; the parent sees EOF and replaces us
        if not report(parent_sock, STATUS_IDLE):
            return  # parent gone


class ChildDrain:
    """A child's side of DRAIN_SIGNAL: the job it runs and that job's socket, so the handler
    can end an idle persistent connection, and the flag a job checks before it goes idle."""

    __slots__ = ("job", "client", "draining")

    def __init__(self):
        self.job = self.client = None
        self.draining = False

    def wrap(self, new_job):
        """A job factory for serve_child: ``new_job``'s jobs, remembered and given
        ``on_idle``."""
        def make_job(client, addr, *args):
            job = new_job(client, addr, *args)
            self.job, self.client = job, client
            job.on_idle = self.on_idle
            return job
        return make_job

    def on_idle(self, job, parkable):
        """Once draining, a persistent connection ends between requests; a new one serves
        its first request."""
        return END if self.draining and job.served > 0 else WAIT

    def on_signal(self, signum, frame):
        self.draining = True
        job = self.job
        if job is not None and job.idle:
            shutdown_quietly(self.client, socket.SHUT_RD)  # its blocked read ends at once


# -- the parent side --------------------------------------------------------------------------

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


def _has_waiting(listen_sock):
    """True when a connection waits in ``listen_sock``'s queue (readable; nothing is accepted)."""
    poller = select.poll()
    poller.register(listen_sock, select.POLLIN)
    return bool(poller.poll(0))


class OverloadGuard:
    """The parent's answer to an exhausted pool: no child idle and ``max_children`` reached.

    Only then does the parent look at the listening socket, so it never competes with an idle
    child for a connection. The first connection seen waiting starts a clock. It runs on while
    the pool stays exhausted and connections keep waiting (a child that frees up takes one,
    more arrive), and stops when a child is idle or the queue is seen empty. After
    ``mode.overload_wait`` seconds the parent accepts the waiting connections and has each
    answered "overloaded" in a short-lived thread (``job.refuse_overloaded()``; a flup-style
    job is closed, as in thread mode), until the queue is empty (the clock restarts with the
    next connection) or a child is idle. No connection waits much longer than the bound for an
    answer; one that arrived late in a spell may be refused after a shorter wait: the kernel
    tells neither the queue's length (Unix sockets) nor its connections' ages, and a spell's
    start is the one age the parent can know.
    """

    def __init__(self, mode):
        self.mode = mode
        self._since = None      # when connections were first seen waiting (monotonic), or None
        self._watched = None    # (selector, listening socket) while registered
        self._answers = []      # threads answering "overloaded"
        self._refused = 0       # answered "overloaded" since the pool was last not exhausted

    def answering(self):
        """True while an answer runs. The parent does not fork meanwhile: the child would
        inherit that connection (keeping it open) and whatever the thread holds."""
        self._answers = [thread for thread in self._answers if thread.is_alive()]
        return bool(self._answers)

    def on_waiting(self):
        """The listening socket turned readable while watched: a connection waits."""
        self._unwatch()  # the clock runs now; the loop sleeps until it is due
        if self._since is None:
            self._since = time.monotonic()

    def tend(self, listen_sock, selector):
        """One round of the parent loop: watch, wait or answer. Returns the longest the loop
        may sleep."""
        # A finishing answer wakes the loop, but may still be alive when it looks.
        timeout = REAP_POLL if self.answering() else PARENT_TICK
        wait = self.mode.overload_wait
        if wait is None or not self.mode.pool_exhausted():
            self._calm()
            return timeout
        if self._since is None or not _has_waiting(listen_sock):
            self._since = None  # nobody waits (the children took them all): watch for one
            if self._watched is None:
                selector.register(listen_sock, selectors.EVENT_READ, self)
                self._watched = (selector, listen_sock)
            return timeout
        left = self._since + wait - time.monotonic()
        if left > 0:
            return min(timeout, left)
        return self._refuse_waiting(listen_sock)

    def _refuse_waiting(self, listen_sock):
        """Accept the waiting connections and answer each "overloaded", while the pool stays
        exhausted and fewer than MAX_OVERLOAD_ANSWERS answers run. Returns the loop's sleep."""
        mode = self.mode
        while True:
            if self.answering() and len(self._answers) >= MAX_OVERLOAD_ANSWERS:
                return REAP_POLL  # each finished answer wakes the loop
            if not mode.pool_exhausted():
                self._calm()
                return PARENT_TICK
            try:
                client, addr = listen_sock.accept()
            except BlockingIOError:
                self._since = None  # the queue is empty: the clock restarts with the next one
                return 0
            except ACCEPT_RETRY_ERRORS:  # the accept loops' own list (interrupted, aborted)
                continue
            except OSError as exc:
                # EMFILE and the like: the connections stay queued; try again next tick.
                logger.error("accept() failed in the prefork parent: %s", exc)
                return PARENT_TICK
            try:
                allowed = mode.is_client_allowed(addr)
            except Exception:  # a hook's bug must not take the parent down
                logger.exception("is_client_allowed(%r) failed", addr)
                allowed = False
            if not allowed:
                client.close()  # as the child does (flup :409-411)
                continue
            if not self._refused:
                logger.warning("all %d children busy and connections waiting for %.1f s: "
                               "answering 'overloaded'", mode.limits.max_children,
                               time.monotonic() - self._since)
            self._refused += 1
            thread = threading.Thread(target=self._answer, args=(client, addr), daemon=True,
                                      name="flupfast-overloaded")
            try:
                thread.start()
            except RuntimeError as exc:  # no thread to be had: closing is all that is left
                client.close()
                logger.error("cannot answer 'overloaded': %s", exc)
                return PARENT_TICK
            self._answers.append(thread)

    def _answer(self, client, addr):
        """In its own thread: build the job as the child would and let it refuse (bounded by
        OVERLOAD_ANSWER_SECONDS); never run the app."""
        mode = self.mode
        try:
            if is_tcp(client):
                set_nodelay(client)
            mode.new_job(client, addr, *mode.job_args).refuse_overloaded()
        except Exception:
            logger.exception("could not tell a connection the pool is overloaded")
        finally:
            client.close()
            mode.signals.wake()

    def _calm(self):
        """A child is idle: stop the clock and watching, and sum up the burst."""
        self._since = None
        self._unwatch()
        if self._refused:
            logger.warning("a child is free again; %d connection(s) were answered "
                           "'overloaded'", self._refused)
            self._refused = 0

    def _unwatch(self):
        if self._watched is not None:
            selector, listen_sock = self._watched
            self._watched = None
            try:
                selector.unregister(listen_sock)
            except (KeyError, ValueError):
                pass

    def close(self):
        """The parent stops: stop watching and give the running answers their time."""
        self._since = None
        self._unwatch()
        deadline = time.monotonic() + OVERLOAD_ANSWER_SECONDS
        for thread in self._answers:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._answers = []


class PreforkMode(JobSource, LoopControl):
    """A preforked pool in the manner of Apache httpd: at least ``min_spare`` idle children,
    at most ``max_children`` in all, idle ones above ``max_spare`` retired. A child retires
    after ``max_requests`` requests if that is positive.

    ``sock_timeout``: 0 (default) leaves accepted sockets blocking; above 0 it is their timeout
    in seconds (flup's made the listening socket blocking instead: bug 9). The listening socket
    is always made non-blocking: the children share it and race for each connection.

    With every child busy and ``max_children`` reached, connections wait in the listen queue;
    those still waiting after ``overload_wait`` seconds are answered "overloaded" by the
    parent (OverloadGuard; None: never, as flup's connections wait without bound).

    Hooks: ``is_client_allowed(addr)`` (checked in the child after accept), ``child_main(sock,
    parent_sock)`` (the child's loop; default ``self._child``), ``restore_signals()`` (run in
    each child; default restores the handlers saved by ``install_signals``).

    Like flup's, ``run()`` in a child ends with ``SystemExit(0)``: code after ``run()`` does
    not run in children, ``finally`` blocks around it do (flup bug 37, kept on purpose).
    """

    def __init__(self, job_class, job_args=(), *, min_spare=1, max_spare=5, max_children=50,
                 max_requests=0, sock_timeout=0, is_client_allowed=None, child_main=None,
                 restore_signals=None, overload_wait=FORK_OVERLOAD_WAIT):
        super().__init__()
        self.limits = PoolLimits(min_spare, max_spare, max(max_spare, max_children))
        if type(sock_timeout) not in (int, float) or sock_timeout < 0:
            raise ValueError("sock_timeout must be an int or float >= 0")
        self.job_class = job_class
        self.job_args = tuple(job_args)
        self.max_requests = max_requests
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
        self._excess_since = None    # when more than max_spare idle children were first seen
        self._excess_fewest = 0      # the fewest idle children above max_spare seen since then
        self._board = None           # the scoreboard (shared mmap) while serving
        self._child_board = None     # in a child: its ChildBoard
        self._overload = OverloadGuard(self)

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
        try:
            selector.register(signals, selectors.EVENT_READ, None)
            overload = self._overload
            while self.keep_going:
                self._tend_pool(sock)
                timeout = overload.tend(sock, selector)
                timeout = self._excess_timeout(timeout)
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
        if not change.retire:
            self._excess_since = None
        elif self._excess_since is None:
            self._excess_since = time.monotonic()
            self._excess_fewest = len(change.retire)
        else:
            # Only what stayed idle through the whole delay goes: the fewest extras seen.
            self._excess_fewest = min(self._excess_fewest, len(change.retire))
            if time.monotonic() - self._excess_since >= RETIRE_DELAY:
                self._excess_since = None
                for pid in change.retire[-self._excess_fewest:]:
                    self.retire_child(pid)
        # No fork while an "overloaded" answer runs (OverloadGuard.answering): it ends within
        # OVERLOAD_ANSWER_SECONDS and wakes the loop.
        if change.spawn and time.monotonic() >= self._spawn_blocked_until \
                and not self._overload.answering():
            for _ in range(change.spawn):
                if not self.spawn_child(sock):
                    self._spawn_blocked_until = time.monotonic() + SPAWN_BACKOFF
                    break

    def _excess_timeout(self, timeout):
        """The loop's wait, shortened to EXCESS_CHECK while an excess of idle children waits
        out RETIRE_DELAY (and to the moment it has lasted that long)."""
        since = self._excess_since
        if since is None:
            return timeout
        return min(timeout, EXCESS_CHECK, max(0.0, since + RETIRE_DELAY - time.monotonic()))

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
            child.slot = None  # free for the next child
            if self.keep_going and os.WIFSIGNALED(status):
                logger.warning("child %d killed by signal %d", pid, os.WTERMSIG(status))
            elif self.keep_going and os.WEXITSTATUS(status):
                logger.warning("child %d exited with status %d", pid, os.WEXITSTATUS(status))

    def spawn_child(self, sock):
        """Fork one child. Returns True in the parent on success, False if fork failed for
        lack of resources; in the child it does not return (SystemExit)."""
        slot = self._free_slot()
        if slot is not None:
            self._board[slot] = SLOT_UNREPORTED
        parent_end, child_end = socket.socketpair()  # Python makes both close-on-exec
        parent_end.setblocking(False)
        child_end.setblocking(False)
        # The parent's objects go to the GC's permanent generation first: a collection in the
        # child would otherwise write to every inherited object's header and unshare its page.
        gc.freeze()
        try:
            pid = os.fork()
        except OSError as exc:
            parent_end.close()
            child_end.close()
            if exc.errno in (errno.EAGAIN, errno.ENOMEM):
                logger.error("cannot fork a child: %s", exc)
                return False
            raise
        if pid:
            child_end.close()
            child = self.children[pid] = ChildRecord(pid, parent_end, slot=slot)
            if self._selector is not None:
                self._selector.register(parent_end, selectors.EVENT_READ, child)
            return True
        # In the child.
        self._in_child = True
        if slot is not None:
            limits = self.limits
            self._child_board = ChildBoard(self._board, slot, limits.min_spare,
                                           limits.max_spare)
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

    def _child(self, sock, parent_sock):
        """The child's main loop: ``serve_child`` (the backend's twin) with this mode's
        settings."""
        from flupfast import _impl  # here: _impl imports this module for the pure twin
        job_class = self.new_job
        if DRAIN_SIGNAL is not None:
            drain = ChildDrain()
            signal.signal(DRAIN_SIGNAL, drain.on_signal)
            job_class = drain.wrap(job_class)
        _impl.serve_child(sock, parent_sock, job_class, self.job_args,
                          self.is_client_allowed, self.max_requests, self.sock_timeout or None,
                          self._child_board)

    # -- shutdown ------------------------------------------------------------------------------

    def retire_all_children(self):
        """Close every child's socket: idle children exit at once, busy ones once their job
        ends (DRAIN_SIGNAL ends a persistent connection's idle wait). Those still running
        after DRAIN_GRACE get SIGINT, SIGTERM after SHUTDOWN_GRACE more, SIGKILL after
        TERM_GRACE more. Returns when every child is reaped (or KILL_WAIT after SIGKILL)."""
        self._read_board()
        busy = [pid for pid, child in self.children.items() if child.state == BUSY]
        for child in list(self.children.values()):
            self._release(child)
        if DRAIN_SIGNAL is not None:
            self._signal_children(DRAIN_SIGNAL, busy)
        stages = [(DRAIN_GRACE, signal.SIGINT), (SHUTDOWN_GRACE, signal.SIGTERM),
                  (TERM_GRACE, signal.SIGKILL), (KILL_WAIT, None)]
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
