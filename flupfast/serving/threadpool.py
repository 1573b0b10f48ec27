"""A thread pool that keeps between min_spare and max_spare idle workers (flup's ThreadPool).

Owns worker threads and the job queue. It must not know what a job is beyond ``job.run()``,
swallow a job's exception silently (threadpool-job-exceptions), or block shutdown forever
(threaded-stop-kept-connection).
"""
import collections
import logging
import sys
import threading
import time

from flupfast.limits import ACCEPT_BACKOFF, MAX_WAITING_LEADERS, THREAD_POOL_SHUTDOWN_GRACE

__all__ = ["ThreadPool"]

logger = logging.getLogger("flupfast")


class ThreadPool:
    """Thread pool that keeps the number of idle threads between ``min_spare`` and
    ``max_spare``; the total is capped by ``max_threads`` (default: no limit).

    flup semantics (threadpool.py:44-153): ``max_threads = max(min_spare, max_threads)``; the
    pool starts ``max_spare`` threads (never more than ``max_threads``: threadpool-start-capped); a job
    first tops idle threads up to ``min_spare``, then is queued if a thread is free or queuing
    is allowed; a worker whose job ends while ``max_spare`` others are free exits.

    Idle means "free for a new job": a queued job already claims its thread. flup counted a
    thread idle until it dequeued, so a burst of connections queued behind busy threads instead
    of growing the pool, and with kept-alive connections those could wait forever.
    """

    # Free workers that wait on the attached leader at once (limits.py); the other free ones
    # wait on the condition.
    max_leaders = MAX_WAITING_LEADERS

    def __init__(self, min_spare=1, max_spare=5, max_threads=sys.maxsize):
        self.min_spare = min_spare
        self.max_spare = max_spare
        self.max_threads = max(min_spare, max_threads)
        self._cond = threading.Condition()
        self._queue = collections.deque()
        self._leader = None      # while attached: the Leader idle workers accept on
        self._handle = None      # ... and what serves a connection one of them accepted
        self._on_lead = None     # ... and what a worker calls before it waits on the leader
        self._waiting = 0        # workers blocked in wait() (not running a job)
        self._leaders_waiting = 0  # ... of which waiting on the leader
        self._workers = 0
        self._threads = set()
        self._stopping = False
        with self._cond:
            for _ in range(min(max_spare, self.max_threads)):
                self._start_worker()

    @property
    def idle_count(self):
        """Workers free for a new job (waiting and not claimed by a queued job)."""
        with self._cond:
            return self._waiting - len(self._queue)

    @property
    def worker_count(self):
        with self._cond:
            return self._workers

    @property
    def leaders_waiting(self):
        """Free workers waiting on the leader now (read without the lock: a hint)."""
        return self._leaders_waiting

    def has_queued(self):
        """Jobs wait in the queue with no thread free for them. Read without the lock: a hint
        for a worker deciding whether to go back to the queue (asked after every request)."""
        return self._waiting < len(self._queue)

    def _start_worker(self):
        # Caller holds the lock. daemon=True: a busy worker must not keep the process alive.
        thread = threading.Thread(target=self._work, name="flupfast-worker", daemon=True)
        thread.start()  # RuntimeError if the OS refuses a thread
        self._threads.add(thread)
        self._workers += 1
        self._waiting += 1

    def busy_threads(self, exclude=None):
        """Workers running a job (``exclude``: a thread not to count, e.g. the caller's)."""
        with self._cond:
            busy = self._workers - self._waiting
            if exclude is not None and exclude in self._threads and busy > 0:
                busy -= 1
            return busy

    def jobs_in_flight(self, exclude=None):
        """Jobs running and jobs handed over that no worker has taken yet (a free worker
        not yet woken, or every worker busy): what a graceful stop waits for."""
        with self._cond:
            return self.busy_threads(exclude) + len(self._queue)

    def add_job(self, job, allow_queuing=True, queue_limit=None):
        """Hand ``job`` (anything with ``run()``) to a worker. With ``allow_queuing`` it is
        queued even when every thread is busy (only possible with a finite ``max_threads``),
        up to ``queue_limit`` jobs waiting for a thread (None: no limit); otherwise it is
        refused. Returns True if the job was accepted."""
        with self._cond:
            if self._stopping:
                return False
            if not self._top_up():
                return False
            free = self._waiting - len(self._queue)
            if free > 0 or (allow_queuing and (queue_limit is None or -free < queue_limit)):
                self._queue.append(job)
                # One wake-up: a free worker waiting on the leader if there is one (it is
                # counted until it has taken the lock back, so the wake reaches a leader),
                # else one waiting on the condition.
                if self._leader is not None and self._leaders_waiting:
                    self._leader.wake()
                else:
                    self._cond.notify()
                return True
            return False

    def _top_up(self):
        """Caller holds the lock: start workers until ``min_spare`` are free (or
        ``max_threads`` run). False if the OS refused a thread."""
        while (self._waiting - len(self._queue) < self.min_spare
               and self._workers < self.max_threads):
            try:
                self._start_worker()
            except RuntimeError:
                logger.warning("cannot start a worker thread (%d running)", self._workers,
                               exc_info=True)
                return False
        return True

    # -- leader/follower (serving/leader.py) ----------------------------------------------------

    def attach(self, leader, handle, on_lead=None):
        """From now on idle workers take turns accepting on ``leader`` (a Leader) and serve
        what they accept themselves with ``handle(client, addr, exhausted)``, instead of
        waiting for jobs; queued jobs still go first. At most ``max_leaders`` wait on it at
        once; a place a leader leaves goes to the next worker back from a request, and a free
        worker is woken for it only when the last leader leaves. ``exhausted``: no worker is
        free at all; the caller's loop accepts meanwhile. The pool's rules are kept: a worker
        that accepted counts busy, ``min_spare`` free ones are topped up then, ``max_spare``
        bounds the free ones after a job; ``on_lead()`` is called by a free worker before it
        waits on the leader. False (nothing attached) when the pool is stopped."""
        with self._cond:
            if self._stopping:
                return False
            self._leader = leader
            self._handle = handle
            self._on_lead = on_lead
            self._cond.notify_all()  # waiting workers become followers
            return True

    def detach(self):
        """Back to jobs only: the workers waiting on the leader return to the condition."""
        with self._cond:
            leader, self._leader, self._handle = self._leader, None, None
        if leader is not None:
            leader.close()

    def _work(self):
        cond = self._cond
        waiting = True
        with cond:
            try:
                while True:
                    while not self._queue and not self._stopping:
                        leader = self._leader
                        if leader is None or self._leaders_waiting >= self.max_leaders:
                            cond.wait()
                            continue
                        # What runs per connection here is inline (no helper calls): it
                        # is most of the pool's cost on a new connection per request.
                        on_lead, handle = self._on_lead, self._handle
                        self._leaders_waiting += 1
                        cond.release()
                        try:
                            if on_lead is not None:
                                on_lead()
                            try:
                                accepted = leader.lead()  # GIL released while it waits
                            except OSError as exc:
                                accepted = self._accept_failed(exc)
                        finally:
                            cond.acquire()
                            self._leaders_waiting -= 1
                            if not self._leaders_waiting and self._waiting > 1:
                                # The last leader leaves (with a connection, or for a
                                # queued job or a stop): another free worker leads, or a new
                                # connection waits until a job ends (the mode's loop accepts
                                # only while no worker is free).
                                cond.notify()
                        if accepted is None:
                            continue  # woken: a queued job, a stop, or the leader went
                        self._waiting -= 1
                        waiting = False
                        free = self._waiting - len(self._queue)
                        if free < self.min_spare:
                            self._top_up()
                            free = self._waiting - len(self._queue)
                        # Nobody left to accept: the mode's loop takes the connections (and
                        # queues or refuses them) until a worker leads again.
                        exhausted = free <= 0
                        client, addr = accepted
                        cond.release()
                        # Served with the ``handle`` it led for, even when the pool was
                        # detached or stopped meanwhile: the web server sent a request on it
                        # (closing it would answer with a reset, a 502 behind nginx), and a
                        # stop lets running jobs end.
                        try:
                            handle(client, addr, exhausted)
                        except Exception:
                            logger.exception("unhandled exception serving %r", addr)
                        finally:
                            cond.acquire()
                        break
                    else:
                        if self._stopping:
                            return
                        job = self._queue.popleft()
                        self._waiting -= 1
                        waiting = False
                        cond.release()
                        try:
                            self._run_job(job)
                        finally:
                            cond.acquire()
                    # Too many free threads: this one leaves (flup threadpool.py:143-144).
                    if self._waiting - len(self._queue) >= self.max_spare:
                        return
                    self._waiting += 1
                    waiting = True
            finally:
                if waiting:
                    self._waiting -= 1
                self._workers -= 1
                self._threads.discard(threading.current_thread())

    @staticmethod
    def _accept_failed(exc):
        """EMFILE and the like while leading: the connection stays queued; back off, as the
        accept loop does. None: nothing accepted."""
        logger.error("accept() failed: %s; pausing %.1f s", exc, ACCEPT_BACKOFF)
        time.sleep(ACCEPT_BACKOFF)
        return None

    @staticmethod
    def _run_job(job):
        try:
            job.run()
        except Exception:
            logger.exception("unhandled exception in job %r", job)

    def shutdown(self, timeout=THREAD_POOL_SHUTDOWN_GRACE, waited=0.0):
        """Stop the workers: idle ones exit now, busy ones after their job. Join them for at
        most ``timeout`` seconds in all (None: forever; flup always waits forever; ``waited``:
        seconds the caller already waited, for the log). Jobs still
        queued are dropped. Returns the list of dropped jobs; ``worker_count`` tells how many
        workers are still busy."""
        deadline = None if timeout is None else time.monotonic() + timeout
        current = threading.current_thread()
        with self._cond:
            self._stopping = True
            dropped = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
            leader, self._leader, self._handle = self._leader, None, None
            threads = [thread for thread in self._threads if thread is not current]
        if leader is not None:
            leader.close()
        for thread in threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        busy = sum(thread.is_alive() for thread in threads)
        if busy:
            logger.warning("thread pool shutdown: %d job(s) still running after %.1f s",
                           busy, waited + timeout)
        if dropped:
            logger.warning("thread pool shutdown: %d queued job(s) dropped", len(dropped))
        return dropped

    def restart(self):
        """Serve again after ``shutdown`` (flup's ``while server.run(): ...`` runs the same
        server, and so the same pool, once per reload): workers start as at construction."""
        with self._cond:
            if not self._stopping:
                return
            self._stopping = False
            for _ in range(max(0, min(self.max_spare, self.max_threads) - self._workers)):
                self._start_worker()
