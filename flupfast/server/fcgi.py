"""flup's ``fcgi``: the threaded FastCGI WSGI server.

    from flupfast.server.fcgi import WSGIServer
    WSGIServer(app, bindAddress=('127.0.0.1', 9000)).run()
"""
from flupfast.server.fcgi_base import FCGI_RESPONDER, BaseFCGIServer
from flupfast.server.threadedserver import ThreadedServer

__all__ = ['WSGIServer']


class WSGIServer(BaseFCGIServer, ThreadedServer):
    """FastCGI/WSGI server (flup's ``fcgi.WSGIServer``), each connection served by a thread
    of a pool (minSpare, maxSpare, maxThreads in ``**kw``)."""

    def __init__(self, application, environ=None, multithreaded=True, multiprocess=False,
                 bindAddress=None, umask=None, multiplexed=False, debug=False,
                 roles=(FCGI_RESPONDER,), forceCGI=False, **kw):
        """
        environ, if present, must be a dictionary-like object. Its contents will be copied
        into application's environ. Useful for passing application-specific variables.

        bindAddress, if present, must either be a string or a tuple. If present, run() will
        open its own listening socket: a string is a Unix socket path, a 2-tuple an IPv4
        (host, port). Otherwise the web server's socket is inherited on fd 0.

        allowedServers (a keyword in ``**kw``, flupfast's addition) is None or a list of the
        IP addresses allowed to connect, as for SCGI; FCGI_WEB_SERVER_ADDRS still applies.
        """
        BaseFCGIServer.__init__(self, application, environ=environ,
                                multithreaded=multithreaded, multiprocess=multiprocess,
                                bindAddress=bindAddress, umask=umask, multiplexed=multiplexed,
                                debug=debug, roles=roles, forceCGI=forceCGI,
                                allowedServers=kw.pop('allowedServers', None))
        self._startMode(ThreadedServer, self._connectionClass, (self, None), kw)

    def run(self):
        """The main loop. Exits on SIGHUP, SIGINT, SIGTERM. Returns True if SIGHUP was
        received, False otherwise."""
        return self._runServer(ThreadedServer)
