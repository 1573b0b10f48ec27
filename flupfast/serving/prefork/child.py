"""The prefork child: its accept -> serve -> report loop (``serve_child``, the pure twin of
_cython/prefork.pxi), its reports to the parent (status bytes, the scoreboard) and its side of
the drain signal. It must not know the protocol, nor import _impl (which picks this loop).
"""
import logging
import operator
import os
import select
import signal
import socket
import sys
import time

from flupfast.limits import ACCEPT_BACKOFF
from flupfast.output import shutdown_quietly
from flupfast.serving.job import END, WAIT
from flupfast.serving.listen import (
    ACCEPT_EXHAUSTION_ERRNOS, ACCEPT_RETRY_ERRORS, has_waiting, is_tcp, set_nodelay)
from flupfast.serving.prefork.policy import (
    EXCESS_CHECK, FULL_AT, NEXT_LOOK, NEXT_LOOK_AT, NO_GUARD_AT, PARENT_SAMPLE, POOL_STATE_SIZE,
    STATUS_BUSY, STATUS_IDLE)

__all__ = ["ACCEPT_BACKOFF", "DRAIN_SIGNAL", "EXIT_REQUEST_TIMEOUT", "STATUS_BUSY",
           "STATUS_IDLE", "ChildBoard", "ChildDrain", "ChildJobs", "end_for_request_timeout",
           "notify_parent", "serve_child", "served_count"]

logger = logging.getLogger("flupfast")

# Sent to the busy children when the parent stops: a child whose persistent connection (AJP,
# FastCGI KEEP_CONN) waits idle for the web server's next request ends it at once, one in a
# request ends the connection after it; then they exit, finding the parent gone. A real-time
# signal, which apps leave alone (SIGUSR1/SIGUSR2 are often theirs).
DRAIN_SIGNAL = signal.SIGRTMIN + 4 if hasattr(signal, "SIGRTMIN") else None
# accept4() on Linux never passes the listening socket's O_NONBLOCK on (accept(2)).
_ACCEPT_GIVES_BLOCKING = sys.platform.startswith("linux")

# Sends to the parent must not raise SIGPIPE if the process has it at its default action.
_SEND_FLAGS = getattr(socket, "MSG_NOSIGNAL", 0)

# The exit status of a child ended by the request timeout (flupfast.ops.RequestTimeout): the
# parent replaces and counts it, and does not report it as a failure.
EXIT_REQUEST_TIMEOUT = 86


def end_for_request_timeout():
    """End this child now, from the request timeout's thread (its stack already logged): the
    request's connection closes unanswered, so the web server answers it 502/504."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(EXIT_REQUEST_TIMEOUT)


def served_count(served):
    """A job's ``run()`` result as requests served: an int, or None (what a flup-era
    connection's ``run()`` returns) for one."""
    return 1 if served is None else operator.index(served)


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
    its ``slot``, and the pool limits that say when the parent must be woken; ``pool_state``,
    the parent's word in shared memory (policy.POOL_STATE_SIZE bytes: whether the pool is
    full, whether there is an overload guard, when the parent looks next; None: unknown; a
    shorter buffer holds the full byte alone)."""
    __slots__ = ("buffer", "slot", "min_spare", "max_spare", "pool_state")

    def __init__(self, buffer, slot, min_spare, max_spare, pool_state=None):
        self.buffer = buffer
        self.slot = slot
        self.min_spare = min_spare
        self.max_spare = max_spare
        self.pool_state = pool_state

    def report(self, parent_sock, status):
        """Mark this child ``status`` (STATUS_BUSY or STATUS_IDLE); wake the parent only when
        this change crossed a line it acts on, and the parent will not look soon by itself
        (policy.py, "The parent's word"): the idle count fell below min_spare (a spawn; not in
        a full pool) or to none (the overload guard: ``parent_is_watching``), or rose above
        max_spare (a retirement; not if the parent looks within EXCESS_CHECK). The parent
        reads the whole board when it wakes, so each crossing needs one wake-up, not every
        change past it; two children crossing together is caught at the parent's own tick
        (PARENT_TICK). Returns False when the parent is gone."""
        buffer = self.buffer
        buffer[self.slot] = status[0]
        idle = buffer[:].count(STATUS_IDLE)
        if status == STATUS_BUSY:
            if idle == 0:
                crossed = not self.parent_is_watching()
            else:
                crossed = idle == self.min_spare - 1 and not self.pool_full()
        else:
            crossed = idle == self.max_spare + 1 and not self.parent_looks_within(EXCESS_CHECK)
        if crossed:
            return notify_parent(parent_sock, status)
        return True

    def pool_full(self):
        """The parent's mark: the pool has max_children (no spawn can help)."""
        state = self.pool_state
        return state is not None and state[FULL_AT] != 0

    def parent_is_watching(self):
        """An exhausted full pool needs no wake-up now: the parent has no overload guard, or
        it will look at the board within PARENT_SAMPLE anyway (policy.py, "The parent's
        word")."""
        state = self.pool_state
        if state is None or len(state) < POOL_STATE_SIZE or not state[FULL_AT]:
            return False
        return state[NO_GUARD_AT] != 0 or self.parent_looks_within(PARENT_SAMPLE)

    def parent_looks_within(self, seconds):
        """The parent said it will look at the board within ``seconds`` from now."""
        state = self.pool_state
        if state is None or len(state) < POOL_STATE_SIZE:
            return False
        return NEXT_LOOK.unpack_from(state, NEXT_LOOK_AT)[0] - time.monotonic() <= seconds

    def pool_exhausted(self):
        """The parent's PreforkMode.pool_exhausted from the shared memory: no child is idle and
        none may be added."""
        return self.pool_full() and STATUS_IDLE[0] not in self.buffer[:]


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
    ``is_client_allowed(addr)`` None admits every peer without a call.
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
        # Checked before reporting busy, as flup (:409-411); None: every peer is admitted.
        if is_client_allowed is not None and not is_client_allowed(addr):
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
            left -= served_count(served)
            if left <= 0:
                return  # retire; the parent sees EOF and replaces us
        if not report(parent_sock, STATUS_IDLE):
            return  # parent gone


