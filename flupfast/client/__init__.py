"""flup-compatible clients: WSGI applications that forward each request to a FastCGI
(``fcgi_app.FCGIApp``) or SCGI (``scgi_app.SCGIApp``) backend, as flup.client does.
"""
