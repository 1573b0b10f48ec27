"""The prefork parent's answer to an exhausted pool: connections that waited too long with every
child busy are answered "overloaded" in short-lived threads. It must not run the app, wait on a
peer in the parent's thread, or compete with an idle child for a connection.
"""
import logging
import selectors
import threading
import time

from flupfast.limits import FORK_OVERLOAD_WAIT, MAX_OVERLOAD_ANSWERS, OVERLOAD_ANSWER_SECONDS
from flupfast.serving.listen import ACCEPT_RETRY_ERRORS, has_waiting, is_tcp, set_nodelay
from flupfast.serving.prefork.policy import PARENT_TICK, REAP_POLL

__all__ = ["FORK_OVERLOAD_WAIT", "OverloadGuard"]

logger = logging.getLogger("flupfast")


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
        if self._since is None or not has_waiting(listen_sock):
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
