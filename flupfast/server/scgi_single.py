"""``scgi_single``: an SCGI WSGI server that serves one connection at a time in the main
thread, without threads or children. flup has no such module (it is purely additive), but
its FastCGI sibling ``fcgi_single`` has the same shape.
"""
import logging

from flupfast.server import NoDefault
from flupfast.server.scgi_base import BaseSCGIServer, Connection
from flupfast.server.singleserver import SingleServer

__all__ = ['WSGIServer']


class WSGIServer(BaseSCGIServer, SingleServer):
    """SCGI/WSGI server, one connection at a time, without threads (flup has none; built
    like ``fcgi_single.WSGIServer``)."""

    def __init__(self, application, scriptName=NoDefault, environ=None,
                 bindAddress=('localhost', 4000), umask=None, allowedServers=None,
                 loggingLevel=logging.INFO, debug=False, **kw):
        """The arguments are those of ``flupfast.server.scgi.WSGIServer`` without the
        thread pool's."""
        BaseSCGIServer.__init__(self, application, scriptName=scriptName, environ=environ,
                                multithreaded=False, multiprocess=False,
                                bindAddress=bindAddress, umask=umask,
                                allowedServers=allowedServers, loggingLevel=loggingLevel,
                                debug=debug)
        self._startMode(SingleServer, Connection, (self, None), kw)

    def run(self):
        """
        Main loop. Call this after instantiating WSGIServer. SIGHUP, SIGINT, SIGTERM cause it
        to cleanup and return. (If a SIGHUP is caught, this method returns True. Returns
        False otherwise.)
        """
        return self._runServer(SingleServer)
