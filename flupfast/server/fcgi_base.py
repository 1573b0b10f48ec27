"""flup's ``fcgi_base``: ``BaseFCGIServer`` with its hooks (``handler``, ``error``,
``_sanitizeEnv``, ``request_class``...), the ``FCGI_*`` constants and the protocol classes users
subclass or monkeypatch, as thin names over flupfast's codec, connection and gateway.

Only assembly and flup's names here: the logic lives in protocols/, connection.py, gateway.py.
"""
import collections
import io
import os
import sys
import threading

from flupfast import _impl
from flupfast import cgi_fallback as _cgi
from flupfast import deadline as _deadline
from flupfast import fastcgi_connection as _connection
from flupfast import gateway
from flupfast.limits import DEFAULT_MAXWRITE
from flupfast.protocols.fastcgi import (  # noqa: F401  (flup exports every FCGI_* name)
    FCGI_ABORT_REQUEST, FCGI_AUTHORIZER, FCGI_BEGIN_REQUEST, FCGI_CANT_MPX_CONN, FCGI_DATA,
    FCGI_END_REQUEST, FCGI_FILTER, FCGI_GET_VALUES, FCGI_GET_VALUES_RESULT, FCGI_HEADER_LEN,
    FCGI_KEEP_CONN, FCGI_LISTENSOCK_FILENO, FCGI_MAX_CONNS, FCGI_MAX_REQS, FCGI_MAXTYPE,
    FCGI_MPXS_CONNS, FCGI_NULL_REQUEST_ID, FCGI_OVERLOADED, FCGI_PARAMS, FCGI_REQUEST_COMPLETE,
    FCGI_RESPONDER, FCGI_STDERR, FCGI_STDIN, FCGI_STDOUT, FCGI_UNKNOWN_ROLE, FCGI_UNKNOWN_TYPE,
    FCGI_VERSION_1, decode_header, decode_params, encode_pair, encode_record)
from flupfast.body import Spool
from flupfast.server._blocking_io import recv_exactly, recvall, sendall
from flupfast.serving import handover, systemd
from flupfast.serving.listen import (AllowList, bind_listen_socket, inherited_listen_socket,
                                     warn_if_exposed)

__all__ = ['BaseFCGIServer']

# flup's struct formats of the spec's records (section 8), for code that packs its own.
FCGI_Header = '!BBHHBx'
FCGI_BeginRequestBody = '!HB5x'
FCGI_EndRequestBody = '!LB3x'
FCGI_UnknownTypeBody = '!B7x'
FCGI_EndRequestBody_LEN = 8
FCGI_UnknownTypeBody_LEN = 8

thread_available = True  # flup falls back to no threads when _thread is missing; CPython has it

# flup's debug switches. flup writes to a fixed file in the temp dir when DEBUG > 0; we never
# write debug files, so DEBUGLOG is kept only for code that reads the name.
DEBUG = 0
DEBUGLOG = os.path.join(os.environ.get('TMPDIR', '/tmp'), 'fcgi.log')

Request = _connection.FastCGIRequest
TimeoutException = _deadline.TimeoutException


class _FlupInputStream(object):
    """flup's stream interface (``read(n)``, ``readline(length)``, ``readlines(sizehint)``,
    iteration) over a flupfast InputStream that pulls from ``self._next_data``."""

    def __init__(self):
        self._stream = _impl.InputStream(self._next_data)

    def read(self, n=-1):
        return self._stream.read(n)

    def readline(self, length=None):
        return self._stream.readline(-1 if length is None else length)

    def readlines(self, sizehint=0):
        return self._stream.readlines(sizehint)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._stream)


class InputStream(_FlupInputStream):
    """flup's ``InputStream(conn)``: FCGI_STDIN or FCGI_DATA of one request, fed by
    ``add_data(data)`` (``b''`` ends it) and refilled by ``conn.process_input()`` when the
    reader needs more, as flup's. The server's own streams are flupfast's pull-based ones,
    built by the connection; this class is for code that builds or subclasses flup's.
    """

    def __init__(self, conn):
        self._conn = conn
        self._chunks = collections.deque()
        self._eof = False
        super().__init__()

    def _waitForData(self):
        """Waits for more data to become available."""
        self._conn.process_input()

    def _next_data(self):
        while not self._chunks:
            if self._eof:
                return b''
            self._waitForData()
        return self._chunks.popleft()

    def add_data(self, data):
        if not data:
            self._eof = True
        else:
            self._chunks.append(bytes(data))


