"""flup's ``fcgi``: the threaded FastCGI WSGI server.

    from flupfast.server.fcgi import WSGIServer
    WSGIServer(app, bindAddress=('127.0.0.1', 9000)).run()
"""
from flupfast.server.fcgi_base import (FCGI_RESPONDER, FRONT_INIT_DOC, FRONT_RUN_DOC,
                                       BaseFCGIServer)
from flupfast.server.threadedserver import ThreadedServer
from flupfast.server._front import assemble, front_run

__all__ = ['WSGIServer']


class WSGIServer(BaseFCGIServer, ThreadedServer):
    """FastCGI/WSGI server (flup's ``fcgi.WSGIServer``), each connection served by a thread
    of a pool (minSpare, maxSpare, maxThreads in ``**kw``)."""

    def __init__(self, application, environ=None, multithreaded=True, multiprocess=False,
                 bindAddress=None, umask=None, multiplexed=False, debug=False,
                 roles=(FCGI_RESPONDER,), forceCGI=False, **kw):
        assemble(self, BaseFCGIServer, ThreadedServer, locals())

    __init__.__doc__ = FRONT_INIT_DOC

    run = front_run(ThreadedServer, FRONT_RUN_DOC)
