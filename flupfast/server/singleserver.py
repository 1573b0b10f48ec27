"""flup-compatible ``flup.server.singleserver``: SingleServer, plus the flup hooks and flags
the three mode facades share (``_ModeFacade``).

A thin adapter over flupfast.serving (the loop, the signal policy); it only maps flup's
camelCase hooks and attributes onto them. No serving logic here.
"""
import signal

from flupfast import ops
from flupfast.serving.listen import set_cloexec as setCloseOnExec  # noqa: F401  (flup's name)
from flupfast.ops import status
from flupfast.serving.single import SingleMode

__all__ = ['SingleServer']


class _ModeFacade(object):
    """flup's de-facto mode API (connection-internals) over a ``flupfast.serving`` mode object.

    The flags live in the mode, so a subclass's ``_hupHandler``/``_intHandler`` that sets
    ``self._keepGoing = False`` stops the loop (and wakes it) exactly as flup's did.
    """

    _servingMode = None  # set by the concrete facade's __init__

    # -- flags ---------------------------------------------------------------------------------

    @property
    def _keepGoing(self):
        return self._servingMode.keep_going

    @_keepGoing.setter
    def _keepGoing(self, value):
        mode = self._servingMode
        mode.keep_going = value
        if not value:
            mode.signals.wake()  # the loop may be waiting; safe from a handler or a thread

    @property
    def _hupReceived(self):
        return self._servingMode.reload_requested

    @_hupReceived.setter
    def _hupReceived(self, value):
        self._servingMode.reload_requested = value

    @property
    def _jobClass(self):
        return self._servingMode.job_class

    @_jobClass.setter
    def _jobClass(self, value):
        self._servingMode.job_class = value

    @property
    def _jobArgs(self):
        return self._servingMode.job_args

    @_jobArgs.setter
    def _jobArgs(self, value):
        self._servingMode.job_args = tuple(value)

    # -- what the nine protocol servers share ---------------------------------------------------

    # Whether a protocol server's run() ends with shutdown() (the threaded mode: a bounded wait
    # for its running jobs). flup's AJP front ends skip it, because kept AJP connections would
    # block it forever; ours waits a bounded time for running requests, then leaves idle ones.
    _shutdownAfterRun = False
    # During a protocol server's run(): its handlers are restored after the drain, not when
    # the mode's loop ends (_runServer).
    _handlersKeptForDrain = False

    # The status page's board (flupfast.ops.workers), when ``statusPath`` was given.
    _statusBoard = None

    # How requestTimeout ends a request: None raises RequestTerminated in its thread; the
    # prefork mode ends the child instead (serving/prefork/child.py).
    _requestTimeoutEnd = None

    # What the mode fixes of a protocol server's flags (server/_front.py ``assemble``), and the
    # keywords its front ends ignore, as flup's do.
    _frontFlags = {}
    _frontIgnored = ('jobClass', 'jobArgs')

    def _startMode(self, mode_server, job_class, job_args, kw):
        """Build ``mode_server`` (the mode facade a protocol server derives from) to run
        ``job_class(sock, addr, *job_args)``; flup's keywords in its ``_frontIgnored`` are
        ignored, as flup ignores them. ``statusPath`` (flupfast's addition, e.g. '/fpm-status')
        answers PHP-FPM's status page there, before the application. ``requestTimeout``
        (seconds; flupfast's addition) ends a request still running after that long:
        flupfast.ops.RequestTimeout."""
        for key in mode_server._frontIgnored:
            kw.pop(key, None)
        status_path = kw.pop('statusPath', None)
        request_timeout = kw.pop('requestTimeout', None)
        self._frontJobArgs = tuple(job_args)
        mode_server.__init__(self, jobClass=job_class, jobArgs=job_args, **kw)
        ops.set_request_timeout(request_timeout, self._requestTimeoutEnd)
        if status_path is not None:
            self._statusBoard = self._makeStatusBoard()
            self.application = status.StatusPage(self.application, status_path,
                                                 self._statusBoard)

    def _runServer(self, mode_server):
        """A protocol server's run(): its protocol's front-end run (``_run_front``: socket,
        logging, allow-lists) around ``mode_server``'s loop. The connections get their
        settings as one object built here (``_connectionConfig``), after the job arguments."""
        config = self._connectionConfig()
        self._jobArgs = self._frontJobArgs + (() if config is None else (config,))
        # The drain of the requests in flight (thread mode's shutdown, bounded) runs under
        # run()'s handlers still: a stop signal during it (SIGTERM after a SIGHUP's reload
        # began) must not end the process by its default action midway through a request.
        self._handlersKeptForDrain = self._shutdownAfterRun
        try:
            return self._run_front(mode_server.run)
        finally:
            try:
                if self._shutdownAfterRun:
                    self.shutdown()
            finally:
                if self._handlersKeptForDrain:
                    self._handlersKeptForDrain = False
                    self._restoreSignalHandlers()

    # -- hooks ---------------------------------------------------------------------------------

    def _hookArgs(self):
        """The front end's hooks, looked up at call time so later overrides count."""
        return {'is_client_allowed': lambda addr: self._isClientAllowed(addr)}

    def _runMode(self, *args):
        """flup's run() shape: reset flags, install handlers, loop, restore handlers."""
        mode = self._servingMode
        mode.reset()
        if self._statusBoard is not None:
            status.watch(self._statusBoard, args[0])
        self._installSignalHandlers()
        try:
            return mode.serve(*args)
        finally:
            if not self._handlersKeptForDrain:
                self._restoreSignalHandlers()

    def _isClientAllowed(self, addr):
        """Override to provide access control."""
        return True

    def _admitsEveryPeer(self):
        """Whether the client check in force admits every peer without looking: the
        protocol base's own ``_isClientAllowed`` (not an override, on the class or the
        instance) with its lists unset (``_peerListsUnset``). A prefork child, forked with
        this state, then asks nothing per connection."""
        own = getattr(type(self), '_ownClientCheck', None)
        return own is not None and getattr(type(self), '_isClientAllowed', None) is own \
            and '_isClientAllowed' not in getattr(self, '__dict__', ()) \
            and self._peerListsUnset()

    # Signal handlers: they only set flags; the loop acts.

    def _hupHandler(self, signum, frame):
        self._hupReceived = True
        self._keepGoing = False

    def _intHandler(self, signum, frame):
        self._keepGoing = False

    def _signalHandlers(self):
        handlers = {signal.SIGINT: self._intHandler, signal.SIGTERM: self._intHandler}
        if hasattr(signal, 'SIGHUP'):
            handlers[signal.SIGHUP] = self._hupHandler
        return handlers

    def _installSignalHandlers(self):
        """Install the handlers, saving the previous ones. Outside the main thread nothing is
        installed (flup raises there); stop the server with ``_exit()`` instead."""
        self._servingMode.signals.install(self._signalHandlers())

    def _restoreSignalHandlers(self):
        """Restores the handlers that were in place before run()."""
        self._servingMode.signals.restore()