class MultiplexedInputStream(_FlupInputStream):
    """flup's ``MultiplexedInputStream(conn)``: an input stream filled by the connection's
    thread through ``add_data`` (``b''`` ends it) and read by the request's thread, which
    blocks until data comes. Backed by the spool flupfast's multiplexed requests use (memory,
    then a temporary file past SPOOL_MEMORY_LIMIT; flup keeps it all in memory).
    """

    def __init__(self, conn):
        self._conn = conn
        self._spool = Spool()
        super().__init__()

    def _next_data(self):
        return self._spool.pull()

    def add_data(self, data):
        if not data:
            self._spool.end()
        else:
            self._spool.push(data)


class OutputStream(_connection.StderrStream):
    """flup's ``OutputStream(conn, req, type, buffered=False)``: a FastCGI output stream of
    ``type`` (FCGI_STDOUT or FCGI_STDERR) for request ``req``; ``buffered`` holds the writes
    until ``flush()`` or the end, as flup's FCGI_STDERR. The server builds its own streams
    (connection.StdoutStream, StderrStream); this class is for code that builds flup's.
    """

    def __init__(self, conn, req, type, buffered=False):
        super().__init__(conn, req._io)
        self.record_type = type
        self._buffered = buffered

    def write(self, data):
        if self._buffered:
            super().write(data)
        else:
            _connection.StdoutStream.write(self, data)


class Record(object):
    """flup's ``Record``: one FastCGI record (spec 3.3) read from or written to a blocking
    socket by ``read(sock)`` and ``write(sock)``, through flupfast's codec. Attributes as
    flup's: version, type, requestId, contentLength, paddingLength, contentData.
    """

    def __init__(self, type=FCGI_UNKNOWN_TYPE, requestId=FCGI_NULL_REQUEST_ID):
        self.version = FCGI_VERSION_1
        self.type = type
        self.requestId = requestId
        self.contentLength = 0
        self.paddingLength = 0
        self.contentData = b''

    _recvall = staticmethod(recvall)

    def read(self, sock):
        """Read and decode a Record from a socket; EOFError when it ends before a whole
        record."""
        (self.version, self.type, self.requestId, self.contentLength,
         self.paddingLength) = decode_header(recv_exactly(sock, FCGI_HEADER_LEN))
        self.contentData = recv_exactly(sock, self.contentLength) if self.contentLength \
            else b''
        if self.paddingLength:
            recv_exactly(sock, self.paddingLength)

    def write(self, sock):
        """Encode and write a Record to a socket (content padded to a multiple of 8)."""
        content = self.contentData[:self.contentLength]
        self.paddingLength = -len(content) & 7
        sendall(sock, encode_record(self.type, self.requestId, content))


class Connection(_connection.FastCGIConnection):
    """A FastCGI connection serving one request at a time, answering FCGI_CANT_MPX_CONN to a
    second (flup's ``fcgi_base.Connection``; the job the modes run per accepted socket)."""

    multiplexed = False  # whatever the server's config says (FastCGIConnection.__init__)


class MultiplexedConnection(_connection.FastCGIConnection):
    """A multiplexed FastCGI connection: each request runs in its own thread (flup's
    ``fcgi_base.MultiplexedConnection``, chosen by ``multiplexed=True``)."""

    multiplexed = True


def decode_pair(s, pos=0):
    """Decode the name-value pair at ``pos`` of ``s``; returns ``(new_pos, (name, value))``
    with bytes name and value, as flup's does."""
    lengths = []
    for _ in range(2):
        first = s[pos]
        if first & 0x80:
            lengths.append(int.from_bytes(s[pos:pos + 4], 'big') & 0x7FFFFFFF)
            pos += 4
        else:
            lengths.append(first)
            pos += 1
    name_len, value_len = lengths
    name = bytes(s[pos:pos + name_len])
    pos += name_len
    value = bytes(s[pos:pos + value_len])
    return pos + value_len, (name, value)


