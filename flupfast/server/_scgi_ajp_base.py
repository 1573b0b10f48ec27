"""What flup's SCGI and AJP bases share (``scgi_base.BaseSCGIServer`` and
``ajp_base.BaseAJPServer`` were written alike): the module logger and its console handler,
``allowedServers``, ``scriptName``, the listening socket, and ``run()``'s log lines.

Only assembly and flup's names; the protocol work is in the connection modules and gateway.py.
"""
import logging
import sys
import threading

from flupfast import _impl, gateway
from flupfast.serving import handover
from flupfast.serving.listen import AllowList, bind_listen_socket, warn_if_exposed


def install_console_handler(logger_name):
    """flup's module-level handler: ``asctime : message`` on stderr for its logger. A site
    that sees flup's request lines in its logs sees ours; added once per logger."""
    logger = logging.getLogger(logger_name)
    for handler in logger.handlers:
        if getattr(handler, '_flupfast_console', False):
            return handler
    console = logging.StreamHandler()
    console.setLevel(logging.DEBUG)
    console.setFormatter(logging.Formatter('%(asctime)s : %(message)s', '%Y-%m-%d %H:%M:%S'))
    console._flupfast_console = True
    logger.addHandler(console)
    return console


def init_doc(*paragraphs):
    """An ``__init__`` docstring from paragraphs, laid out as flup's (``help()`` shows the
    same text)."""
    body = '\n\n'.join('\n'.join(('        ' + line) if line else ''
                                 for line in p.split('\n')) for p in paragraphs)
    return '\n' + body + '\n        '


# The paragraphs of flup's SCGI and AJP __init__ docstrings that say the same.
ENVIRON_DOC = """environ, which must be a dictionary, can contain any additional environment
variables you want to pass to your application."""
THREADS_DOC = """Set multithreaded to False if your application is not thread-safe.

Set multiprocess to True to explicitly set wsgi.multiprocess to True. (Only makes
sense with threaded servers.)"""
ALLOWED_DOC = """allowedServers must be None or a list of strings representing the IP addresses of
servers allowed to connect. None means accept connections from anywhere."""
ALLOWED_DEFAULT_DOC = ALLOWED_DOC + """ By default,
it is a list containing the single item '127.0.0.1'."""
LOGGING_DOC = "loggingLevel sets the logging level of the module-level logger."

# run()'s docstring in flup's SCGI and AJP front ends (threaded and prefork), and in the single
# ones (which have no SIGQUIT handler).
FRONT_RUN_DOC = """
        Main loop. Call this after instantiating WSGIServer. SIGHUP, SIGINT, SIGQUIT, SIGTERM
        cause it to cleanup and return. (If a SIGHUP is caught, this method returns True.
        Returns False otherwise.)
        """
SINGLE_RUN_DOC = """
        Main loop. Call this after instantiating WSGIServer. SIGHUP, SIGINT, SIGTERM cause it
        to cleanup and return. (If a SIGHUP is caught, this method returns True. Returns
        False otherwise.)
        """


class SCGIAJPServerBase(object):
    """The part of BaseSCGIServer and BaseAJPServer that is the same in both (flup wrote it
    twice, in scgi_base and ajp_base)."""

    LoggerName = None  # set by the protocol base
    _connectionClass = None  # the job the modes run per accepted socket; set likewise

    # The front ends (server/_front.py) pass every keyword of ours by name.
    _frontKeywordsInKw = ()

    # A Unix socket's owner ("user", "user:group", ":group") and mode (e.g. 0o660), set before
    # it listens (PHP-FPM's listen.owner, listen.group, listen.mode); None leaves what the
    # process and ``umask`` give. Not in flup: set them on the server before run().
    socketOwner = None
    socketMode = None

    def _init_common(self, application, scriptName, environ, multithreaded, multiprocess,
                     bindAddress, umask, allowedServers, loggingLevel, debug, no_default):
        if environ is None:
            environ = {}
        self.application = application
        self.scriptName = scriptName
        self.environ = environ
        self.multithreaded = multithreaded
        self.multiprocess = multiprocess
        self.debug = debug
        self._bindAddress = bindAddress
        self._umask = umask
        if allowedServers is no_default:
            allowedServers = ['127.0.0.1']
        self._allowedServers = allowedServers
        self._allow_list = None  # built at the first check, from _allowedServers
        # Serialises the app when it is not thread-safe (multithreaded=False).
        self._appLock = threading.Lock()
        self.logger = logging.getLogger(self.LoggerName)
        self.logger.setLevel(loggingLevel)
        self.bind_error = None  # the OSError that stopped run(), for the command line

    def _connectionConfig(self):
        """The connections' settings object, built once per run() and passed to each
        connection after (server, timeout); None: the protocol has none (SCGI)."""
        return None

    def _setupSocket(self):
        """Creates and binds the socket for communication with the server: a str is a Unix
        socket path (``umask`` applies while it is created), a 2-tuple IPv4, a longer tuple
        (host, port, flowinfo, scope_id) IPv6."""
        # flup's ``while server.run(): ...``: the socket a reload kept, never unbound between.
        return handover.take_listener(self._bindAddress) or bind_listen_socket(
            self._bindAddress, self._umask, self.socketOwner, self.socketMode)

    def _cleanupSocket(self, sock):
        """Closes the main socket; after SIGHUP keeps it open for the next run()
        (known_differences 'reload-keeps-listening-socket')."""
        handover.release_listener(self._bindAddress, sock, self._hupReceived)

    def _isClientAllowed(self, addr):
        """allowedServers None admits anybody; otherwise an IPv4 or IPv6 peer must be listed
        (flup admits every IPv6 peer: its check only looks at 2-tuples). Unix-socket peers are
        admitted: the socket file's permissions decide who may connect. A refusal is logged
        at most once a minute per address (serving/listen.py AllowList)."""
        allow = self._allow_list
        if allow is None or allow.addresses is not self._allowedServers:
            allow = self._allow_list = AllowList(self._allowedServers, logger=self.logger)
        return allow.addresses is None or allow.allows(addr)  # unset: no call per connection

    _ownClientCheck = _isClientAllowed  # the stock check (_admitsEveryPeer)

    def _peerListsUnset(self):
        return self._allowedServers is None

    def _run_front(self, mode_run):
        """flup's front-end ``run()``: log, set up the socket, run the mode, clean up.
        A socket that cannot be set up is logged and run() returns False, as flup means to
        (its ``e[1]`` raises TypeError on Python 3)."""
        name = self.__class__.__name__
        self.logger.info('%s starting up', name)
        try:
            sock = self._setupSocket()
        except OSError as exc:
            self.bind_error = exc
            self.logger.error('Failed to bind socket (%s), exiting', exc.strerror or exc)
            return False
        warn_if_exposed(sock, self.logger, AllowList(self._allowedServers))
        try:
            ret = mode_run(self, sock)
        finally:
            self._cleanupSocket(sock)
        self.logger.info('%s shutting down%s', name,
                         ' (reload requested)' if self._hupReceived else '')
        return ret

    @_impl.runs_compiled('environ')
    def _environ_for(self, environ, stdin):
        """flup's ``handler`` preamble: the request's variables plus ``environ=`` and wsgi.*
        (``wsgi.errors`` is the process's stderr, as flup's)."""
        _impl.build_environ(environ, self.environ, stdin, sys.stderr,
                            multithread=self.multithreaded, multiprocess=self.multiprocess,
                            run_once=False)
        environ['wsgi.file_wrapper'] = gateway.FileWrapper
        return environ
