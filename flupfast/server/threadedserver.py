"""flup-compatible ``flup.server.threadedserver``: ThreadedServer with flup's names and hooks.

A thin adapter over flupfast.serving.threaded (accept loop, pool hand-off, bounded shutdown);
it maps flup's camelCase hooks and attributes only. No serving logic here.
"""
from flupfast.ops import status
from flupfast.serving.listen import set_cloexec as setCloseOnExec  # noqa: F401  (flup's name)
from flupfast.serving.threaded import ThreadedMode
from flupfast.server.singleserver import _AcceptLoopFacade
from flupfast.server.threadpool import ThreadPool

__all__ = ['ThreadedServer']


class ThreadedServer(_AcceptLoopFacade):
    """The threaded mode (flup's ``threadedserver.ThreadedServer``): accepts connections in the
    thread that calls run() and serves each in a thread of a ThreadPool; extra keyword arguments
    (minSpare, maxSpare, maxThreads) go to the pool, which starts its threads here, at
    construction, as flup's does."""

    _shutdownAfterRun = True

    def __init__(self, jobClass=None, jobArgs=(), **kw):
        self._threadPool = ThreadPool(**kw)  # unknown keywords raise TypeError, as flup
        hooks = self._hookArgs()
        hooks['periodic'] = lambda: self._mainloopPeriodic()
        # Workers accept (leader/follower) unless a subclass's _mainloopPeriodic must run after
        # every accept, as flup's loop runs it: then this loop keeps accepting them all.
        hooks['leader_follower'] = \
            type(self)._mainloopPeriodic is _AcceptLoopFacade._mainloopPeriodic
        self._servingMode = ThreadedMode(jobClass, jobArgs, pool=self._threadPool, **hooks)

    def _makeStatusBoard(self):
        pool = self._threadPool
        return status.board_for('thread', pool.min_spare, pool.max_spare, pool.max_threads,
                                pool)

    def run(self, sock, timeout=1.0):
        """
        The main loop. Pass a socket that is ready to accept() client connections. Returns
        True if the loop was exited because of SIGHUP, False otherwise.
        """
        return self._runMode(sock, timeout)

    def shutdown(self):
        """Stop the loop if it is still running and wait for running jobs to finish, for a
        few seconds at most (flup waits forever for kept-alive connections)."""
        self._servingMode.shutdown()