class ChildDrain:
    """A child's side of DRAIN_SIGNAL: the job it runs and that job's socket, so the handler
    can end an idle persistent connection, and the flag a job checks before it goes idle.
    And whether the job may keep its connection after a request (``may_keep``): a kept
    connection holds its child, so when every child is busy, none may be added and a
    connection waits, a child that ends a request lets its connection go (where the protocol
    tells the web server: AJP13) and takes the waiting one (known_differences
    'prefork-kept-connection-released'). Without that, a front that opened more connections
    than the pool has children (Apache's pool after a burst) left the extra ones waiting for
    the overload answer while the children waited on idle connections."""

    __slots__ = ("job", "client", "draining", "_board", "_listen_sock")

    def __init__(self, board=None, listen_sock=None):
        self.job = self.client = None
        self.draining = False
        self._board = board              # a ChildBoard: the siblings' states
        self._listen_sock = listen_sock  # where a connection waits for a child

    def on_idle(self, job, parkable):
        """Once draining, a persistent connection ends between requests; a new one serves
        its first request."""
        return END if self.draining and job.served > 0 else WAIT

    def may_keep(self, job):
        """False once draining, or when the pool is exhausted and a connection waits (asked
        only then: the scoreboard is in memory, the queue a system call). While the pool may
        grow, the parent forks a child for the waiting connection instead."""
        if self.draining:
            return False
        board = self._board
        if board is None or not board.pool_exhausted():
            return True
        return not has_waiting(self._listen_sock)

    def on_signal(self, signum, frame):
        self.draining = True
        job = self.job
        if job is not None:
            job.on_idle = self.on_idle
        if job is not None and job.idle:
            shutdown_quietly(self.client, socket.SHUT_RD)  # its blocked read ends at once


class ChildJobs:
    """serve_child's job factory in a prefork child: ``new_job``'s jobs, each made the drain's
    job of the moment (``drain``: a ChildDrain) and given its ``may_keep``; and its
    ``on_idle`` once draining (the signal gives it to the job of the moment): until then a job
    keeps the contract's default, which the compiled connections answer without a call.
    Compiled twin: _cython/prefork.pxi (no Python frame per connection)."""

    __slots__ = ("new_job", "drain", "_may_keep", "_on_idle")

    def __init__(self, new_job, drain):
        self.new_job = new_job
        self.drain = drain
        self._may_keep, self._on_idle = drain.may_keep, drain.on_idle  # bound once

    def __call__(self, client, addr, *args):
        job = self.new_job(client, addr, *args)
        drain = self.drain
        drain.job, drain.client = job, client
        job.may_keep = self._may_keep
        if drain.draining:
            job.on_idle = self._on_idle
        return job
