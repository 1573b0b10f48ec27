"""flup's ``ajp_base``: ``BaseAJPServer`` with its hooks (``handler``, ``error``,
``_sanitizeEnv``, ``requestClass``, ``_isClientAllowed``), the ``ajp-wsgi`` logger, flup's
tables and packet-type constants, and the protocol names users subclass (``Request``,
``Connection``), as thin names over flupfast's codec, connection and gateway.
"""
import hmac
import logging
import sys

from flupfast import _impl
from flupfast import ajp_connection as _ajp
from flupfast import deadline as _deadline
from flupfast import gateway
from flupfast.limits import AJP_DEFAULT_PACKET
from flupfast.protocols.ajp import (  # noqa: F401  (flup's module-level names)
    CONTAINER_PREFIX, PKTTYPE_CPING, PKTTYPE_CPONG, PKTTYPE_END_RESPONSE, PKTTYPE_FWD_REQ,
    PKTTYPE_GET_BODY, PKTTYPE_PING, PKTTYPE_SEND_BODY, PKTTYPE_SEND_HEADERS, PKTTYPE_SHUTDOWN,
    SERVER_PREFIX, attributeTable, methodTable, requestHeaderTable, responseHeaderTable,
    decode_string, encode_packet, encode_response_header, encode_string)
from flupfast.server._blocking_io import recv_exactly, recvall, sendall
from flupfast.protocols.errors import AJPError
from flupfast.server import NoDefault
from flupfast.server import _scgi_ajp_base as shared
from flupfast.server._scgi_ajp_base import SCGIAJPServerBase, install_console_handler

__all__ = ['BaseAJPServer']

# The main classes use this name for logging.
LoggerName = _ajp.LoggerName
install_console_handler(LoggerName)

ProtocolError = AJPError  # flup's ajp_base.ProtocolError (ours is also a ProtocolError)
TimeoutException = _deadline.TimeoutException
Request = _ajp.AJPRequest
InputStream = _impl.InputStream


def decodeString(data, pos=0):
    """Decode the AJP string at ``pos``: ``(bytes, position after its NUL)``; the null string
    (length 0xFFFF) is b'' as in flup. ProtocolError if it is truncated or lacks its NUL."""
    value, pos = decode_string(data, pos)
    return (b'' if value is None else value), pos


def decodeRequestHeader(data, pos=0):
    """Decode a request header/value pair: ``(name, value, pos)``, bytes; a coded name
    (0xA0xx) comes from requestHeaderTable."""
    if len(data) - pos >= 2 and data[pos] == 0xA0:
        index = data[pos + 1]
        if not 0 < index < len(requestHeaderTable):
            raise ProtocolError('decodeRequestHeader: bad request header code 0xA0%02X'
                                % index)
        name, pos = requestHeaderTable[index], pos + 2
    else:
        name, pos = decodeString(data, pos)
    value, pos = decodeString(data, pos)
    return name, value, pos


def decodeAttribute(data, pos=0):
    """Decode a request attribute: ``(name, value, pos)``; ``(None, None, pos)`` at the 0xFF
    that ends the list. SSL_KEY_SIZE's value is a str of its integer, as flup's."""
    if pos >= len(data):
        raise ProtocolError('decodeAttribute: no attribute code at %d' % pos)
    code = data[pos]
    pos += 1
    if code == 0xFF:
        return None, None, pos
    if code == 0x0A:
        name, pos = decodeString(data, pos)
    elif code == 0x0B:
        if len(data) - pos < 2:
            raise ProtocolError('decodeAttribute: truncated SSL_KEY_SIZE')
        return attributeTable[code], str((data[pos] << 8) | data[pos + 1]), pos + 2
    elif 0 < code < len(attributeTable) and attributeTable[code] is not None:
        name = attributeTable[code]
    else:
        raise ProtocolError('decodeAttribute: bad attribute code 0x%02X' % code)
    value, pos = decodeString(data, pos)
    return name, value, pos


encodeString = encode_string
encodeResponseHeader = encode_response_header


class Packet(object):
    """flup's ``Packet``: one AJP13 packet read from the web server (``read(sock)``: the
    0x1234 header is checked, ``data`` is the payload) or written to it (``write(sock)``:
    ``data`` behind an 'AB' header), through flupfast's codec."""

    def __init__(self):
        self.data = b''
        # Don't set this on write, it will be calculated automatically.
        self.length = 0

    _recvall = staticmethod(recvall)

    def read(self, sock):
        """Attempt to read a packet from the server; EOFError when the connection ends
        first, ProtocolError on a bad header."""
        parser = _impl.AJPParser()
        header = recv_exactly(sock, 4)
        parser.feed(header)  # checks the magic and the length cap
        self.length = (header[2] << 8) | header[3]
        self.data = b''
        if self.length:
            (self.data,) = parser.feed(recv_exactly(sock, self.length))

    def write(self, sock):
        """Send a packet to the server."""
        self.length = len(self.data)
        sendall(sock, encode_packet(self.data))


