# A connection built per accepted socket without the interpreter: the twin of calling a
# LoggedConnection class (flupfast/connection.py; SCGI's and uwsgi's connections) with
# (sock, addr, server, timeout). Its two __init__ frames (LoggedConnection's and, through
# super(), Connection's) were the largest Python left in a prefork child's request
# (bench/profile-new-connection.md section 15). The same attributes are set in the same order,
# into ConnectionState's fields (state.pxi); only while the class's construction runs nothing
# but flupfast's own __init__ pair and ConnectionState's __new__, and it hides none of the
# fields (worked out per class, _ClassPlan). Any other class, or arguments of another shape,
# is called. Included after scgi_serve.pxi.

cdef extern from *:
    """
    /* cls.__new__(cls) without the call through its Python wrapper: the class's tp_new (the
       one ConnectionState's, inherited) with no arguments. */
    static PyObject *flupfast_type_new(PyObject *cls) {
        static PyObject *no_args = NULL;
        if (no_args == NULL && (no_args = PyTuple_New(0)) == NULL)
            return NULL;
        return ((PyTypeObject *)cls)->tp_new((PyTypeObject *)cls, no_args, NULL);
    }
    """
    object flupfast_type_new(object cls)

cdef object _object_init = object.__init__
cdef object _connection_module = None  # flupfast.connection, once a class was worked out


cdef int _work_out_construction(cls) except -1:
    """1 when ``cls(sock, addr, server, timeout)`` runs only flupfast's LoggedConnection and
    Connection ``__init__`` (in that order along the MRO) after ConnectionState's ``__new__``,
    under the plain metaclass, and keeps its state in ConnectionState's fields; else 0."""
    global _connection_module
    if type(cls) is not type or not _state_in_place(cls):
        return 0
    logged_init = _OWN_METHODS.get('logged_init', _NOT_OWN)
    connection_init = _OWN_METHODS.get('connection_init', _NOT_OWN)
    expected = [logged_init, connection_init, _object_init]
    for klass in (<type>cls).__mro__:
        namespace = klass.__dict__
        if klass is not object and klass is not ConnectionState and '__new__' in namespace:
            return 0
        if '__init__' in namespace:  # even None: calling the class then fails, as it should
            if not expected or namespace['__init__'] is not expected[0]:
                return 0
            del expected[0]
    if expected:
        return 0
    if _connection_module is None:
        from flupfast import connection
        _connection_module = connection
    return 1


cdef _ClassPlan _construction_plan = _ClassPlan()


def new_job(job_class, client, addr, args):
    """``job_class(client, addr, *args)``; see serving.job.new_job."""
    return _new_job(job_class, client, addr, args if type(args) is tuple else tuple(args))


cdef object _new_job(job_class, client, addr, tuple args):
    """``job_class(client, addr, *args)``: a stock LoggedConnection class built here."""
    if len(args) == 2 and _construction_plan.get(job_class, _work_out_construction):
        return _new_logged_connection(job_class, client, addr, args[0], args[1])
    return job_class(client, addr, *args)


cdef ConnectionState _new_logged_connection(cls, sock, addr, server, timeout):
    """LoggedConnection.__init__(conn, sock, addr, server, timeout) on a new ``cls``, with
    Connection.__init__ first, as its super() call runs it. What LoggedConnection's looks up at
    each call (the module's _loggers, logging.getLogger) is looked up here too: a monkeypatch
    made after import applies alike."""
    cdef ConnectionState conn = flupfast_type_new(cls)  # a ConnectionState class
    conn._sock = sock
    conn._addr = addr
    conn._out = []
    conn.server = server
    conn._timeout = timeout
    logger_name = conn.logger_name
    loggers = _connection_module._loggers
    logger = loggers.get(logger_name)
    if logger is None:
        logger = loggers[logger_name] = _logging.getLogger(logger_name)
    conn.logger = logger
    return conn
