"""flup-compatible ``flup.server.preforkserver``: PreforkServer with flup's names and hooks.

A thin adapter over flupfast.serving.prefork (pool policy, children, shutdown); it validates
arguments with flup's messages and maps flup's camelCase hooks and attributes. No serving
logic here.
"""
import signal

from flupfast.ops import status
from flupfast import ops
from flupfast.serving.listen import set_cloexec as setCloseOnExec  # noqa: F401  (flup's name)
from flupfast.serving.prefork import PreforkMode, notify_parent
from flupfast.serving.prefork.child import end_for_request_timeout
from flupfast.server.singleserver import _ModeFacade


class PreforkServer(_ModeFacade):
    """
    The prefork mode (flup's ``preforkserver.PreforkServer``), in the manner of Apache
    httpd: there are always at least minSpare children ready for new requests, and at most
    maxChildren children in all. Idle children above maxSpare are killed.

    If maxRequests is positive, each child serves that many requests in its lifetime, then
    exits and is replaced. Requests are counted, not connections.

    jobClass is a class whose constructor takes at least two arguments, the client socket
    and the client address; jobArgs (a list or tuple) holds any further static arguments.
    Its run() method (no arguments) does the work; when run() returns, the child is idle
    again. run() may return the number of requests it served (None counts as one).

    Not in flup: maxRequestsJitter adds randint(0, maxRequestsJitter) to each child's
    maxRequests (gunicorn's max_requests_jitter), so children do not all restart at once;
    maxMemory (MB) replaces a child once its resident memory passes it, after its request.

    sockTimeout is a timeout in seconds for accepted sockets: 0 (the default) for blocking
    sockets, or more (an int or a float) to bound each read and write, which limits the
    damage of bad connectivity.
    """

    _frontFlags = {'multithreaded': False, 'multiprocess': True}
    # flup's prefork front ends drop these silently (fcgi_fork.py:99).
    _frontIgnored = ('multithreaded', 'multiprocess', 'jobClass', 'jobArgs')
    # requestTimeout ends the child running the request (the pool replaces it).
    _requestTimeoutEnd = staticmethod(end_for_request_timeout)

    def __init__(self, minSpare=1, maxSpare=5, maxChildren=50, maxRequests=0, sockTimeout=0,
                 jobClass=None, jobArgs=(), maxRequestsJitter=0, maxMemory=0):
        # flup's checks and messages (preforkserver.py:113-119).
        if minSpare < 1:
            raise ValueError("minSpare must be at least 1!")
        if maxSpare < minSpare:
            raise ValueError("maxSpare must be greater than, or equal to, minSpare!")
        if type(sockTimeout) not in (int, float) or sockTimeout < 0:
            raise ValueError("sockTimeout must be an int or float, greater than or equal to 0")
        hooks = self._hookArgs()
        hooks['child_main'] = lambda sock, parent: self._child(sock, parent)
        hooks['restore_signals'] = lambda: self._restoreSignalHandlers()
        self._servingMode = PreforkMode(
            jobClass, jobArgs, min_spare=minSpare, max_spare=maxSpare,
            max_children=max(maxSpare, maxChildren), max_requests=maxRequests,
            sock_timeout=sockTimeout, max_requests_jitter=maxRequestsJitter,
            max_memory=int(maxMemory * 1024 * 1024), **hooks)

    def _makeStatusBoard(self):
        mode = self._servingMode
        limits = mode.limits
        mode.worker_slots = status.board_for('fork', limits.min_spare, limits.max_spare,
                                             limits.max_children)
        return mode.worker_slots

    def run(self, sock):
        """
        The main loop. Pass a socket that is ready to accept() client connections. Returns
        True if the loop was exited because of SIGHUP, False otherwise. In each child, run()
        ends by raising SystemExit(0), as flup's does.
        """
        return self._runMode(sock)

    # -- flup's attributes ---------------------------------------------------------------------

    @property
    def _children(self):
        """Maps pids to the parent's record of each child (its socket and state)."""
        return self._servingMode.children

    @property
    def _minSpare(self):
        return self._servingMode.limits.min_spare

    @property
    def _maxSpare(self):
        return self._servingMode.limits.max_spare

    @property
    def _maxChildren(self):
        return self._servingMode.limits.max_children

    @property
    def _maxRequests(self):
        return self._servingMode.max_requests

    @property
    def _sockTimeout(self):
        return self._servingMode.sock_timeout

    # -- flupfast's additions ------------------------------------------------------------------

    @property
    def overloadWait(self):
        """Seconds connections may wait with all maxChildren children busy before the parent
        answers them "overloaded" (FastCGI FCGI_OVERLOADED, SCGI/AJP 503); None: never, as
        flup. Default flupfast.limits.FORK_OVERLOAD_WAIT."""
        return self._servingMode.overload_wait

    @overloadWait.setter
    def overloadWait(self, seconds):
        self._servingMode.overload_wait = seconds

    # -- flup's hooks --------------------------------------------------------------------------

    def _spawnChild(self, sock):
        """
        Spawn a single child. Returns True if successful, False otherwise.
        """
        return self._servingMode.spawn_child(sock)

    def _reapChildren(self):
        """Cleans up self._children whenever children die (never blocks)."""
        self._servingMode.reap_children()

    def _cleanupChildren(self):
        """
        Closes all child sockets (idle children exit at once) and sends SIGINT to the busy
        ones. Children still running after a grace period get SIGTERM, then SIGKILL; all are
        reaped.
        """
        self._servingMode.retire_all_children()

    def _child(self, sock, parent):
        """Main loop for children."""
        ops.become_worker(self._servingMode.child_number)
        self._servingMode._child(sock, parent, check_peers=not self._admitsEveryPeer())

    def _notifyParent(self, parent, msg):
        """Send a status message to the parent; False if the parent is gone."""
        return notify_parent(parent, msg)

    # Signal handlers: they only set flags; the loop acts.

    def _usr1Handler(self, signum, frame):
        # Replace every child once it is idle (flup crashed here: it sent a str).
        self._servingMode.purge_requested = True

    def _chldHandler(self, signum, frame):
        # Nothing to do: the signal already woke the loop, which reaps children.
        pass

    def _signalHandlers(self):
        handlers = _ModeFacade._signalHandlers(self)
        if hasattr(signal, 'SIGUSR1'):
            handlers[signal.SIGUSR1] = self._usr1Handler
        if hasattr(signal, 'SIGCHLD'):
            handlers[signal.SIGCHLD] = self._chldHandler
        return handlers
