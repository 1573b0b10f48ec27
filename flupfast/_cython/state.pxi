# The compiled twin of flupfast/connection_state.py: a connection's per-request state in C
# fields. connection.Connection derives from it, so every connection keeps these attributes
# here, not in its dict; Python reads and writes them through their descriptors. The compiled
# request paths (SCGI/uwsgi in scgi_serve.pxi, FastCGI's chain in fastcgi_serve.pxi, the
# connections' build in connection.pxi, the prefork child's factory in prefork.pxi) read and
# write them directly, where each was a type lookup and a dict lookup (about 30 per request,
# 150-450 instructions each: bench/profile-new-connection.md section 16), only on a class
# whose MRO sets none of them as a class attribute before this base and overrides no
# attribute access (_state_in_place): such an attribute hides the field from Python, which
# then reads the instance's dict, and such an override must see every access.

import copyreg as _copyreg

from flupfast.connection_state import FASTCGI_STATE_FIELDS as _FASTCGI_STATE_FIELDS
from flupfast.connection_state import STATE_FIELDS as _STATE_FIELDS
from flupfast.serving.job import Job as _Job

# The job contract's defaults (serving/job.py Job), read once.
cdef object _IDLE = _Job.idle, _PARKED = _Job.parked, _SERVED = _Job.served
cdef object _ON_IDLE = _Job.on_idle, _MAY_KEEP = _Job.may_keep
cdef object _MAX_REQUESTS = _Job.max_requests


cdef class ConnectionState:
    """A connection's per-request state (see flupfast/connection_state.py)."""

    cdef public object _sock, _addr, _out, server, _timeout, logger, _body
    cdef public object closed, idle, parked, served, on_idle, may_keep, max_requests

    def __cinit__(self, *args, **kwargs):
        # The pure twin's class defaults, the job contract's among them.
        self.closed = False
        self.idle = _IDLE
        self.parked = _PARKED
        self.served = _SERVED
        self.on_idle = _ON_IDLE
        self.may_keep = _MAY_KEEP
        self.max_requests = _MAX_REQUESTS  # unlimited (a prefork child sets its budget)

    def __reduce_ex__(self, protocol):
        """copy.copy() and pickle as for the pure twin: the class, then the instance's dict
        and the fields (as __slots__ state; what they hold may refuse, as a socket does)."""
        fields = {name: getattr(self, name) for name in _fields_of(type(self))}
        return (_copyreg.__newobj__, (type(self),), (getattr(self, '__dict__', None), fields))


cdef class FastCGIState(ConnectionState):
    """A FastCGI connection's state (see flupfast/connection_state.py): what its __init__
    writes at every connection, which had been the instance's dict (eight inserts, the dict
    made and freed: bench/profile-new-connection.md section 18)."""

    cdef public object timeout, _config, can_park, max_content, _parser, _events
    cdef public object _requests, _request_threads


cdef tuple _FASTCGI_AND_STATE_FIELDS = _FASTCGI_STATE_FIELDS + _STATE_FIELDS


cdef tuple _fields_of(cls):
    """The C fields of ``cls``'s instances (a ConnectionState class)."""
    return _FASTCGI_AND_STATE_FIELDS if issubclass(cls, FastCGIState) else _STATE_FIELDS


cdef tuple _ACCESS_HOOKS = ('__setattr__', '__getattribute__', '__delattr__')


cdef bint _state_in_place(cls) except -1:
    """Whether ``cls``'s instances keep their state in ConnectionState's fields (and
    FastCGIState's, for its subclasses) as Python sees it, with nothing to call on access: a
    subclass, and no class before ConnectionState in its MRO (but FastCGIState) sets a
    field's name or overrides attribute access."""
    if not (isinstance(cls, type) and issubclass(cls, ConnectionState)):
        return False
    cdef tuple names = _fields_of(cls)
    for klass in (<type>cls).__mro__:
        if klass is ConnectionState:
            return True
        if klass is FastCGIState:
            continue  # the fields' own descriptors
        namespace = klass.__dict__
        for name in names:
            if name in namespace:
                return False
        for name in _ACCESS_HOOKS:
            if name in namespace:
                return False
    return True


cdef bint _state_in_place_of(job) except -1:
    """_state_in_place of ``job``'s class, as the connection plan (scgi_serve.pxi) keeps it."""
    return isinstance(job, ConnectionState) and \
        _conn_plan.get(type(job), _work_out_conn) & _OWN_STATE
