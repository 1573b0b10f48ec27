"""``ajp_single``: an AJP13 WSGI server that serves one connection at a time in the main
thread. flup has no such module (it is purely additive). Apache keeps AJP connections open,
so use it behind a web server that opens one connection (``ProxyPass ... max=1``) or for
debugging.
"""
import logging

from flupfast.server.ajp_base import BaseAJPServer
from flupfast.server.ajp_base import Connection  # noqa: F401  (flup's name)
from flupfast.server.singleserver import SingleServer
from flupfast.server._scgi_ajp_base import SINGLE_RUN_DOC
from flupfast.server._front import assemble, front_run

__all__ = ['WSGIServer']


class WSGIServer(BaseAJPServer, SingleServer):
    """AJP1.3/WSGI server, one connection at a time, without threads (flup has none; built
    like ``fcgi_single.WSGIServer``)."""

    def __init__(self, application, scriptName='', environ=None,
                 bindAddress=('localhost', 8009), allowedServers=None,
                 loggingLevel=logging.INFO, debug=False, **kw):
        """The arguments are those of ``flupfast.server.ajp.WSGIServer`` without the thread
        pool's."""
        assemble(self, BaseAJPServer, SingleServer, locals())

    run = front_run(SingleServer, SINGLE_RUN_DOC)
