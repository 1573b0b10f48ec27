"""flup-compatible ``flup.server.threadpool``: ThreadPool with flup's names.

A thin adapter over flupfast.serving.threadpool, which holds the behaviour (and flup's fixed
bugs: deprecated thread APIs, swallowed job exceptions, unbounded shutdown). No logic here.
"""
import sys

from flupfast.serving import threadpool as _threadpool


class ThreadPool(_threadpool.ThreadPool):
    """
    flup's ``threadpool.ThreadPool``: keeps the number of idle threads between minSpare and
    maxSpare inclusive. The total number of threads is unlimited unless maxThreads says
    otherwise.
    """

    def __init__(self, minSpare=1, maxSpare=5, maxThreads=sys.maxsize):
        super().__init__(min_spare=minSpare, max_spare=maxSpare, max_threads=maxThreads)

    def addJob(self, job, allowQueuing=True):
        """
        Adds a job (an object with a run() method) to the work queue. If allowQueuing is
        True (the default), the job is queued even when no thread is idle (which can only
        happen with a finite maxThreads). If allowQueuing is False and no thread is idle,
        the job is not queued.

        Returns True if the job was queued, False otherwise.
        """
        return self.add_job(job, allow_queuing=allowQueuing)
