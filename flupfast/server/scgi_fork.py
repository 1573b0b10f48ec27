"""flup's ``scgi_fork``: the preforking SCGI WSGI server.

    from flupfast.server.scgi_fork import WSGIServer
    WSGIServer(app, bindAddress=('127.0.0.1', 4000), maxChildren=8).run()
"""
import logging

from flupfast.server import NoDefault
from flupfast.server.preforkserver import PreforkServer
from flupfast.server.scgi_base import BaseSCGIServer, FRONT_INIT_DOC
from flupfast.server.scgi_base import Connection  # noqa: F401  (flup's name)
from flupfast.server._scgi_ajp_base import FRONT_RUN_DOC
from flupfast.server._front import assemble, front_run

__all__ = ['WSGIServer']


class WSGIServer(BaseSCGIServer, PreforkServer):
    """SCGI/WSGI server (flup's ``scgi_fork.WSGIServer``), each connection served by a preforked
    child (minSpare, maxSpare, maxChildren, maxRequests, sockTimeout in ``**kw``). ``timeout``
    (seconds) bounds each request, as in flup."""

    def __init__(self, application, scriptName=NoDefault, environ=None,
                 bindAddress=('localhost', 4000), umask=None, allowedServers=None,
                 loggingLevel=logging.INFO, debug=False, timeout=None, **kw):
        assemble(self, BaseSCGIServer, PreforkServer, locals())

    __init__.__doc__ = FRONT_INIT_DOC

    run = front_run(PreforkServer, FRONT_RUN_DOC)
