"""A prefork child's memory limit: its resident set against the limit (one pread of
/proc/self/statm, kept open, every CHECK_EVERY requests), and the child's exit once over, after
its request. The decision is policy.rss_over_limit; the child loop itself is not touched: the
job factory is wrapped (arbiter.py's ``_child``).
"""
import logging
import os

from flupfast.serving.job import END
from flupfast.serving.prefork.policy import rss_over_limit

__all__ = ["CHECK_EVERY", "MemoryWatch"]

# The RSS is read after every CHECK_EVERY-th request (or wait between two): one read costs
# about 4,600 instructions in user space plus the kernel's statm (callgrind), some 3.6% of a
# compiled FastCGI request (127k); one in four costs under 1%, and a child over its limit
# serves at most three more requests.
CHECK_EVERY = 4

logger = logging.getLogger("flupfast")


class MemoryWatch:
    """``over()``: whether this process's RSS passed ``limit_bytes``. Opened in the child
    (/proc/self is the process that opens it)."""

    def __init__(self, limit_bytes):
        self.limit_bytes = limit_bytes
        self.limit_pages = limit_bytes // os.sysconf("SC_PAGE_SIZE")
        self._fd = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
        self._countdown = 1  # the first check reads
        self.exceeded = False

    def over(self):
        """Read the RSS now."""
        return rss_over_limit(os.pread(self._fd, 128, 0), self.limit_pages)

    def due(self):
        """Over the limit, as read every CHECK_EVERY calls (once over, always over)."""
        if self.exceeded:
            return True
        self._countdown -= 1
        if self._countdown:
            return False
        self._countdown = CHECK_EVERY
        self.exceeded = self.over()
        return self.exceeded

    def wrap(self, new_job):
        """A job factory for serve_child: ``new_job``'s jobs, ended between two requests once
        the RSS is over (a kept connection closes after its response, as with maxRequests),
        and the child ended after its job then."""
        def make_job(client, addr, *args):
            return _Watched(new_job(client, addr, *args), self)
        return make_job

    def recycle(self):
        """End this child (the parent replaces it): run() in a child ends with SystemExit."""
        logger.info("prefork child %d: resident memory over the limit of %d MB, replacing "
                    "it", os.getpid(), self.limit_bytes >> 20)
        raise SystemExit(0)


class _Watched:
    """The job, under the child loop's two uses (``max_requests`` and ``run()``), with its
    ``on_idle`` asking the watch first."""

    __slots__ = ("job", "watch", "_on_idle")

    def __init__(self, job, watch):
        self.job = job
        self.watch = watch
        self._on_idle = job.on_idle
        job.on_idle = self.on_idle

    @property
    def max_requests(self):
        return self.job.max_requests

    @max_requests.setter
    def max_requests(self, value):
        self.job.max_requests = value

    def on_idle(self, job, parkable):
        if self.watch.due():
            return END
        return self._on_idle(job, parkable)

    def run(self):
        served = self.job.run()
        if self.watch.due():
            self.watch.recycle()
        return served

    def __repr__(self):
        return repr(self.job)
