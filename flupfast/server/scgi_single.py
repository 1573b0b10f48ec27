"""``scgi_single``: an SCGI WSGI server that serves one connection at a time in the main
thread, without threads or children. flup has no such module (it is purely additive), but
its FastCGI sibling ``fcgi_single`` has the same shape.
"""
import logging

from flupfast.server import NoDefault
from flupfast.server.scgi_base import BaseSCGIServer
from flupfast.server.scgi_base import Connection  # noqa: F401  (flup's name)
from flupfast.server.singleserver import SingleServer
from flupfast.server._scgi_ajp_base import SINGLE_RUN_DOC
from flupfast.server._front import assemble, front_run

__all__ = ['WSGIServer']


class WSGIServer(BaseSCGIServer, SingleServer):
    """SCGI/WSGI server, one connection at a time, without threads (flup has none; built
    like ``fcgi_single.WSGIServer``)."""

    def __init__(self, application, scriptName=NoDefault, environ=None,
                 bindAddress=('localhost', 4000), umask=None, allowedServers=None,
                 loggingLevel=logging.INFO, debug=False, **kw):
        """The arguments are those of ``flupfast.server.scgi.WSGIServer`` without the
        thread pool's."""
        assemble(self, BaseSCGIServer, SingleServer, locals())

    run = front_run(SingleServer, SINGLE_RUN_DOC)
