"""The ping path (PHP-FPM's ``ping.path``/``ping.response``): a health check answered by the
server without the app, so it says the server accepts and answers, and costs the app nothing.
"""

# PHP-FPM's answer, header for header: never cached.
PING_HEADERS = [('Content-Type', 'text/plain'),
                ('Expires', 'Thu, 01 Jan 1970 00:00:00 GMT'),
                ('Cache-Control', 'no-cache, no-store, must-revalidate, max-age=0')]


class Ping:
    """A WSGI app: ``path`` (matched against SCRIPT_NAME + PATH_INFO, so both nginx's stock
    split and a site's own one work) answers ``response``; anything else goes to ``app``."""

    def __init__(self, app, path, response='pong'):
        self.app = app
        self.path = path
        self.body = response.encode('utf-8')

    def __call__(self, environ, start_response):
        if environ.get('SCRIPT_NAME', '') + environ.get('PATH_INFO', '') != self.path:
            return self.app(environ, start_response)
        start_response('200 OK', PING_HEADERS + [('Content-Length', str(len(self.body)))])
        return [b'' if environ.get('REQUEST_METHOD') == 'HEAD' else self.body]
