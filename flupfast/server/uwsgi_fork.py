"""``uwsgi_fork``: the preforking uwsgi WSGI server (a child per connection: minSpare,
maxSpare, maxChildren, maxRequests; ``timeout`` bounds each request). Not in flup:
``flupfast.server.scgi_fork``'s server, keywords and hooks over the uwsgi protocol.

    from flupfast.server.uwsgi_fork import WSGIServer
    WSGIServer(app, bindAddress=('127.0.0.1', 4000)).run()
"""
from flupfast.server import scgi_fork as _scgi
from flupfast.server.uwsgi_base import BaseUWSGIServer

__all__ = ['WSGIServer']


class WSGIServer(BaseUWSGIServer, _scgi.WSGIServer):
    """uwsgi/WSGI server: ``scgi_fork.WSGIServer``'s arguments and behaviour, uwsgi on the
    wire."""
