"""The threaded mode: the accept loop hands each job to a ThreadPool.

Owns the hand-off, the refusal when the pool is full, and a bounded shutdown. It must not know
the protocol, close the listening socket, or wait forever for a kept-alive connection (flup
bug 28).
"""
import logging

from flupfast.serving.single import AcceptLoop
from flupfast.serving.threadpool import ThreadPool

__all__ = ["JOB_GRACE", "ThreadedMode"]

logger = logging.getLogger("flupfast")

# On shutdown, in-flight jobs get this long to finish before run()'s caller carries on; their
# threads are daemons, so a connection kept alive by the web server cannot block the exit.
JOB_GRACE = 5.0


class ThreadedMode(AcceptLoop):
    """Accept in the loop's thread, run each job in ``pool`` (a ThreadPool; by default one
    built from ``min_spare``/``max_spare``/``max_threads``, started at construction as flup's)."""

    def __init__(self, job_class, job_args=(), *, pool=None, is_client_allowed=None,
                 periodic=None, **pool_options):
        super().__init__(job_class, job_args, is_client_allowed=is_client_allowed,
                         periodic=periodic)
        self.pool = pool if pool is not None else ThreadPool(**pool_options)
        self._refused = 0  # connections refused in the current burst

    def dispatch(self, job, client):
        # allow_queuing=False: a job queued behind busy threads may wait forever behind
        # kept-alive connections (flup threadedserver.py:97).
        if self.pool.add_job(job, allow_queuing=False):
            if self._refused:
                logger.warning("worker thread free again; %d connection(s) were refused",
                               self._refused)
                self._refused = 0
            return
        if not self._refused:
            logger.warning("all %d worker threads busy: refusing connections",
                           self.pool.max_threads)
        self._refused += 1
        # Closing tells the web server we are at our limit (flup threadedserver.py:98-103).
        client.close()

    def shutdown(self, timeout=JOB_GRACE):
        """Stop the loop if it still runs (so another thread can end run()), then stop the
        pool, waiting at most ``timeout`` seconds for in-flight jobs."""
        self.stop()
        return self.pool.shutdown(timeout)
