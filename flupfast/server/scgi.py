"""flup's ``scgi``: the threaded SCGI WSGI server.

    from flupfast.server.scgi import WSGIServer
    WSGIServer(app, bindAddress=('127.0.0.1', 4000)).run()
"""
import logging

from flupfast.server import NoDefault
from flupfast.server.scgi_base import BaseSCGIServer, FRONT_INIT_DOC
from flupfast.server.scgi_base import Connection  # noqa: F401  (flup's name)
from flupfast.server.threadedserver import ThreadedServer
from flupfast.server._scgi_ajp_base import FRONT_RUN_DOC
from flupfast.server._front import assemble, front_run

__all__ = ['WSGIServer']


class WSGIServer(BaseSCGIServer, ThreadedServer):
    """SCGI/WSGI server (flup's ``scgi.WSGIServer``), each connection served by a thread of a pool
    (minSpare, maxSpare, maxThreads in ``**kw``)."""

    def __init__(self, application, scriptName=NoDefault, environ=None, multithreaded=True,
                 multiprocess=False, bindAddress=('localhost', 4000), umask=None,
                 allowedServers=None, loggingLevel=logging.INFO, debug=False, **kw):
        assemble(self, BaseSCGIServer, ThreadedServer, locals())

    __init__.__doc__ = FRONT_INIT_DOC

    run = front_run(ThreadedServer, FRONT_RUN_DOC)
