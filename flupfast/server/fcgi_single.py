"""flup's ``fcgi_single``: a FastCGI WSGI server that serves one connection at a time in the
main thread (mod_fcgid starts one process per concurrent request anyway).
"""
from flupfast.server.fcgi_base import (FCGI_MAX_CONNS, FCGI_MAX_REQS, FCGI_MPXS_CONNS,
                                       FCGI_RESPONDER, BaseFCGIServer)
from flupfast.server.singleserver import SingleServer

__all__ = ['WSGIServer']


class WSGIServer(BaseFCGIServer, SingleServer):
    """FastCGI/WSGI server (flup's ``fcgi_single.WSGIServer``), one connection at a time,
    without threads."""

    def __init__(self, application, environ=None, bindAddress=None, umask=None,
                 multiplexed=False, debug=False, roles=(FCGI_RESPONDER,), forceCGI=False, **kw):
        """
        environ, if present, must be a dictionary-like object. Its contents will be copied
        into application's environ. Useful for passing application-specific variables.

        bindAddress, if present, must either be a string or a tuple. If present, run() will
        open its own listening socket: a string is a Unix socket path, a 2-tuple an IPv4
        (host, port). Otherwise the web server's socket is inherited on fd 0.

        allowedServers (a keyword in ``**kw``, flupfast's addition) is None or a list of the
        IP addresses allowed to connect, as for SCGI; FCGI_WEB_SERVER_ADDRS still applies.
        """
        BaseFCGIServer.__init__(self, application, environ=environ, multithreaded=False,
                                multiprocess=False, bindAddress=bindAddress, umask=umask,
                                multiplexed=multiplexed, debug=debug, roles=roles,
                                forceCGI=forceCGI, allowedServers=kw.pop('allowedServers', None))
        self._startMode(SingleServer, self._connectionClass, (self, None), kw)
        self.capability = {FCGI_MAX_CONNS: 1, FCGI_MAX_REQS: 1, FCGI_MPXS_CONNS: 0}

    def run(self):
        """The main loop. Exits on SIGHUP, SIGINT, SIGTERM. Returns True if SIGHUP was
        received, False otherwise."""
        return self._runServer(SingleServer)
