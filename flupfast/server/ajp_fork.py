"""flup's ``ajp_fork``: the preforking AJP13 WSGI server.

    from flupfast.server.ajp_fork import WSGIServer
    WSGIServer(app, bindAddress=('127.0.0.1', 8009), maxChildren=32).run()

Apache keeps its AJP connections open, and each open connection holds a child: size
maxChildren to the web server's connection pool (mod_proxy's ``max=`` per Apache child).
"""
import logging

from flupfast.server.ajp_base import BaseAJPServer, Connection
from flupfast.server.preforkserver import PreforkServer

__all__ = ['WSGIServer']


class WSGIServer(BaseAJPServer, PreforkServer):
    """AJP1.3/WSGI server (flup's ``ajp_fork.WSGIServer``), each connection served by a preforked
    child (minSpare, maxSpare, maxChildren, maxRequests, sockTimeout in ``**kw``). ``timeout``
    (seconds) bounds each request, as in flup."""

    def __init__(self, application, scriptName='', environ=None,
                 bindAddress=('localhost', 8009), allowedServers=None,
                 loggingLevel=logging.INFO, debug=False, timeout=None, **kw):
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
                               multithreaded=False, multiprocess=True,
                               bindAddress=bindAddress, allowedServers=allowedServers,
                               loggingLevel=loggingLevel, debug=debug)
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
