"""What a connection's request path reads and writes on the connection at every request: the
base of connection.Connection (pure twin of _cython/connection.pxi's ConnectionState).

Here they are ordinary attributes in the instance's dict, with the defaults below (the job
contract's own defaults, serving/job.py, stand behind them). The compiled twin keeps them in C
fields that its SCGI/uwsgi request path reads without a dict lookup each (about 30 per request,
bench/profile-new-connection.md section 16). No import of the connections or modes here: both
sides build on it.
"""

__all__ = ["ConnectionState", "STATE_FIELDS"]

# The compiled twin's fields, in this order; a subclass that sets one as a class attribute
# hides the field (its instances then take the pure request path).
STATE_FIELDS = ("_sock", "_addr", "_out", "server", "_timeout", "logger", "_body", "closed",
                "idle", "parked", "served", "on_idle", "may_keep", "max_requests")


class ConnectionState:
    """The connection's per-request state: its socket and peer, server, logger and timeout,
    the body source of the request under way, and the job contract's flags and counters."""

    __slots__ = ()
    closed = False
    _body = None  # the body source once a request head is read
