"""Protocol errors, defined once and shared by the pure and the compiled codecs.

A codec raises nothing but its protocol's error; the connection logs it and closes.
"""


class ProtocolError(Exception):
    """The peer sent bytes that break the protocol; the connection cannot continue."""


class FastCGIError(ProtocolError):
    """Malformed FastCGI input (FastCGI 1.0 specification)."""


class SCGIError(ProtocolError):
    """Malformed SCGI input."""


class AJPError(ProtocolError):
    """Malformed AJP13 input."""


class UWSGIError(ProtocolError):
    """Malformed uwsgi input, or a packet this server does not serve (modifier1 other than 0)."""