class Connection(_ajp.AJPConnection):
    """One AJP13 connection from the web server, its requests served one after another
    (flup's ``ajp_base.Connection``; the job the modes run per accepted socket)."""


_SCRIPT_NAME_DOC = """scriptName is the initial portion of the URL path that "belongs" to your
application. It is used to determine PATH_INFO (which doesn't seem to be passed in).
An empty scriptName means your application is mounted at the root of your virtual
host."""

# __init__'s docstring in flup's threaded and prefork AJP front ends.
FRONT_INIT_DOC = shared.init_doc(_SCRIPT_NAME_DOC, shared.ENVIRON_DOC, """\
bindAddress is the address to bind to: a 2-tuple (host, port) is IPv4, a 4-tuple
IPv6 (flup: IPv4 only).""", shared.ALLOWED_DOC, shared.LOGGING_DOC)


class BaseAJPServer(SCGIAJPServerBase):
    """The AJP13 protocol side of the servers (flup's ``ajp_base.BaseAJPServer``): hooks,
    environ and error page; front ends mix in a mode (``ThreadedServer``, ``PreforkServer``,
    ``SingleServer``)."""

    # What Request class to use.
    requestClass = Request
    LoggerName = LoggerName
    _connectionClass = Connection

    # flup's input buffer shrink point; flupfast's stream compacts by its own rule, but the
    # attribute stays for subclasses that read or set it.
    inputStreamShrinkThreshold = 102400 - 8192

    # Size of the packets we send, header included: it must not exceed the web server's
    # (mod_proxy_ajp ProxyIOBufferSize, default 8192; raise both to 65536 for big bodies).
    # Packets from the web server are accepted up to 64 KiB whatever this says.
    packetSize = AJP_DEFAULT_PACKET

    # The shared secret mod_proxy_ajp sends with ``secret=`` (Tomcat's secretRequired). None
    # accepts any request, with or without one (flup drops the connection when one comes);
    # a string refuses requests without that secret with 403.
    secret = None

    def __init__(self, application, scriptName='', environ=None, multithreaded=True,
                 multiprocess=False, bindAddress=('localhost', 8009), allowedServers=NoDefault,
                 loggingLevel=logging.INFO, debug=False):
        self._init_common(application, scriptName, environ, multithreaded, multiprocess,
                          bindAddress, None, allowedServers, loggingLevel, debug, NoDefault)

    __init__.__doc__ = shared.init_doc(_SCRIPT_NAME_DOC, shared.ENVIRON_DOC, shared.THREADS_DOC, """\
bindAddress is the address to bind to: a 2-tuple (host, port) is IPv4, a 4-tuple
(host, port, flowinfo, scope_id) IPv6 (flup: IPv4 only), a string a Unix socket.""",
                                shared.ALLOWED_DEFAULT_DOC, shared.LOGGING_DOC)

    def _connectionConfig(self):
        """The connections' settings, read from ``packetSize`` once per run()."""
        return _ajp.AJPConfig(self.packetSize)

    def _isSecretValid(self, secret):
        expected = self.secret
        if expected is None:
            return True
        return secret is not None and hmac.compare_digest(secret.encode('latin-1'),
                                                          expected.encode('latin-1'))

    def handler(self, request):
        """WSGI handler. Sets up WSGI environment, calls the application, and sends the
        application's response."""
        environ = self._environ_for(request.environ, request.input)
        self._sanitizeEnv(environ)
        _impl.run_application(self.application, environ, _ajp.AJPResponder(request),
                              None if self.multithreaded else self._appLock)

    def _sanitizeEnv(self, environ):
        """Fill-in/deduce missing values in environ (flup ajp_base.py:950-969): SCRIPT_NAME
        is scriptName (or WSGI_SCRIPT_NAME), PATH_INFO the rest of REQUEST_URI (AJP sends
        the path without the query, percent-encoded, as flup leaves it)."""
        value = environ['REQUEST_URI']
        script_name = environ.get('WSGI_SCRIPT_NAME', self.scriptName)
        if not value.startswith(script_name):
            self.logger.warning('scriptName does not match request URI')
        environ['PATH_INFO'] = value[len(script_name):]
        environ['SCRIPT_NAME'] = script_name
        gateway.fill_query_string(environ, gateway.split_request_uri(environ))

    def error(self, request):
        """Override to provide custom error handling. Ideally, however, all errors should be
        caught at the application level. Sends the 500 page with status 500 (flup sends it
        with 200)."""
        request.startResponse(500, b'Internal Server Error', [(b'Content-Type', b'text/html')])
        request.write(gateway.error_page(self.debug, sys.exc_info()))
