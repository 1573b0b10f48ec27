"""flup's ``fcgi_fork``: the preforking FastCGI WSGI server.

    from flupfast.server.fcgi_fork import WSGIServer
    WSGIServer(app, bindAddress='/run/app.sock', maxChildren=8).run()
"""
from flupfast.server.fcgi_base import (FCGI_MAX_CONNS, FCGI_MAX_REQS, FCGI_MPXS_CONNS,
                                       FCGI_RESPONDER, FRONT_INIT_DOC, FRONT_RUN_DOC,
                                       BaseFCGIServer, _rlimit)
from flupfast.server.preforkserver import PreforkServer
from flupfast.server._front import assemble, front_run

__all__ = ['WSGIServer']


class WSGIServer(BaseFCGIServer, PreforkServer):
    """FastCGI/WSGI server (flup's ``fcgi_fork.WSGIServer``), each connection served by a
    preforked child (minSpare, maxSpare, maxChildren, maxRequests, sockTimeout in ``**kw``).
    ``timeout`` (seconds) bounds each request, as in flup."""

    def __init__(self, application, environ=None, bindAddress=None, umask=None,
                 multiplexed=False, debug=False, roles=(FCGI_RESPONDER,), forceCGI=False,
                 timeout=None, **kw):
        assemble(self, BaseFCGIServer, PreforkServer, locals())
        max_conns = min(_rlimit('RLIMIT_NOFILE'), _rlimit('RLIMIT_NPROC'))
        self.capability = {
            FCGI_MAX_CONNS: max_conns,
            FCGI_MAX_REQS: max_conns,
            FCGI_MPXS_CONNS: 0,
        }

    __init__.__doc__ = FRONT_INIT_DOC

    run = front_run(PreforkServer, FRONT_RUN_DOC)
