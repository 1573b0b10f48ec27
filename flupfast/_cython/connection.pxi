# A connection built per accepted socket without the interpreter: the twin of calling a
# LoggedConnection class (flupfast/connection.py; SCGI's and uwsgi's connections) with
# (sock, addr, server, timeout), or a FastCGIConnection class (fastcgi_connection.py) with
# (sock, addr, server, timeout, config). Their two __init__ frames (the protocol's and, through
# super(), Connection's) were the largest Python left in a prefork child's request
# (bench/profile-new-connection.md section 15). The same attributes are set in the same order,
# ConnectionState's into its fields (state.pxi); only while the class's construction runs
# nothing but flupfast's own __init__ pair and ConnectionState's __new__, and it hides none of
# the fields (worked out per class, _ClassPlan). Any other class, or arguments of another
# shape, is called. Included after scgi_serve.pxi.

cdef object _object_init = object.__init__
cdef object _connection_module = None  # flupfast.connection, once a class was worked out
cdef object _fcgi_module = None        # flupfast.fastcgi_connection, likewise


cdef bint _inits_are(cls, str first) except -1:
    """Whether ``cls(...)`` runs only flupfast's ``__init__`` of kind ``first`` and, through
    its super() call, Connection's (in that order along the MRO) after ConnectionState's
    (or FastCGIState's) ``__new__``, under the plain metaclass, keeping its state in their
    fields."""
    if type(cls) is not type or not _state_in_place(cls):
        return False
    expected = [_OWN_METHODS.get(first, _NOT_OWN), _OWN_METHODS.get('connection_init', _NOT_OWN),
                _object_init]
    for klass in (<type>cls).__mro__:
        namespace = klass.__dict__
        if '__new__' in namespace and klass not in (object, ConnectionState, FastCGIState):
            return False
        if '__init__' in namespace:  # even None: calling the class then fails, as it should
            if not expected or namespace['__init__'] is not expected[0]:
                return False
            del expected[0]
    return not expected


cdef int _work_out_construction(cls) except -1:
    """1 when ``cls(sock, addr, server, timeout)`` is LoggedConnection's construction
    (_inits_are); else 0."""
    global _connection_module
    if not _inits_are(cls, 'logged_init'):
        return 0
    if _connection_module is None:
        from flupfast import connection
        _connection_module = connection
    return 1


cdef int _work_out_fcgi_construction(cls) except -1:
    """1 when ``cls(sock, addr, server, timeout, config)`` is FastCGIConnection's
    construction (_inits_are) on FastCGIState's fields; else 0."""
    global _fcgi_module
    if not (_inits_are(cls, 'fcgi_init') and issubclass(cls, FastCGIState)):
        return 0
    if _fcgi_module is None:
        from flupfast import fastcgi_connection
        _fcgi_module = fastcgi_connection
    return 1


cdef _ClassPlan _construction_plan = _ClassPlan()
cdef _ClassPlan _fcgi_construction_plan = _ClassPlan()


def new_job(job_class, client, addr, args):
    """``job_class(client, addr, *args)``; see serving.job.new_job."""
    return _new_job(job_class, client, addr, args if type(args) is tuple else tuple(args))


cdef object _new_job(job_class, client, addr, tuple args):
    """``job_class(client, addr, *args)``: a stock LoggedConnection class built here."""
    if len(args) == 2 and _construction_plan.get(job_class, _work_out_construction):
        return _new_logged_connection(job_class, client, addr, args[0], args[1])
    if len(args) == 3 and _fcgi_construction_plan.get(job_class, _work_out_fcgi_construction):
        return _new_fcgi_connection(job_class, client, addr, args[0], args[1], args[2])
    return job_class(client, addr, *args)


cdef ConnectionState _connection_init(cls, sock, addr):
    """A new ``cls`` (a ConnectionState class) with Connection.__init__(conn, sock, addr)'s
    writes: the first of both builders below, as their super() call runs it first."""
    cdef ConnectionState conn = flupfast_type_new(cls)
    conn._sock = sock
    conn._addr = addr
    conn._out = []
    return conn


cdef ConnectionState _new_logged_connection(cls, sock, addr, server, timeout):
    """LoggedConnection.__init__(conn, sock, addr, server, timeout) on a new ``cls``, with
    Connection.__init__ first, as its super() call runs it. What LoggedConnection's looks up at
    each call (the module's _loggers, logging.getLogger) is looked up here too: a monkeypatch
    made after import applies alike."""
    cdef ConnectionState conn = _connection_init(cls, sock, addr)
    conn.server = server
    conn._timeout = timeout
    logger_name = conn.logger_name
    loggers = _connection_module._loggers
    logger = loggers.get(logger_name)
    if logger is None:
        logger = loggers[logger_name] = _logging.getLogger(logger_name)
    conn.logger = logger
    return conn


cdef FastCGIState _new_fcgi_connection(cls, sock, addr, server, timeout, config):
    """FastCGIConnection.__init__(conn, sock, addr, server, timeout, config) on a new ``cls``,
    with Connection.__init__ first, as its super() call runs it. What it looks up at each call
    (the server's config, the parser class through _impl, collections.deque, threading.Lock)
    is looked up here too: a monkeypatch made after import applies alike."""
    cdef FastCGIState conn = <FastCGIState>_connection_init(cls, sock, addr)
    conn.server = server
    conn.timeout = timeout
    if config is None:
        config = server._connectionConfig()
    conn._config = config
    multiplexed = conn.multiplexed
    if multiplexed is None:
        multiplexed = conn.multiplexed = config.multiplexed
    if multiplexed:
        conn._send_lock = _fcgi_module.threading.Lock()
    conn.can_park = not multiplexed
    conn.max_content = config.max_content
    conn._parser = _new_parser(_fcgi_module._impl.FastCGIParser)
    conn._events = _fcgi_module.collections.deque()
    conn._requests = {}
    conn._request_threads = []
    return conn
