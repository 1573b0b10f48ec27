"""The threaded mode: the accept loop hands each job to a ThreadPool.

Owns the hand-off, the bounded queue when every thread is busy (and the "overloaded" answer
beyond it), ending idle persistent connections when their threads are needed, and a bounded
shutdown, and parking persistent connections idle between requests (serving/parking.py).
It must not know the protocol (a job answers "overloaded" itself, and says when it parked),
close the listening socket, or wait forever for a kept-alive connection (threaded-stop-kept-connection).
"""
import logging
import socket
import threading
import time

from flupfast import _impl
from flupfast.limits import MAX_QUEUED_CONNECTIONS, THREAD_JOB_GRACE
from flupfast.output import shutdown_quietly
from flupfast.serving import handover
from flupfast.serving.job import END, PARK, WAIT
from flupfast.serving.listen import is_tcp, set_nodelay
from flupfast.serving.parking import ParkedSet, supported as parking_supported
from flupfast.serving.single import AcceptLoop
from flupfast.serving.threadpool import ThreadPool

__all__ = ["ThreadedMode"]

logger = logging.getLogger("flupfast")

# While shutdown waits, how often it looks for jobs that went idle (a persistent connection
# whose request just ended) to end their wait for the next request.
IDLE_POLL = 0.05


class _ActiveJob:
    """A job and its socket while the pool holds it, so the mode can end the wait of a job
    that says it is ``idle`` (a persistent AJP or FastCGI KEEP_CONN connection between
    requests, an SCGI connection before its request) by shutting its socket's read side, as
    SingleMode does; a job that is about to go idle asks it first (``on_idle``,
    serving/job.py). A worker that accepted a connection runs it with this alone until it
    parks (ThreadedMode._serve_accepted)."""

    __slots__ = ("job", "client", "_active")

    def __init__(self, job, client, active):
        self.job = job
        self.client = client
        self._active = active  # the mode's set of them, which it leaves when the job ends

    def run(self):
        try:
            return _impl.run_job(self.job)
        finally:
            self._active.discard(self)

    def end_if_idle(self, stopping):
        """End the job's wait if it is idle. To free a thread (not ``stopping``) only a
        persistent connection between requests is ended, never one whose first request is on
        its way (an SCGI connection waits ``idle`` for its header, with nothing served yet)."""
        job = self.job
        if job.idle and (stopping or job.served > 0):
            shutdown_quietly(self.client, socket.SHUT_RD)
            return True
        return False

    def __repr__(self):
        return repr(self.job)


class _TrackedJob(_ActiveJob):
    """An _ActiveJob the pool runs as a job of its own (queued, or taken up from the parked
    set), with its ``run()``.

    With ``parked`` (a ParkedSet), a job that ``can_park`` is told PARK instead of waiting
    idle: it returns from ``run()`` with ``parked`` set; it is then watched in the set, and the
    worker that owns the set's chain goes on with the next ready parked connection, if any,
    before it goes back to the pool (_serve_ready): under load one thread serves request after
    request with no wake-up in between."""

    __slots__ = ("_parked", "_pool", "registered", "park_token", "fd")

    def __init__(self, job, client, active, mode, parked=None, pool=None):
        if parked is not None and not job.can_park:
            parked = None
        super().__init__(job, client, active)
        self._parked = parked
        self._pool = pool
        self.registered = False  # in the parked set's epoll (kept there, disarmed, when taken)
        self.park_token = None   # while parked: who takes it (parking.py)
        self.fd = client.fileno() if parked is not None else -1
        # The mode's answer, bound once per mode: a method of this object stored on the job
        # made a job <-> tracked cycle per connection, freed only by the garbage collector.
        job.on_idle = mode.idle_answers[parked is not None]

    def run(self):
        parked = self._parked
        if parked is None:
            return _ActiveJob.run(self)
        parked.enter()
        try:
            self._run_once(parked)
            _serve_ready(parked, self._pool, self._active)
        finally:
            parked.leave()

    def _run_once(self, parked):
        job = self.job
        try:
            _impl.run_job(job)
        finally:
            self._active.discard(self)
            if job.parked and not parked.park(self):
                self.close_parked()  # the mode stopped meanwhile

    def close_parked(self):
        """End a parked connection (the mode stops): nothing is in flight on it."""
        try:
            self.client.close()
        except OSError:
            pass


