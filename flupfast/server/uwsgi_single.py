"""``uwsgi_single``: a uwsgi WSGI server serving one connection at a time in the main
thread. Not in flup: ``flupfast.server.scgi_single``'s server, keywords and hooks over the
uwsgi protocol.

    from flupfast.server.uwsgi_single import WSGIServer
    WSGIServer(app, bindAddress=('127.0.0.1', 4000)).run()
"""
from flupfast.server import scgi_single as _scgi
from flupfast.server.uwsgi_base import BaseUWSGIServer

__all__ = ['WSGIServer']


class WSGIServer(BaseUWSGIServer, _scgi.WSGIServer):
    """uwsgi/WSGI server: ``scgi_single.WSGIServer``'s arguments and behaviour, uwsgi on the
    wire."""