class _AcceptLoopFacade(_ModeFacade):
    """The hooks flup's accept-loop servers (single and threaded) add to the shared ones."""

    def _mainloopPeriodic(self):
        """
        Called after (nearly) every iteration of the main loop. Meant to be overridden.
        """
        pass

    def _exit(self, reload=False):
        """
        Protected convenience method for subclasses to force an exit. Safe from any thread
        (flup's was not).
        """
        self._servingMode.stop(reload)


class SingleServer(_AcceptLoopFacade):
    """The single mode (flup's ``singleserver.SingleServer``): one connection at a time, in
    the thread that calls run()."""

    _frontFlags = {'multithreaded': False, 'multiprocess': False}

    def __init__(self, jobClass=None, jobArgs=(), **kw):
        # flup's singleserver takes **kw and ignores what it does not know; so do we.
        hooks = self._hookArgs()
        hooks['periodic'] = lambda: self._mainloopPeriodic()
        self._servingMode = SingleMode(jobClass, jobArgs, **hooks)

    def _makeStatusBoard(self):
        return status.board_for('single', 1, 1, 1)

    def run(self, sock, timeout=1.0):
        """
        The main loop. Pass a socket that is ready to accept() client connections. Returns
        True if the loop was exited because of SIGHUP, False otherwise.
        """
        return self._runMode(sock, timeout)
