"""Parked persistent connections of the threaded mode: one epoll set instead of one blocked
worker thread per idle connection.

Owns the epoll set (EPOLLONESHOT: a readiness goes to exactly one taker), the parked jobs by
fd, and the waiter thread that hands a readable parked connection to the pool when no worker
is about to take it. It must not know the protocol (the job says whether it parked) nor touch
the pool's limits (a parked job is handed back like a queued one).

Why: behind nginx (``fastcgi_keep_conn on``, upstream keepalive) every kept connection bound
to its own blocked thread meant one thread wake-up and one GIL hand-off per request. The
worker that owns the chain takes the next ready parked connection itself when it ends a
request (a zero-timeout poll, no sleep), so under load one thread serves requests back to back.
"""
import collections
import logging
import os
import select
import threading
import time

from flupfast import _impl

__all__ = ["LINGER", "PARKED_MASK", "SHORT_LINGER", "STALL_CHECK", "STALL_MAX", "ParkedSet", "supported"]

logger = logging.getLogger("flupfast")
get_ident = threading.get_ident
monotonic = time.monotonic

# Readable, or the peer hung up (a closed parked connection must be taken, seen at EOF and
# closed: no fd kept for a peer that left). One-shot: disarmed once reported, re-armed when the
# connection parks again, so two threads never serve one connection.
PARKED_MASK = getattr(select, "EPOLLIN", 1) | getattr(select, "EPOLLRDHUP", 0x2000) \
    | getattr(select, "EPOLLONESHOT", 1 << 30)
# While workers run, the waiter leaves the set to them: every STALL_CHECK it collects the ready
# connections and offers them to the workers (or puts them back in the set for a worker
# waiting on it: ParkedSet._offer); one offered and still untaken at the next check goes to the
# pool (a thread wakes for it). So a ready connection waits about 2 * STALL_CHECK at most
# behind workers busy with long requests, and under load the workers take nearly all of them.
STALL_CHECK = 0.002
# Checks that find nothing ready back off, doubling up to this: a worker leading on the set
# (LINGER) takes the ready ones itself, and a waiter waking 500 times a second for nothing is
# a cost of its own. The first connection ready behind busy workers after a quiet spell may
# wait this long (later ones STALL_CHECK again).
STALL_MAX = 0.02


# The last worker running, finding nothing ready, waits this long on the set itself before it
# goes back to the pool: the next request of a steady load then wakes that thread alone, as
# a connection blocked in recv did, instead of the waiter and then a pool thread. Short: the
# pool counts the thread busy meanwhile.
LINGER = 0.02
# One worker at a time takes ready connections one after another (the chain's owner); another
# that ends a request goes back to the pool instead, unless the owner has been in its current
# request this long: then it waits (a backend call, a sleep) and the other takes over. Several
# threads taking short requests back to back only queue for the GIL, each waiting out
# CPython's switch interval (5 ms) after every system call that gives it up.
CHAIN_HANDOVER = 0.001
# The owner, finding nothing ready while other workers run, waits this long: the web
# server's next request on the connection it just answered comes a round trip later (about
# 0.1 ms through nginx), and catching it here saves the waiter's check and a thread wake-up
# (epoll wakes one waiter per event). Without it, behind nginx, 16 connections of 50 ms
# requests ran 14.5 at once, not 15.4.
SHORT_LINGER = 0.002


def supported():
    return hasattr(select, "epoll")


def _claim(token):
    """Own a parked connection: ``token`` is the one-item list made when it parked; list.pop
    is atomic, so exactly one of the workers, the waiter and close() gets it."""
    try:
        token.pop()
        return True
    except IndexError:
        return False


