"""flup-compatible clients: WSGI applications that forward each request to a FastCGI
(``fcgi_app.FCGIApp``) or SCGI (``scgi_app.SCGIApp``) backend, as flup.client does, and to an
AJP13 container (``ajp_app.AJPApp``, which flup lacks). ``python -m flupfast.client`` sends one
request through them: a health check.
"""
