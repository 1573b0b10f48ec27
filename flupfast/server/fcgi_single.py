"""flup's ``fcgi_single``: a FastCGI WSGI server that serves one connection at a time in the
main thread (mod_fcgid starts one process per concurrent request anyway).
"""
from flupfast.server.fcgi_base import (FCGI_MAX_CONNS, FCGI_MAX_REQS, FCGI_MPXS_CONNS,
                                       FCGI_RESPONDER, FRONT_INIT_DOC, FRONT_RUN_DOC,
                                       BaseFCGIServer)
from flupfast.server.singleserver import SingleServer
from flupfast.server._front import assemble, front_run

__all__ = ['WSGIServer']


class WSGIServer(BaseFCGIServer, SingleServer):
    """FastCGI/WSGI server (flup's ``fcgi_single.WSGIServer``), one connection at a time,
    without threads."""

    def __init__(self, application, environ=None, bindAddress=None, umask=None,
                 multiplexed=False, debug=False, roles=(FCGI_RESPONDER,), forceCGI=False, **kw):
        assemble(self, BaseFCGIServer, SingleServer, locals())
        self.capability = {FCGI_MAX_CONNS: 1, FCGI_MAX_REQS: 1, FCGI_MPXS_CONNS: 0}

    __init__.__doc__ = FRONT_INIT_DOC

    run = front_run(SingleServer, FRONT_RUN_DOC)