class ParkedSet:
    """Idle persistent connections waiting in one epoll set.

    ``park(tracked)`` adds a job whose ``run()`` returned parked (its ``client`` socket open,
    nothing buffered); ``take_ready()`` gives a worker that just ended a request the next ready
    one, if any, after a short wait at most; ``enter()``/``leave()`` bracket a worker's run of
    jobs. When no worker runs, or they leave a ready connection for a whole check, the waiter
    thread hands it to ``hand_off(tracked)`` (the mode queues it in the pool).
    """

    def __init__(self, hand_off):
        self._hand_off = hand_off
        # A plain lock (nothing here takes it twice): enter() and leave() take it directly, C's
        # context manager instead of Condition's Python __enter__/__exit__ over an RLock.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiter_waits = False  # the waiter is in _cond.wait: leave() must notify it
        self._parked = {}      # fd -> tracked job (tracked.park_token: see _claim)
        self._offered = collections.deque()  # (tracked, token) the waiter saw ready
        self._running = 0      # workers between enter() and leave()
        self._lingering = False  # a worker (not the last) waits SHORT_LINGER on the set
        self._polling = 0      # workers waiting on the set now (under _lock: see _offer)
        # The chain (take_ready): (the owner's thread id, when its current request began or
        # None between two), one tuple so that a reader never mixes two owners' halves.
        self._chain = (None, None)
        self._epoll = None
        self._wake_r = self._wake_w = None
        self._thread = None
        self.open = False
        self.keeping = False   # closed by a reload: connections that park are kept, not closed
        self._kept = []

    # -- lifecycle (the mode's serve()) -----------------------------------------------------

    def start(self):
        with self._cond:
            if self.open:
                return
            self._epoll = select.epoll()
            self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            self._epoll.register(self._wake_r, select.EPOLLIN)
            self.open = True
            self._thread = threading.Thread(target=self._wait, args=(self._epoll,),
                                            name="flupfast-parked", daemon=True)
            self._thread.start()

    def close(self, keep=False):
        """Stop the waiter and close every parked connection at once (a stop ends idle
        persistent connections, as the single mode does). Returns how many were closed.

        With ``keep`` (a reload), they are kept instead, and so is every connection that parks
        from now on, until ``take_kept``: the next run or image serves them."""
        with self._cond:
            if keep:
                self.keeping = True
            if not self.open:
                return 0
            self.open = False
            self._cond.notify_all()
            thread = self._thread
            self._thread = None
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)
        closed = 0
        for fd in list(self._parked):
            tracked = self._parked.pop(fd, None)
            if tracked is not None and _claim(tracked.park_token):
                if keep:
                    self._kept.append(tracked)
                else:
                    tracked.close_parked()
                    closed += 1
        self._offered.clear()
        self._epoll.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        return closed

    def take_kept(self):
        """The connections kept since ``close(keep=True)``; later ones are closed again."""
        with self._cond:
            self.keeping = False
            kept, self._kept = self._kept, []
        return kept

    # -- the workers' side --------------------------------------------------------------------

    def park(self, tracked):
        """Watch ``tracked.client``; False when it cannot be watched (the caller closes it)."""
        if not self.open and self.keeping:
            with self._cond:
                if self.keeping:
                    self._kept.append(tracked)
                    return True
        fd = tracked.fd
        token = tracked.park_token = [True]
        self._parked[fd] = tracked
        try:
            if not self.open:
                raise ValueError("closed")
            # Marked before the call: epoll_ctl releases the GIL, and once the connection is
            # armed another thread may take it, serve its next request and park it again
            # before this one runs (it must then re-arm, not register a second time).
            again = tracked.registered
            tracked.registered = True
            self._arm(fd, again)
        except (OSError, ValueError) as exc:
            self._parked.pop(fd, None)
            if self.open and isinstance(exc, OSError):
                logger.warning("cannot watch an idle persistent connection (fd %d): %s; "
                               "closing it", fd, exc)
            # The caller closes it, unless close() (a stop) has it.
            return not _claim(token)
        return True

    def _arm(self, fd, again):
        """Add ``fd`` to the set armed for one event, or re-arm it (one-shot: disarmed once
        reported): sockio.epoll_arm, whose compiled twin keeps the GIL (epoll_ctl never
        waits; Python's modify() hands the GIL over, a context switch per park under load)."""
        _impl.epoll_arm(self._epoll, fd, PARKED_MASK, again)

    def _own(self, tracked, token):
        if _claim(token):
            self._parked.pop(tracked.fd, None)
            return True
        return False

    def has_parked(self):
        """Anything parked or offered (read without the lock: a hint, asked after every job)."""
        return bool(self._parked) or bool(self._offered)

    def take_ready(self):
        """The next parked connection that is readable, or None: None at once when another
        worker owns the chain and is in a short request or between two (CHAIN_HANDOVER);
        else waits on the set at most LINGER (the last worker running) or SHORT_LINGER (one
        other worker), else not at all. The chain is a hint read without the lock: at worst
        two owners for a moment, or none (the waiter's check then hands ready ones out)."""
        me = get_ident()
        owner, since = self._chain
        if owner != me and owner is not None \
                and (since is None or monotonic() - since < CHAIN_HANDOVER):
            return None
        self._chain = (me, None)
        tracked = self._take()
        if self._chain[0] == me:
            self._chain = (None, None) if tracked is None else (me, monotonic())
        return tracked

    def _take_offered(self):
        offered = self._offered
        while offered:
            try:
                tracked, token = offered.popleft()
            except IndexError:
                break
            if self._own(tracked, token):
                return tracked
        return None

    def _take(self):
        if self._offered:
            tracked = self._take_offered()
            if tracked is not None:
                return tracked
        try:
            # One ready now? (The compiled twin asks without giving the GIL up.) Else a
            # worker waits on the set itself a while; the last one running longer.
            fd = _impl.epoll_ready_now(self._epoll)
            if fd < 0:
                if self._running == 1:
                    events = self._poll(LINGER)
                elif self._lingering:
                    return None
                else:
                    self._lingering = True  # racy by design: a hint, so few wait at once
                    try:
                        events = self._poll(SHORT_LINGER)
                    finally:
                        self._lingering = False
                if events is None:
                    return self._take_offered()  # the waiter offered some meanwhile
                if not events:
                    return None
                fd = events[0][0]
        except (OSError, ValueError):  # closed by a stop
            return None
        tracked = self._parked.get(fd)
        if tracked is not None and self._own(tracked, tracked.park_token):
            return tracked
        return None

    def _poll(self, timeout):
        """Wait on the set for one ready connection, at most ``timeout``: its events, or None
        when the waiter has offered one meanwhile (take it from there). Counted in
        ``_polling`` so that the waiter puts what it finds back in the set (``_offer``)
        instead of leaving it where a worker asleep on the set does not look."""
        with self._lock:
            if self._offered:
                return None
            self._polling += 1
        try:
            return self._epoll.poll(timeout, 1)
        finally:
            with self._lock:
                self._polling -= 1

    def enter(self):
        with self._lock:
            self._running += 1

    def leave(self):
        with self._lock:
            self._running -= 1
            if self._chain[0] == get_ident():
                self._chain = (None, None)
            # The waiter watches the set itself again; a notify only when it waits for one
            # (Condition.notify is Python code, and runs after every connection otherwise).
            if not self._running and self._waiter_waits:
                self._cond.notify()

    # -- the waiter thread --------------------------------------------------------------------

    def _wait(self, epoll):
        cond = self._cond
        parked = self._parked
        offered = self._offered
        previous = []  # what was offered at the last check
        check = STALL_CHECK
        while True:
            with cond:
                if self._running and self.open:
                    self._waiter_waits = True
                    try:
                        cond.wait(check)  # notified when the last worker leaves, or a stop
                    finally:
                        self._waiter_waits = False
                if not self.open:
                    return
                running = self._running
            # Offered for a whole check and still untaken: a thread wakes for it.
            for tracked, token in previous:
                if self._own(tracked, token):
                    self._give(tracked)
            previous = []
            if not running:
                while offered:
                    tracked, token = offered.popleft()
                    if self._own(tracked, token):
                        self._give(tracked)
            try:
                events = epoll.poll(0 if running else -1)
            except (OSError, ValueError):
                return
            check = STALL_CHECK if events else min(check * 2, STALL_MAX)
            ready = []
            for fd, _ in events:
                tracked = parked.get(fd)
                if tracked is None:
                    continue  # the wakeup pipe
                token = tracked.park_token
                if running:
                    ready.append((tracked, token))
                elif self._own(tracked, token):
                    self._give(tracked)
            if ready:
                previous = self._offer(ready)

    def _offer(self, ready):
        """The waiter found ``ready`` ((tracked, token) pairs, reported to it alone) while
        workers run: one per worker waiting on the set goes back in it, armed, to wake it
        (it would not see them here); the rest are offered. Returns what was offered."""
        with self._lock:
            back, offered = ready[:self._polling], ready[self._polling:]
            self._offered.extend(offered)
        for tracked, token in back:
            try:
                self._arm(tracked.fd, True)
            except (OSError, ValueError):
                if self._own(tracked, token):
                    self._give(tracked)  # not watched any more: a thread takes it now
        return offered

    def _give(self, tracked):
        try:
            self._hand_off(tracked)
        except Exception:
            logger.exception("cannot hand a parked connection to the pool")
            tracked.close_parked()
