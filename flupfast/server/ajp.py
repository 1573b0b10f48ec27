"""flup's ``ajp``: the threaded AJP13 WSGI server, for Apache mod_proxy_ajp / mod_jk.

    from flupfast.server.ajp import WSGIServer
    WSGIServer(app, bindAddress=('127.0.0.1', 8009)).run()
"""
import logging

from flupfast.server.ajp_base import BaseAJPServer, Connection
from flupfast.server.threadedserver import ThreadedServer

__all__ = ['WSGIServer']


class WSGIServer(BaseAJPServer, ThreadedServer):
    """AJP1.3/WSGI server (flup's ``ajp.WSGIServer``), each (persistent) connection served by a
    thread of a pool (minSpare, maxSpare, maxThreads in ``**kw``). Apache pools its AJP
    connections, so each of them holds a thread while open."""

    def __init__(self, application, scriptName='', environ=None, multithreaded=True,
                 multiprocess=False, bindAddress=('localhost', 8009), allowedServers=None,
                 loggingLevel=logging.INFO, debug=False, **kw):
        """
        scriptName is the initial portion of the URL path that "belongs" to your
        application. It is used to determine PATH_INFO (which doesn't seem to be passed in).
        An empty scriptName means your application is mounted at the root of your virtual
        host.

        environ, which must be a dictionary, can contain any additional environment
        variables you want to pass to your application.

        bindAddress is the address to bind to: a 2-tuple (host, port) is IPv4, a 4-tuple
        IPv6 (flup: IPv4 only).

        allowedServers must be None or a list of strings representing the IP addresses of
        servers allowed to connect. None means accept connections from anywhere.

        loggingLevel sets the logging level of the module-level logger.
        """
        BaseAJPServer.__init__(self, application, scriptName=scriptName, environ=environ,
                               multithreaded=multithreaded, multiprocess=multiprocess,
                               bindAddress=bindAddress, allowedServers=allowedServers,
                               loggingLevel=loggingLevel, debug=debug)
        self._startMode(ThreadedServer, Connection, (self, None), kw)

    def run(self):
        """
        Main loop. Call this after instantiating WSGIServer. SIGHUP, SIGINT, SIGQUIT, SIGTERM
        cause it to cleanup and return. (If a SIGHUP is caught, this method returns True.
        Returns False otherwise.)
        """
        # flup skips shutdown() here because kept AJP connections would block it forever;
        # ours waits a bounded time for running requests, then leaves idle connections.
        return self._runServer(ThreadedServer)
