"""``uwsgi_base``: ``BaseUWSGIServer``, SCGI's server base (flupfast.server.scgi_base: hooks,
environ, error page, allow-list, socket) serving uwsgi's connection, with uWSGI's
wsgi.url_scheme rule. flup has no uwsgi module: every name here is additive.
"""
from flupfast import _impl, uwsgi_connection as _uwsgi
from flupfast.server._scgi_ajp_base import install_console_handler
from flupfast.server.scgi_base import BaseSCGIServer

__all__ = ['BaseUWSGIServer']

LoggerName = _uwsgi.LoggerName
install_console_handler(LoggerName)


class Connection(_uwsgi.UWSGIConnection):
    """One uwsgi connection from the web server: one request, then the socket is closed (the
    job the modes run per accepted socket)."""


class BaseUWSGIServer(BaseSCGIServer):
    """The uwsgi protocol side of the servers: ``BaseSCGIServer`` with uwsgi's connection and
    logger (``uwsgi-wsgi``). The SCGI front ends (``scgi.WSGIServer``, ``scgi_fork``,
    ``scgi_single``) mixed in after it give the same keywords, modes and hooks."""

    LoggerName = LoggerName
    # What the SCGI front ends' assemble() hands the mode to serve each accepted socket.
    _connectionClass = Connection

    @_impl.runs_compiled('uwsgi_environ')
    def _environ_for(self, environ, stdin):
        """SCGI's environ, with wsgi.url_scheme by uWSGI's rule (UWSGI_SCHEME, HTTPS,
        REQUEST_SCHEME; ``protocols.uwsgi.url_scheme``)."""
        environ = super()._environ_for(environ, stdin)
        environ['wsgi.url_scheme'] = _impl.uwsgi_url_scheme(environ)
        return environ