class TeeOutputStream:
    """``wsgi.errors`` when the server has its own socket: each write goes to stderr and to
    FCGI_STDERR (flup's ``fcgi_base.TeeOutputStream``, which rejects bytes; ours takes both)."""

    def __init__(self, streamList):
        self._streamList = streamList

    def write(self, data):
        for stream in self._streamList:
            if isinstance(data, bytes) and isinstance(stream, io.TextIOBase):
                stream.write(data.decode('utf-8', 'replace'))
            else:
                stream.write(data)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        for stream in self._streamList:
            stream.flush()


# flup's names for the CGI fallback's parts (flupfast/cgi_fallback.py; server.cgi uses them too).
StdoutWrapper = _cgi.CGIOutput
cgi_params = _cgi.cgi_params
cgi_stdin = _cgi.cgi_stdin


class _CGIConnection(object):
    """What a request's run() asks of its connection, for the one request of the CGI
    fallback: stdout is not a stream a send can leave half written, and an app that fails
    after its output began ends the process as flup's does (the web server has the output)."""

    send_broken = False

    @staticmethod
    def truncate_request(req):
        req._end()


class CGIRequest(Request):
    """The one request of the CGI fallback, from os.environ and stdin, disguised as a FastCGI
    request (flup's ``fcgi_base.CGIRequest``, fcgi_base.py:607-629)."""

    def __init__(self, server):
        self._conn = _CGIConnection
        self._io = _connection.RequestIO()
        self.requestId = 1
        self.role = FCGI_RESPONDER
        self.flags = 0
        self.aborted = False
        self.keep_conn = False
        self.server = server
        self.params = cgi_params()
        self.stdin = cgi_stdin(environ=self.params)
        self.stdout = StdoutWrapper(sys.stdout)
        self.stderr = sys.stderr
        self.data = _impl.InputStream(lambda: b'')
        self._timeout = 0

    def _end(self, appStatus=0, protocolStatus=FCGI_REQUEST_COMPLETE):
        sys.stdout.flush()
        sys.exit(appStatus)


def _rlimit(name, fallback=100):
    try:
        import resource
        limit = resource.getrlimit(getattr(resource, name))[0]
    except (ImportError, AttributeError, ValueError, OSError):
        return fallback
    # flup can report -1 (RLIM_INFINITY, fcgi_fork.py:110); an unlimited resource is no limit
    # we can state, so answer a large finite number.
    return limit if limit >= 0 else 65535


# __init__'s and run()'s docstrings in flup's three FastCGI front ends.
FRONT_INIT_DOC = """
        environ, if present, must be a dictionary-like object. Its contents will be copied
        into application's environ. Useful for passing application-specific variables.

        bindAddress, if present, must either be a string or a tuple. If present, run() will
        open its own listening socket: a string is a Unix socket path, a 2-tuple an IPv4
        (host, port). Otherwise the web server's socket is inherited on fd 0.

        allowedServers (a keyword in ``**kw``, flupfast's addition) is None or a list of the
        IP addresses allowed to connect, as for SCGI; FCGI_WEB_SERVER_ADDRS still applies.
        """
FRONT_RUN_DOC = """The main loop. Exits on SIGHUP, SIGINT, SIGTERM. Returns True if SIGHUP was
        received, False otherwise."""


