"""One uwsgi connection: read the packet header and vars, serve the one request they carry
with a body stream bounded by CONTENT_LENGTH, answer plain HTTP/1.x on the raw socket, close.

Everything but the codec, the logger and the response's first line is SCGI's connection
(scgi_connection.py): the same body stream, output stream, request, error and overload paths.
"""
import re

from flupfast.protocols.errors import UWSGIError
from flupfast.scgi_connection import SCGIConnection

LoggerName = 'uwsgi-wsgi'

# The answer's status line repeats the request's SERVER_PROTOCOL, as uWSGI does; nginx
# (ngx_http_parse_status_line) and Apache mod_proxy_uwsgi ("HTTP/#.# ###") read
# ``HTTP/<digit>.<digit>``. Anything else (a missing or odd value) answers HTTP/1.0, uWSGI's
# default; never echoing it keeps a stray CR/LF out of the response.
_HTTP_VERSION = re.compile(r'HTTP/[0-9]\.[0-9]\Z')
DEFAULT_STATUS_PREFIX = b'HTTP/1.0 '
_prefixes = {}


def status_prefix(environ):
    """``SERVER_PROTOCOL`` and a space, as bytes, when it is an HTTP version; else HTTP/1.0."""
    protocol = environ.get('SERVER_PROTOCOL')
    prefix = _prefixes.get(protocol)
    if prefix is None:
        if type(protocol) is str and _HTTP_VERSION.match(protocol):
            prefix = _prefixes[protocol] = protocol.encode('ascii') + b' '
        else:
            prefix = DEFAULT_STATUS_PREFIX
    return prefix


def url_scheme(environ):
    """wsgi.url_scheme of a uwsgi request: ``UWSGI_SCHEME`` (uWSGI's own override) if set,
    else HTTPS ``on``/``1`` (any case, as uWSGI reads it) gives https, else
    ``REQUEST_SCHEME`` (uwsgi_params' ``$scheme``); only ``http`` and ``https`` are taken."""
    value = environ.get('UWSGI_SCHEME')
    if value:
        value = value.lower()
        if value in _SCHEMES:
            return value
    value = environ.get('HTTPS')
    if value:
        return 'https' if value.lower() in ('on', '1') else 'http'
    value = environ.get('REQUEST_SCHEME')
    if value:
        value = value.lower()
        if value in _SCHEMES:
            return value
    return 'http'


_SCHEMES = frozenset(('http', 'https'))


class UWSGIConnection(SCGIConnection):
    """A connection from the web server carrying one uwsgi request (modifier1 0); any other
    packet, or a malformed one, is one "Protocol error" log line and a closed connection."""

    logger_name = LoggerName
    decoder = 'decode_uwsgi_request'
    error = UWSGIError
    head_name = 'the uwsgi packet header or vars'

    def status_prefix(self, environ):
        return status_prefix(environ)
