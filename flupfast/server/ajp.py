"""flup's ``ajp``: the threaded AJP13 WSGI server, for Apache mod_proxy_ajp / mod_jk.

    from flupfast.server.ajp import WSGIServer
    WSGIServer(app, bindAddress=('127.0.0.1', 8009)).run()
"""
import logging

from flupfast.server.ajp_base import BaseAJPServer, FRONT_INIT_DOC
from flupfast.server.ajp_base import Connection  # noqa: F401  (flup's name)
from flupfast.server.threadedserver import ThreadedServer
from flupfast.server._scgi_ajp_base import FRONT_RUN_DOC
from flupfast.server._front import assemble, front_run

__all__ = ['WSGIServer']


class WSGIServer(BaseAJPServer, ThreadedServer):
    """AJP1.3/WSGI server (flup's ``ajp.WSGIServer``), each (persistent) connection served by a
    thread of a pool (minSpare, maxSpare, maxThreads in ``**kw``). Apache pools its AJP
    connections, so each of them holds a thread while open."""

    def __init__(self, application, scriptName='', environ=None, multithreaded=True,
                 multiprocess=False, bindAddress=('localhost', 8009), allowedServers=None,
                 loggingLevel=logging.INFO, debug=False, **kw):
        assemble(self, BaseAJPServer, ThreadedServer, locals())

    __init__.__doc__ = FRONT_INIT_DOC

    run = front_run(ThreadedServer, FRONT_RUN_DOC)
