"""flup's ``fcgi_fork``: the preforking FastCGI WSGI server.

    from flupfast.server.fcgi_fork import WSGIServer
    WSGIServer(app, bindAddress='/run/app.sock', maxChildren=8).run()
"""
from flupfast.server.fcgi_base import (FCGI_MAX_CONNS, FCGI_MAX_REQS, FCGI_MPXS_CONNS,
                                       FCGI_RESPONDER, BaseFCGIServer, _rlimit)
from flupfast.server.preforkserver import PreforkServer

__all__ = ['WSGIServer']


class WSGIServer(BaseFCGIServer, PreforkServer):
    """FastCGI/WSGI server (flup's ``fcgi_fork.WSGIServer``), each connection served by a
    preforked child (minSpare, maxSpare, maxChildren, maxRequests, sockTimeout in ``**kw``).
    ``timeout`` (seconds) bounds each request, as in flup."""

    def __init__(self, application, environ=None, bindAddress=None, umask=None,
                 multiplexed=False, debug=False, roles=(FCGI_RESPONDER,), forceCGI=False,
                 timeout=None, **kw):
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
                                multiprocess=True, bindAddress=bindAddress, umask=umask,
                                multiplexed=multiplexed, debug=debug, roles=roles,
                                forceCGI=forceCGI, allowedServers=kw.pop('allowedServers', None))
        # flup drops multithreaded, multiprocess, jobClass and jobArgs silently (fcgi_fork.py:99).
        self._startMode(PreforkServer, self._connectionClass, (self, timeout), kw,
                        ('multithreaded', 'multiprocess', 'jobClass', 'jobArgs'))
        max_conns = min(_rlimit('RLIMIT_NOFILE'), _rlimit('RLIMIT_NPROC'))
        self.capability = {
            FCGI_MAX_CONNS: max_conns,
            FCGI_MAX_REQS: max_conns,
            FCGI_MPXS_CONNS: 0,
        }

    def run(self):
        """The main loop. Exits on SIGHUP, SIGINT, SIGTERM. Returns True if SIGHUP was
        received, False otherwise."""
        return self._runServer(PreforkServer)