def _serve_ready(parked, pool, active):
    """After a request, the worker that owns the parked set's chain goes on with the next
    ready parked connection, if any (between ``parked.enter()`` and ``leave()``). Connections
    queued for a thread go first: this one goes back to the pool. Nothing parked (a connection
    that closed, keep_conn off): no linger on an empty set; the thread is free for the next
    connection at once (asked first: on that path the queue's question is not asked at all)."""
    while parked.has_parked() and not pool.has_queued():
        tracked = parked.take_ready()
        if tracked is None:
            return
        active.add(tracked)
        tracked._run_once(parked)


class ThreadedMode(AcceptLoop):
    """Accept in the loop's thread, run each job in ``pool`` (a ThreadPool; by default one
    built from ``min_spare``/``max_spare``/``max_threads``, started at construction as flup's).

    With every thread busy (``max_threads`` reached), a connection waits in the pool's queue,
    at most ``max_queued`` of them; to free a thread, a persistent connection idle between
    requests is ended (the web server reconnects). Beyond the bound the job answers the
    protocol's "overloaded" reply (``job.refuse_overloaded()``; a flup-style job is closed,
    as flup closes every connection past ``maxThreads``).

    With ``parking`` (the default where epoll exists), while ``serve()`` runs, a persistent
    connection idle between requests holds no thread: it waits in a ParkedSet and comes back
    to a worker when the web server sends its next request.
    """

    def __init__(self, job_class, job_args=(), *, pool=None, is_client_allowed=None,
                 periodic=None, max_queued=MAX_QUEUED_CONNECTIONS, parking=True,
                 leader_follower=True, **pool_options):
        super().__init__(job_class, job_args, is_client_allowed=is_client_allowed,
                         periodic=periodic)
        self.pool = pool if pool is not None else ThreadPool(**pool_options)
        self.max_queued = max_queued
        self.leader_follower = leader_follower
        self._tcp = False
        self._leading = False  # while serve() runs leader/follower
        self._listener_timeout = None
        self._active = set()  # _ActiveJob of every job the pool holds (queued or running)
        self._queued_burst = 0  # connections queued behind busy threads in the current burst
        self._refused = 0       # connections answered "overloaded" in the current burst
        self.parked = ParkedSet(self._hand_off) if parking and parking_supported() else None
        # On a reload, idle kept connections are kept for the next run (or the image the
        # command line executes) rather than closed; False closes them, as a stop does.
        self.hand_over_idle = True
        self._listen_name = None  # the address of the socket serve() last served
        # What a job is told when about to wait (its ``on_idle``), without and with the parked
        # set: bound once here, not per connection (_TrackedJob).
        self.idle_answers = (self._idle_answer, self._idle_answer_parking)

    def _idle_answer(self, job, parkable):
        """The answer to a job about to wait: END when the mode stops or when a queued
        connection waits for a thread (never for a new connection, whose first request is on
        the way); else WAIT."""
        if not self.keep_going or (job.served > 0 and self.pool.idle_count < 0):
            return END
        return WAIT

    def _idle_answer_parking(self, job, parkable):
        """The same for a job that may park: PARK when it can be watched without a thread."""
        if parkable:
            # A reload keeps the connection for the next run or image (handover.py).
            return PARK if (self.parked.open and self.keep_going) or self.handing_over else END
        return self._idle_answer(job, parkable)

    @property
    def handing_over(self):
        """A reload is under way and idle kept connections go to the next run or image."""
        return self.hand_over_idle and self.reload_requested and not self.keep_going

    def serve(self, sock, timeout=1.0):
        """The accept loop, with the parked set open while it runs: when it ends (a stop),
        parked connections are closed at once, as idle ones are. A reload keeps them instead
        (and those that go idle while the requests in flight end: ``shutdown``), and the next
        serve() on the same socket takes them up first, so the web server's kept connections
        (Apache's AJP pool, nginx's upstream keepalive) survive it."""
        self.pool.restart()  # run() again after a reload's shutdown
        parked = self.parked
        if parked is None:
            return super().serve(sock, timeout)
        self._listen_name = sock.getsockname()
        parked.start()
        try:
            self._adopt(handover.take_connections(self._listen_name))
            return super().serve(sock, timeout)
        finally:
            parked.close(keep=self.handing_over)

    def _adopt(self, clients):
        """Serve connections a reload kept: each waits parked for its next request."""
        for client in clients:
            try:
                addr = client.getpeername() if is_tcp(client) else ''
            except OSError:
                client.close()  # the web server left meanwhile
                continue
            if not self.is_client_allowed(addr):
                client.close()
                continue
            job = _impl.new_job(self.new_job, client, addr, self.job_args)
            if not job.can_park:
                self.dispatch(job, client)
                continue
            job.parked = True  # its next run() reads at once, once the set says readable
            tracked = _TrackedJob(job, client, self._active, self, self.parked, self.pool)
            if not self.parked.park(tracked):
                tracked.close_parked()

    def loop_opened(self, sock):
        """Leader/follower where the pool supports it (serving/leader.py): idle workers accept
        and serve; this loop acts on signals, and accepts only while no worker is free (to
        queue, end idle persistent connections or answer "overloaded", as before). A
        ``periodic`` hook that must run after every accept (``leader_follower`` False), or a
        pool of another kind, keeps the classic loop: this thread accepts every connection.
        Started once the loop can be woken: a worker that takes the last free thread wakes it."""
        pool = self.pool
        if not (self.leader_follower and hasattr(pool, "attach")):
            return
        self._listener_timeout = sock.gettimeout()
        sock.setblocking(False)  # a worker and this loop may race for one connection
        self._tcp = is_tcp(sock)
        leader = _impl.Leader(sock)
        if pool.attach(leader, self._serve_accepted, self._worker_free):
            self._leading = True
        else:  # a stopped pool: the classic loop refuses
            leader.close()
            sock.settimeout(self._listener_timeout)

    def _worker_free(self):
        """A worker (counted free) is about to lead: if the loop still accepts, it wakes to
        give accepting back (else it would only see so at its next connection)."""
        if self.listener_watched:
            self.signals.wake()

    def loop_closing(self, sock):
        if self._leading:
            self._leading = False
            self.pool.detach()
            sock.settimeout(self._listener_timeout)

    def watch_listener(self):
        """AcceptLoop's question: accept here only while no worker waits to lead."""
        return not self._leading or self.pool.idle_count <= 0

    def _serve_accepted(self, client, addr, exhausted):
        """A worker accepted ``client``: serve it in this thread. ``exhausted``: no worker is
        left to accept, so the loop must (it watches the listener again)."""
        if exhausted:
            self.signals.wake()
        if self._tcp:
            set_nodelay(client)
        if not self.is_client_allowed(addr):
            client.close()
            return
        job = _impl.new_job(self.new_job, client, addr, self.job_args)
        parked = self.parked
        parkable = parked is not None and parked.open and job.can_park
        # Tracked as a job that never parks, whatever it is: a new connection, the path of
        # every request where the web server does not keep connections (nginx's default
        # keep_conn off, SCGI, uwsgi). Only one that parks after its request (or a set with
        # connections parked) goes on through the set (_park_and_serve_ready).
        job.on_idle = self.idle_answers[parkable]
        tracked = _ActiveJob(job, client, self._active)
        self._active.add(tracked)
        try:
            tracked.run()
            if parkable and (job.parked or parked.has_parked()):
                self._park_and_serve_ready(job, client)
        except Exception:
            logger.exception("unhandled exception in job %r", tracked)

    def _park_and_serve_ready(self, job, client):
        """A new connection's first run ended: park it if it parked (its _TrackedJob is made
        only now), then serve ready parked connections as _TrackedJob.run does."""
        parked, pool = self.parked, self.pool
        parked.enter()
        try:
            if job.parked:
                tracked = _TrackedJob(job, client, self._active, self, parked, pool)
                if not parked.park(tracked):
                    tracked.close_parked()  # the mode stopped meanwhile
            _serve_ready(parked, pool, self._active)
        finally:
            parked.leave()

    def dispatch(self, job, client):
        parked = self.parked
        if parked is not None and not parked.open:
            parked = None
        tracked = _TrackedJob(job, client, self._active, self, parked, self.pool)
        self._active.add(tracked)
        if self.pool.add_job(tracked, queue_limit=self.max_queued):
            waiting = -self.pool.idle_count  # jobs in the queue with no thread for them
            if waiting > 0:
                if not self._queued_burst:
                    logger.warning("all %d worker threads busy: queueing connections (at "
                                   "most %d)", self.pool.max_threads, self.max_queued)
                self._queued_burst += 1
                self._end_idle_jobs(waiting)
            elif self._queued_burst or self._refused:
                logger.warning("worker thread free again; %d connection(s) were queued, %d "
                               "answered 'overloaded'", self._queued_burst, self._refused)
                self._queued_burst = self._refused = 0
            return
        self._active.discard(tracked)
        if not self._refused:
            logger.warning("all %d worker threads busy and %d connections queued: answering "
                           "'overloaded'", self.pool.max_threads, self.max_queued)
        self._refused += 1
        job.refuse_overloaded()

    def _hand_off(self, tracked):
        """A parked connection the web server sent a request on, with no worker about to take
        it: to the pool. Not bounded by ``max_queued``: it was accepted already, and its
        request must not be refused."""
        self._active.add(tracked)
        if not self.pool.add_job(tracked):
            self._active.discard(tracked)
            tracked.close_parked()  # the pool stops

    def _end_idle_jobs(self, limit=None):
        """End the wait of up to ``limit`` idle persistent connections, to free threads for
        queued ones; with no limit (stopping), of every idle connection."""
        ended = 0
        for tracked in list(self._active):
            if limit is not None and ended >= limit:
                break
            if tracked.end_if_idle(stopping=limit is None):
                ended += 1
        return ended

    def shutdown(self, timeout=THREAD_JOB_GRACE):
        """Stop the loop if it still runs (so another thread can end run()), then stop the
        pool, waiting at most ``timeout`` seconds for in-flight jobs. Persistent connections
        idle between requests, now or once their request ends, are closed at once: the web
        server keeping one open must not hold the exit for the whole grace."""
        self.stop()
        if self.parked is not None:
            self.parked.close()
        self._end_idle_jobs()
        current = threading.current_thread()
        started = time.monotonic()
        # A job handed to a free worker that has not woken yet counts: it would be dropped.
        # Without a timeout the wait is forever, as flup's.
        while self.pool.jobs_in_flight(exclude=current) and \
                (timeout is None or time.monotonic() - started < timeout):
            time.sleep(IDLE_POLL)
            self._end_idle_jobs()
        if timeout is None:
            dropped = self._drop(self.pool.shutdown(None))
        else:
            left = max(0.0, timeout - (time.monotonic() - started))
            dropped = self._drop(self.pool.shutdown(left, waited=timeout - left))
        self._keep_parked()
        return dropped

    def _keep_parked(self):
        """Hand the connections a reload kept to whoever serves the same socket next."""
        if self.parked is not None:
            kept = self.parked.take_kept()
            if kept and self._listen_name is not None:
                handover.keep_connections(self._listen_name, [t.client for t in kept])
            else:
                for tracked in kept:
                    tracked.close_parked()

    def _drop(self, dropped):
        """Close the connections of jobs that never ran (the pool dropped them)."""
        for tracked in dropped:
            if isinstance(tracked, _TrackedJob):  # not a job someone else queued
                self._active.discard(tracked)
                tracked.client.close()
        return dropped
