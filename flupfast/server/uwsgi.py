"""``uwsgi``: the threaded uwsgi WSGI server (a thread of a pool per connection: minSpare,
maxSpare, maxThreads). Not in flup: ``flupfast.server.scgi``'s server, keywords and hooks
over the uwsgi protocol (nginx ``uwsgi_pass``, Apache mod_proxy_uwsgi).

    from flupfast.server.uwsgi import WSGIServer
    WSGIServer(app, bindAddress=('127.0.0.1', 4000)).run()
"""
from flupfast.server import scgi as _scgi
from flupfast.server.uwsgi_base import BaseUWSGIServer

__all__ = ['WSGIServer']


class WSGIServer(BaseUWSGIServer, _scgi.WSGIServer):
    """uwsgi/WSGI server: ``scgi.WSGIServer``'s arguments and behaviour, uwsgi on the
    wire."""
