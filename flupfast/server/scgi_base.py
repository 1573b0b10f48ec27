"""flup's ``scgi_base``: ``BaseSCGIServer`` with its hooks (``handler``, ``error``,
``_sanitizeEnv``, ``requestClass``, ``_isClientAllowed``), the ``scgi-wsgi`` logger, and the
protocol names users subclass or monkeypatch (``Request``, ``Connection``, ``readNetstring``,
``recvall``, ``ProtocolError``), as thin names over flupfast's codec, connection and gateway.
"""
import logging
import select
import sys
import warnings

from flupfast import _impl
from flupfast import deadline as _deadline
from flupfast import gateway
from flupfast import scgi_connection as _scgi
from flupfast.limits import MAX_SCGI_HEADER_BYTES
from flupfast.output import build_cgi_head
from flupfast.protocols.errors import SCGIError
from flupfast.server import NoDefault
from flupfast.server._blocking_io import recvall
from flupfast.server import _scgi_ajp_base as shared
from flupfast.server._scgi_ajp_base import SCGIAJPServerBase, install_console_handler

__all__ = ['BaseSCGIServer']

# The main classes use this name for logging.
LoggerName = _scgi.LoggerName
install_console_handler(LoggerName)

ProtocolError = SCGIError  # flup's scgi_base.ProtocolError (ours is also a ProtocolError)
TimeoutException = _deadline.TimeoutException
Request = _scgi.SCGIRequest


class Connection(_scgi.SCGIConnection):
    """One SCGI connection from the web server: one request, then the socket is closed
    (flup's ``scgi_base.Connection``; the job the modes run per accepted socket)."""


def readNetstring(sock):
    """Read one netstring from ``sock`` and return its content (flup's helper). Raises
    ProtocolError on a malformed length or trailer, EOFError when the peer closes. Unlike
    flup's, a length with a leading zero, a sign or too many digits is rejected."""
    size = b''
    max_digits = len(str(MAX_SCGI_HEADER_BYTES))
    while True:
        try:
            c = sock.recv(1)
        except BlockingIOError:
            select.select([sock], [], [])
            continue
        if c == b':':
            break
        if not c:
            raise EOFError
        size += c
        if not c.isdigit() or len(size) > max_digits:
            raise ProtocolError('invalid netstring length')
    if not size or (size[:1] == b'0' and len(size) > 1):
        raise ProtocolError('invalid netstring length')
    length = int(size)
    data, received = recvall(sock, length)
    if received < length:
        raise EOFError
    trailer, received = recvall(sock, 1)
    if received < 1:
        raise EOFError
    if trailer != b',':
        raise ProtocolError('invalid netstring trailer')
    return data


class StdoutWrapper(object):
    """A file wrapper that records whether data was written (flup's
    ``scgi_base.StdoutWrapper``)."""

    def __init__(self, stdout):
        self._file = stdout
        self.dataWritten = False

    def write(self, data):
        if data:
            self.dataWritten = True
        self._file.write(data)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._file, name)


# __init__'s docstring in flup's threaded and prefork SCGI front ends.
FRONT_INIT_DOC = shared.init_doc("""\
scriptName is the initial portion of the URL path that "belongs" to your
application; left at NoDefault, SCRIPT_NAME and PATH_INFO come from the web server.""",
                          shared.ENVIRON_DOC, """\
bindAddress is the address to bind to: a string is a Unix socket path (umask
applies while it is created); a 2-tuple (host, port) is IPv4; a 4-tuple IPv6.""",
                          shared.ALLOWED_DOC, shared.LOGGING_DOC)


