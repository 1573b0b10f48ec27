"""``ajp_single``: an AJP13 WSGI server that serves one connection at a time in the main
thread. flup has no such module (it is purely additive). Apache keeps AJP connections open,
so use it behind a web server that opens one connection (``ProxyPass ... max=1``) or for
debugging.
"""
import logging

from flupfast.server.ajp_base import BaseAJPServer, Connection
from flupfast.server.singleserver import SingleServer

__all__ = ['WSGIServer']


class WSGIServer(BaseAJPServer, SingleServer):
    """AJP1.3/WSGI server, one connection at a time, without threads (flup has none; built
    like ``fcgi_single.WSGIServer``)."""

    def __init__(self, application, scriptName='', environ=None,
                 bindAddress=('localhost', 8009), allowedServers=None,
                 loggingLevel=logging.INFO, debug=False, **kw):
        """The arguments are those of ``flupfast.server.ajp.WSGIServer`` without the thread
        pool's."""
        BaseAJPServer.__init__(self, application, scriptName=scriptName, environ=environ,
                               multithreaded=False, multiprocess=False,
                               bindAddress=bindAddress, allowedServers=allowedServers,
                               loggingLevel=loggingLevel, debug=debug)
        self._startMode(SingleServer, Connection, (self, None), kw)

    def run(self):
        """
        Main loop. Call this after instantiating WSGIServer. SIGHUP, SIGINT, SIGTERM cause it
        to cleanup and return. (If a SIGHUP is caught, this method returns True. Returns
        False otherwise.)
        """
        return self._runServer(SingleServer)
