"""``client.uwsgi_app``: ``UWSGIApp``, a WSGI application that forwards each request to a
uwsgi backend and streams its answer back. Not in flup.

SCGIApp's forwarding with the request encoded by flupfast's uwsgi codec; the answer is the
HTTP response (status line first) the backend writes before it closes the connection.
"""
from flupfast.client.scgi_app import SCGIApp
from flupfast.protocols import uwsgi

__all__ = ['UWSGIApp']


class UWSGIApp(SCGIApp):
    """A WSGI app whose requests are answered by a uwsgi backend (modifier1 0); the
    arguments are SCGIApp's."""

    _status_line = True

    @staticmethod
    def _encode(content_length, headers):
        """The uwsgi packet: the environ's variables, then CONTENT_LENGTH."""
        return uwsgi.encode_request(list(headers.items()) + [('CONTENT_LENGTH', content_length)])