class BaseSCGIServer(SCGIAJPServerBase):
    """The SCGI protocol side of the servers (flup's ``scgi_base.BaseSCGIServer``): hooks,
    environ and error page; front ends mix in a mode (``ThreadedServer``, ``PreforkServer``,
    ``SingleServer``)."""

    # What Request class to use.
    requestClass = Request
    LoggerName = LoggerName
    _connectionClass = Connection

    def __init__(self, application, scriptName=NoDefault, environ=None, multithreaded=True,
                 multiprocess=False, bindAddress=('localhost', 4000), umask=None,
                 allowedServers=NoDefault, loggingLevel=logging.INFO, debug=False):
        self._init_common(application, scriptName, environ, multithreaded, multiprocess,
                          bindAddress, umask, allowedServers, loggingLevel, debug, NoDefault)

    __init__.__doc__ = shared.init_doc("""\
scriptName is the initial portion of the URL path that "belongs" to your
application. It is used to determine PATH_INFO (which doesn't seem to be passed in).
An empty scriptName means your application is mounted at the root of your virtual
host. Left at NoDefault, SCRIPT_NAME and PATH_INFO come from the web server.""",
                                shared.ENVIRON_DOC, shared.THREADS_DOC, """\
bindAddress is the address to bind to: a string is a Unix socket path; a 2-tuple
(host, port) is IPv4; a 4-tuple (host, port, flowinfo, scope_id) is IPv6. If binding
to a Unix socket, umask may be set to the umask in force while the socket is created.""",
                                shared.ALLOWED_DEFAULT_DOC, shared.LOGGING_DOC)

    @_impl.runs_compiled('handler')
    def handler(self, request):
        """WSGI handler. Sets up WSGI environment, calls the application, and sends the
        application's response."""
        environ = self._environ_for(request.environ, request.stdin)
        self._sanitizeEnv(environ)
        _impl.run_application(self.application, environ, request.stdout,
                              None if self.multithreaded else self._appLock)

    @_impl.runs_compiled('sanitize')
    def _sanitizeEnv(self, environ):
        """Fill-in/deduce missing values in environ (flup scgi_base.py:500-552).

        PATH_INFO derived from REQUEST_URI stays percent-encoded where SCRIPT_NAME is a raw
        prefix, as flup leaves it; where the web server sends the decoded path as
        SCRIPT_NAME (Apache mod_proxy_scgi), flup's cut is garbage and ours cuts the decoded
        path (gateway.derive_path_info).
        """
        request_uri = gateway.split_request_uri(environ)
        gateway.fill_query_string(environ, request_uri)

        script_name = environ.get('WSGI_SCRIPT_NAME')
        if script_name is None:
            script_name = self.scriptName
        else:
            warnings.warn('WSGI_SCRIPT_NAME environment variable for scgi servers is '
                          'deprecated', DeprecationWarning)
            if script_name.lower() == 'none':
                script_name = None

        if script_name is None:
            return  # do nothing (most likely coming from cgi2scgi)

        if script_name is NoDefault:
            # SCRIPT_NAME/PATH_INFO from the web server, with empty defaults.
            if 'SCRIPT_NAME' not in environ:
                environ['SCRIPT_NAME'] = ''
            if not environ.get('PATH_INFO'):
                if request_uri is not None:
                    script_name = environ['SCRIPT_NAME']
                    path_info = gateway.derive_path_info(request_uri[0], script_name)
                    if path_info is None:
                        self.logger.warning('SCRIPT_NAME does not match request URI')
                        path_info = request_uri[0][len(script_name):]
                    environ['PATH_INFO'] = path_info
                else:
                    environ['PATH_INFO'] = ''
        else:
            warnings.warn('Configured SCRIPT_NAME is deprecated\n'
                          'Do not use WSGI_SCRIPT_NAME or the scriptName\n'
                          'keyword parameter -- they will be going away',
                          DeprecationWarning)
            value = environ.get('SCRIPT_NAME', '')  # flup: KeyError when absent
            value += environ.get('PATH_INFO', '')
            if not value.startswith(script_name):
                self.logger.warning('scriptName does not match request URI')
            environ['PATH_INFO'] = value[len(script_name):]
            environ['SCRIPT_NAME'] = script_name

    def error(self, request):
        """Override to provide custom error handling. Ideally, however, all errors should be
        caught at the application level. Writes the 500 page (with ``debug``, a traceback
        page)."""
        request.stdout.write(build_cgi_head(gateway.ERROR_STATUS, gateway.ERROR_HEADERS,
                                            request.status_prefix)
                             + gateway.error_page(self.debug, sys.exc_info()))

