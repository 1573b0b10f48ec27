"""flup's ``ajp_fork``: the preforking AJP13 WSGI server.

    from flupfast.server.ajp_fork import WSGIServer
    WSGIServer(app, bindAddress=('127.0.0.1', 8009), maxChildren=32).run()

Apache keeps its AJP connections open, and each open connection holds a child: size
maxChildren to the web server's connection pool (mod_proxy's ``max=`` per Apache child).
"""
import logging

from flupfast.server.ajp_base import BaseAJPServer, FRONT_INIT_DOC
from flupfast.server.ajp_base import Connection  # noqa: F401  (flup's name)
from flupfast.server.preforkserver import PreforkServer
from flupfast.server._scgi_ajp_base import FRONT_RUN_DOC
from flupfast.server._front import assemble, front_run

__all__ = ['WSGIServer']


class WSGIServer(BaseAJPServer, PreforkServer):
    """AJP1.3/WSGI server (flup's ``ajp_fork.WSGIServer``), each connection served by a preforked
    child (minSpare, maxSpare, maxChildren, maxRequests, sockTimeout in ``**kw``). ``timeout``
    (seconds) bounds each request, as in flup."""

    def __init__(self, application, scriptName='', environ=None,
                 bindAddress=('localhost', 8009), allowedServers=None,
                 loggingLevel=logging.INFO, debug=False, timeout=None, **kw):
        assemble(self, BaseAJPServer, PreforkServer, locals())

    __init__.__doc__ = FRONT_INIT_DOC

    run = front_run(PreforkServer, FRONT_RUN_DOC)
