"""flup's ``scgi_fork``: the preforking SCGI WSGI server.

    from flupfast.server.scgi_fork import WSGIServer
    WSGIServer(app, bindAddress=('127.0.0.1', 4000), maxChildren=8).run()
"""
import logging

from flupfast.server import NoDefault
from flupfast.server.preforkserver import PreforkServer
from flupfast.server.scgi_base import BaseSCGIServer, Connection

__all__ = ['WSGIServer']


class WSGIServer(BaseSCGIServer, PreforkServer):
    """SCGI/WSGI server (flup's ``scgi_fork.WSGIServer``), each connection served by a preforked
    child (minSpare, maxSpare, maxChildren, maxRequests, sockTimeout in ``**kw``). ``timeout``
    (seconds) bounds each request, as in flup."""

    def __init__(self, application, scriptName=NoDefault, environ=None,
                 bindAddress=('localhost', 4000), umask=None, allowedServers=None,
                 loggingLevel=logging.INFO, debug=False, timeout=None, **kw):
        """
        scriptName is the initial portion of the URL path that "belongs" to your
        application; left at NoDefault, SCRIPT_NAME and PATH_INFO come from the web server.

        environ, which must be a dictionary, can contain any additional environment
        variables you want to pass to your application.

        bindAddress is the address to bind to: a string is a Unix socket path (umask
        applies while it is created); a 2-tuple (host, port) is IPv4; a 4-tuple IPv6.

        allowedServers must be None or a list of strings representing the IP addresses of
        servers allowed to connect. None means accept connections from anywhere.

        loggingLevel sets the logging level of the module-level logger.
        """
        BaseSCGIServer.__init__(self, application, scriptName=scriptName, environ=environ,
                                multithreaded=False, multiprocess=True,
                                bindAddress=bindAddress, umask=umask,
                                allowedServers=allowedServers, loggingLevel=loggingLevel,
                                debug=debug)
        # flup drops multithreaded, multiprocess, jobClass and jobArgs silently.
        self._startMode(PreforkServer, Connection, (self, timeout), kw,
                        ('multithreaded', 'multiprocess', 'jobClass', 'jobArgs'))

    def run(self):
        """
        Main loop. Call this after instantiating WSGIServer. SIGHUP, SIGINT, SIGQUIT, SIGTERM
        cause it to cleanup and return. (If a SIGHUP is caught, this method returns True.
        Returns False otherwise.)
        """
        return self._runServer(PreforkServer)