class BaseFCGIServer(object):
    """The FastCGI protocol side of the servers (flup's ``fcgi_base.BaseFCGIServer``):
    hooks, environ, error page and the CGI fallback; front ends mix in a mode
    (``ThreadedServer``, ``PreforkServer``, ``SingleServer``)."""

    request_class = Request
    cgirequest_class = CGIRequest

    # flupfast's keyword that flup's front end signatures lack: it comes in their ``**kw``.
    _frontKeywordsInKw = ('allowedServers',)

    # Bytes per written record, header included. flup writes 8 KiB records for mod_fastcgi's
    # small buffers; nginx and Apache take 64 KiB records, 8x fewer headers and syscalls.
    maxwrite = DEFAULT_MAXWRITE

    # flup's input buffer shrink point; flupfast's stream compacts by its own rule, but the
    # attribute stays for subclasses that read or set it.
    inputStreamShrinkThreshold = 102400 - 8192

    # A Unix socket's owner ("user", "user:group", ":group") and mode (e.g. 0o660), set before
    # it listens (PHP-FPM's listen.owner, listen.group, listen.mode); None leaves what the
    # process and ``umask`` give. Not in flup: set them on the server before run().
    socketOwner = None
    socketMode = None

    def __init__(self, application, environ=None, multithreaded=True, multiprocess=False,
                 bindAddress=None, umask=None, multiplexed=False, debug=False,
                 roles=(FCGI_RESPONDER,), forceCGI=False, allowedServers=None):
        """
        bindAddress, if present, must be a string (a Unix socket path) or a tuple: a 2-tuple
        (host, port) listens on IPv4, a longer one (host, port, flowinfo, scope_id) on IPv6.
        If present, run() opens its own listening socket (an "external" FastCGI app);
        otherwise the web server's listening socket is inherited on fd 0, and the app runs as
        plain CGI when fd 0 is not a socket, when forceCGI is true, or when the environment
        variable FCGI_FORCE_CGI starts with Y.

        umask, for a Unix socket, is the umask in force while the socket file is created.

        Set multiplexed to True to handle several requests at once on one connection (each
        in its own thread). nginx and Apache never multiplex, so it is off by default.

        allowedServers (flupfast's addition; flup has only FCGI_WEB_SERVER_ADDRS) is None
        (anybody) or a list of the IP addresses of the web servers allowed to connect, as
        SCGI's and AJP's; Unix-socket peers are admitted. With FCGI_WEB_SERVER_ADDRS also set,
        a peer must pass both.
        """
        if environ is None:
            environ = {}
        self.application = application
        self.environ = environ
        self.multithreaded = multithreaded
        self.multiprocess = multiprocess
        self.multiplexed = multiplexed
        self.debug = debug
        self.roles = roles
        self.forceCGI = forceCGI
        self._bindAddress = bindAddress
        self._umask = umask
        self._web_server_addrs = None
        self._allowedServers = allowedServers
        self._allow_lists = None  # (FCGI_WEB_SERVER_ADDRS, allowedServers), set by run()
        # Serialises the app when it is not thread-safe (multithreaded=False).
        self._appLock = threading.Lock()
        max_conns = _rlimit('RLIMIT_NOFILE')
        if multiplexed:
            self._connectionClass = MultiplexedConnection
            max_reqs = max_conns * 5  # flup's estimate of requests per connection
        else:
            self._connectionClass = Connection
            max_reqs = max_conns
        self.capability = {
            FCGI_MAX_CONNS: max_conns,
            FCGI_MAX_REQS: max_reqs,
            FCGI_MPXS_CONNS: 1 if multiplexed else 0,
        }

    def _connectionConfig(self):
        """The connections' settings, read from the attributes once per run() (a subclass or
        the caller may set them between construction and run())."""
        return _connection.FastCGIConfig(self.multiplexed, self.maxwrite, self.capability)

    # -- socket ----------------------------------------------------------------------------

    def _setupSocket(self):
        """The listening socket; in CGI context, serve the one CGI request and exit."""
        if self._bindAddress is None:
            force_cgi = self.forceCGI or \
                os.environ.get('FCGI_FORCE_CGI', 'N').upper().startswith('Y')
            # systemd's socket activation (fds from 3) first, then the web server's fd 0.
            sock = None if force_cgi else (systemd.listen_socket() or
                                           inherited_listen_socket(FCGI_LISTENSOCK_FILENO))
            if sock is None:
                # flup's detection crashes here on Python >= 3.8 (socket.fromfd raises ENOTSOCK).
                req = self.cgirequest_class(self)
                req.run()
                sys.exit(0)
            return sock
        # flup's ``while server.run(): ...``: the socket a reload kept, never unbound between.
        return handover.take_listener(self._bindAddress) or bind_listen_socket(
            self._bindAddress, self._umask, self.socketOwner, self.socketMode)

    def _cleanupSocket(self, sock):
        """Closes the main socket; after SIGHUP keeps it open for the next run()
        (known_differences 'reload-keeps-listening-socket')."""
        handover.release_listener(self._bindAddress, sock, self._hupReceived)

    def _isClientAllowed(self, addr):
        # FCGI_WEB_SERVER_ADDRS (spec 3.2): only the listed IPv4 peers; with the variable set,
        # Unix-socket and IPv6 peers are refused, as flup does (silently: we log it). Then
        # allowedServers, SCGI's rule. Both are serving/listen.py's AllowList.
        if self._web_server_addrs is None and self._allowedServers is None:
            return True  # both unset (the default) admit everybody: no work per connection
        lists = self._allow_lists
        if lists is None or lists[0].addresses is not self._web_server_addrs \
                or lists[1].addresses is not self._allowedServers:  # (re)assigned: read again
            lists = self._allow_lists = self._build_allow_lists()
        # An unset list admits everybody: asked here, not in a call per list.
        web_servers, allowed = lists
        return (web_servers.addresses is None or web_servers.allows(addr)) \
            and (allowed.addresses is None or allowed.allows(addr))

    _ownClientCheck = _isClientAllowed  # the stock check (_admitsEveryPeer)

    def _peerListsUnset(self):
        return self._web_server_addrs is None and self._allowedServers is None

    def _build_allow_lists(self):
        return (AllowList.web_server_addrs(self._web_server_addrs, _connection.logger),
                AllowList(self._allowedServers, logger=_connection.logger,
                          reason='not in allowedServers'))

    def _run_front(self, mode_run):
        """flup's front-end ``run()``, once for the three modes: read FCGI_WEB_SERVER_ADDRS,
        set up the socket, run the mode, close the socket; returns the mode's result."""
        addrs = os.environ.get('FCGI_WEB_SERVER_ADDRS')
        self._web_server_addrs = None if addrs is None else [a.strip() for a in addrs.split(',')]
        self._allow_lists = self._build_allow_lists()
        sock = self._setupSocket()
        warn_if_exposed(sock, _connection.logger, *self._allow_lists)
        try:
            return mode_run(self, sock)
        finally:
            self._cleanupSocket(sock)

    # -- WSGI ------------------------------------------------------------------------------

    @_impl.runs_compiled('fcgi:handler')
    def handler(self, req):
        """Run the WSGI app for ``req``; returns ``(protocolStatus, appStatus)``."""
        if req.role not in self.roles:
            return FCGI_UNKNOWN_ROLE, 0
        is_cgi = isinstance(req, CGIRequest)
        if self._bindAddress is None:
            stderr = req.stderr
        else:
            stderr = TeeOutputStream((sys.stderr, req.stderr))
        environ = _impl.build_environ(
            req.params, self.environ, req.stdin, stderr,
            multithread=not is_cgi and self.multithreaded,
            multiprocess=is_cgi or self.multiprocess,
            run_once=is_cgi)
        self._sanitizeEnv(environ)
        _impl.run_application(self.application, environ, req.stdout,
                              None if self.multithreaded else self._appLock)
        return FCGI_REQUEST_COMPLETE, 0

    @_impl.runs_compiled('fcgi:sanitize')
    def _sanitizeEnv(self, environ):
        """Ensure certain values are present, if required by WSGI."""
        _impl.sanitize_cgi_environ(environ, self.__class__.__name__)

    def error(self, req):
        """Called by Request if an exception occurs within the handler. May and should be
        overridden. Writes the 500 page (with ``debug``, a traceback page).
        """
        req.stdout.write(b'Status: 500 Internal Server Error\r\n'
                         b'Content-Type: text/html\r\n\r\n'
                         + gateway.error_page(self.debug, sys.exc_info()))
