"""flup's ``scgi``: the threaded SCGI WSGI server.

    from flupfast.server.scgi import WSGIServer
    WSGIServer(app, bindAddress=('127.0.0.1', 4000)).run()
"""
import logging

from flupfast.server import NoDefault
from flupfast.server.scgi_base import BaseSCGIServer, Connection
from flupfast.server.threadedserver import ThreadedServer

__all__ = ['WSGIServer']


class WSGIServer(BaseSCGIServer, ThreadedServer):
    """SCGI/WSGI server (flup's ``scgi.WSGIServer``), each connection served by a thread of a pool
    (minSpare, maxSpare, maxThreads in ``**kw``)."""

    def __init__(self, application, scriptName=NoDefault, environ=None, multithreaded=True,
                 multiprocess=False, bindAddress=('localhost', 4000), umask=None,
                 allowedServers=None, loggingLevel=logging.INFO, debug=False, **kw):
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
                                multithreaded=multithreaded, multiprocess=multiprocess,
                                bindAddress=bindAddress, umask=umask,
                                allowedServers=allowedServers, loggingLevel=loggingLevel,
                                debug=debug)
        self._startMode(ThreadedServer, Connection, (self, None), kw)

    def run(self):
        """
        Main loop. Call this after instantiating WSGIServer. SIGHUP, SIGINT, SIGQUIT, SIGTERM
        cause it to cleanup and return. (If a SIGHUP is caught, this method returns True.
        Returns False otherwise.)
        """
        return self._runServer(ThreadedServer)
