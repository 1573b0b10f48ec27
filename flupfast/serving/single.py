"""The accept loop shared by the single and threaded modes, and the single mode (jobs inline).

Owns: wait for a connection or a wakeup, accept, tune the client socket, check the allow-list,
build the job and hand it to ``dispatch``. It must not know the protocol, close the listening
socket (its owner does), or act on signals other than through LoopControl's flags.
"""
import logging
import selectors
import socket
import time

from flupfast import _impl
from flupfast.limits import ACCEPT_BACKOFF
from flupfast.serving.job import END, WAIT, JobSource
from flupfast.serving.listen import (
    ACCEPT_EXHAUSTION_ERRNOS, ACCEPT_RETRY_ERRORS, is_tcp, set_cloexec, set_nodelay)
from flupfast.output import shutdown_quietly
from flupfast.serving.signals import LoopControl

__all__ = ["ACCEPT_BACKOFF", "AcceptLoop", "SingleMode"]

logger = logging.getLogger("flupfast")



def _allow_all(addr):
    return True


def _no_op():
    pass


class AcceptLoop(JobSource, LoopControl):
    """select -> accept -> allow-list -> ``job_class(client, addr, *job_args)`` -> dispatch.

    ``is_client_allowed(addr)`` and ``periodic()`` are the front end's hooks (flup's
    ``_isClientAllowed`` and ``_mainloopPeriodic``); ``periodic`` runs every iteration, i.e.
    after each accept or ``timeout`` (flup threadedserver.py:104).
    """

    listener_watched = False  # whether the loop waits on the listening socket now

    def __init__(self, job_class, job_args=(), *, is_client_allowed=None, periodic=None):
        super().__init__()
        self.job_class = job_class
        self.job_args = tuple(job_args)
        self.is_client_allowed = is_client_allowed or _allow_all
        self.periodic = periodic or _no_op

    def run(self, sock, timeout=1.0):
        """Install the default signal handlers, serve until stopped, restore them. Returns True
        when stopped by SIGHUP (or ``stop(reload=True)``)."""
        self.reset()
        self.install_signals()
        try:
            return self.serve(sock, timeout)
        finally:
            self.restore_signals()

    def serve(self, sock, timeout=1.0):
        """The loop alone (handlers are the caller's business). Returns ``reload_requested``."""
        set_cloexec(sock)
        tcp = is_tcp(sock)
        signals = self.signals
        signals.open()
        selector = selectors.DefaultSelector()
        self.listener_watched = False
        try:
            selector.register(signals, selectors.EVENT_READ, signals)
            self.loop_opened(sock)
            while self.keep_going:
                if self.watch_listener() != self.listener_watched:
                    self.listener_watched = not self.listener_watched
                    if self.listener_watched:
                        selector.register(sock, selectors.EVENT_READ, sock)
                    else:
                        selector.unregister(sock)
                # PEP 475 retries EINTR inside select(); the wakeup socket ends the wait instead.
                ready = selector.select(timeout)
                listener_ready = False
                for key, _ in ready:
                    if key.data is signals:
                        signals.drain()
                    else:
                        listener_ready = True
                if listener_ready and self.keep_going:
                    self._accept_one(sock, tcp)
                self.periodic()
        finally:
            try:
                self.loop_closing(sock)
            finally:
                selector.close()
                signals.close()
        return self.reload_requested

    def _accept_one(self, sock, tcp):
        try:
            client, addr = sock.accept()
        except ACCEPT_RETRY_ERRORS:
            return  # flup retries EINTR/EAGAIN (threadedserver.py:84-87)
        except OSError as exc:
            if exc.errno not in ACCEPT_EXHAUSTION_ERRNOS:
                raise
            logger.error("accept() failed: %s; pausing %.1f s", exc, ACCEPT_BACKOFF)
            time.sleep(ACCEPT_BACKOFF)
            return
        # Python's accept() already makes the client socket close-on-exec (flup sets it itself).
        if tcp:
            set_nodelay(client)
        if not self.is_client_allowed(addr):
            client.close()
            return
        job = _impl.new_job(self.new_job, client, addr, self.job_args)
        self.dispatch(job, client)

    def loop_opened(self, sock):
        """The loop can be woken now (``signals``): a mode may let others accept."""

    def loop_closing(self, sock):
        """The loop ends (a stop, or an error): whatever ``loop_opened`` started stops."""

    def watch_listener(self):
        """Whether this loop accepts now (asked before each wait): always, unless the mode
        has others accept (the threaded mode's leader/follower workers)."""
        return True

    def dispatch(self, job, client):
        raise NotImplementedError


class SingleMode(AcceptLoop):
    """One connection at a time: the job runs in the loop's thread (flup singleserver.py:88-93).
    Signals are acted on between connections, and also while a persistent connection (AJP,
    FastCGI KEEP_CONN) waits idle for its next request: a job that says it is ``idle`` has
    its socket's read side shut, so its blocked read ends (flup waits for the web server)."""

    _job = None     # the running job and its socket, while dispatch runs
    _client = None

    @property
    def keep_going(self):
        return self._keep_going

    @keep_going.setter
    def keep_going(self, value):
        self._keep_going = value
        if not value and self._job is not None and self._job.idle:
            shutdown_quietly(self._client, socket.SHUT_RD)

    def _on_idle(self, job, parkable):
        """A job going idle after a stop (one that came while it was busy) ends at once."""
        return WAIT if self._keep_going else END

    def dispatch(self, job, client):
        self._job, self._client = job, client
        job.on_idle = self._on_idle
        try:
            job.run()
        except Exception:
            # flup lets it end run(); one broken connection should not stop the server.
            logger.exception("unhandled exception in job %r", job)
            client.close()
        finally:
            self._job = self._client = None
