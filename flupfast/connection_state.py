"""What a connection's request path reads and writes on the connection at every request: the
base of connection.Connection (pure twin of _cython/state.pxi's ConnectionState), and
FastCGIState, what a FastCGI connection adds (the base of FastCGIConnection, after Connection).

Here they are ordinary attributes in the instance's dict, with the defaults below (the job
contract's, serving/job.py). The compiled twin keeps them in C fields that its request paths
(SCGI/uwsgi, FastCGI, the prefork child's job factory) read and write without a dict lookup
each (about 30 per request, bench/profile-new-connection.md section 16). What differs between
the twins, for code that reaches past a connection's attributes: the compiled twin's fields
are not in ``vars(conn)``; one never set (a connection built without its ``__init__``) or
deleted reads None there, where here it raises AttributeError or falls back to the default;
a class-level patch of ``socket.socket.recv_into`` is not called by its receive (sockio.pxi).
"""

from flupfast.serving.job import Job

__all__ = ["ConnectionState", "FastCGIState", "STATE_FIELDS", "FASTCGI_STATE_FIELDS"]

# The compiled twin's fields, in this order; a subclass that sets one as a class attribute
# (or overrides __setattr__, __getattribute__ or __delattr__) keeps its instances on the pure
# request path, which reads them as Python does.
STATE_FIELDS = ("_sock", "_addr", "_out", "server", "_timeout", "logger", "_body", "closed",
                "idle", "parked", "served", "on_idle", "may_keep", "max_requests")
# FastCGIState's own, likewise: what a FastCGI connection's __init__ writes (every one of
# them, at every connection) and its compiled chain reads.
FASTCGI_STATE_FIELDS = ("timeout", "_config", "can_park", "max_content", "_parser", "_events",
                        "_requests", "_request_threads")


class ConnectionState:
    """The connection's per-request state: its socket and peer, server, logger and timeout,
    the body source of the request under way, and the job contract's flags and counters."""

    __slots__ = ()
    closed = False
    _body = None  # the body source once a request head is read
    # The job contract's (serving/job.py Job), here too: a class after this one in the MRO
    # (a mixin's default) is no more seen than by the compiled twin.
    idle = Job.idle
    parked = Job.parked
    served = Job.served
    on_idle = Job.__dict__['on_idle']  # the staticmethods themselves
    may_keep = Job.__dict__['may_keep']
    max_requests = Job.max_requests


class FastCGIState(ConnectionState):
    """A FastCGI connection's state (fastcgi_connection.FastCGIConnection's base, after
    Connection): its timeout, config, parser, event queue and requests. No defaults: its
    __init__ sets them all."""

    __slots__ = ()
