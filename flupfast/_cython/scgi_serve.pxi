# The compiled twins of flupfast/scgi_connection.py's ``run`` and ``serve``: one SCGI or uwsgi
# connection and its request, from the request head to the close, with the same calls, log
# lines, errors and bytes. What it saves is the interpreter: the Python frames of the head's
# receive, the body source and output stream, flup's Request and the server's handler,
# _environ_for and _sanitizeEnv ran for every request (bench/profile-new-connection.md
# section 10).
#
# The rules stay where they are, once: the codecs, the body stream and the gateway are the
# compiled twins of this extension. What a user may override runs here in C only while it is
# flupfast's own method (OWN_METHODS, by identity, worked out per class): the connection's
# _read_header, recv_some, send, status_prefix, _serve, _finish and close (flupfast's names,
# checked on the class), flup's requestClass, and the server's handler, _environ_for and
# _sanitizeEnv (flup's hooks, also checked on the instance). Anything else goes through
# Python exactly where the pure twin calls it; error() always does. Included last: it uses
# sockio.pxi's _recv_into, gateway.pxi's cores and output.pxi's PartsWriter.

import datetime as _datetime
import logging as _logging
import sys as _sys

from flupfast import deadline as _deadline
from flupfast import fastlog as _fastlog
from flupfast import sockio as _sockio
from flupfast.body import ClientDisconnected as _ClientDisconnected
from flupfast.gateway import is_peer_gone as _is_peer_gone
from flupfast.limits import COALESCE_LIMIT as _COALESCE_LIMIT, RECV_BUFFER_SIZE as _RECV_SIZE
from flupfast.protocols.errors import ProtocolError as _ProtocolError
from flupfast.output import is_regular_file as _is_regular_file
from flupfast.protocols import uwsgi as _uwsgi_py
from flupfast.serving.job import WAIT as _WAIT, wait as _wait_always

cdef object _INFO = _logging.INFO
cdef object _DEBUG = _logging.DEBUG
cdef object _Logger = _logging.Logger
cdef object _thread_state = _sockio._thread_state
cdef object _receive_buffer = _sockio.receive_buffer
cdef dict _uwsgi_prefixes = _uwsgi_py._prefixes
cdef object _uwsgi_prefix_of = _uwsgi_py.status_prefix
cdef object _URL_SCHEMES = _uwsgi_py._SCHEMES
cdef object _request_deadline = _deadline.request_deadline
cdef object _log_info = _fastlog.info
cdef object _readable = _fastlog.readable
cdef object _now = _datetime.datetime.now
cdef object _NoDefault = None  # flupfast.server's


# The methods serve_scgi may run itself, by kind (_impl.runs_compiled fills it as flupfast's
# modules define them). Compared by identity: a method wrapped with functools.wraps, or a
# proxy, is an override even though it carries the original's attributes.
OWN_METHODS = {}
cdef dict _OWN_METHODS = OWN_METHODS
cdef object _NOT_OWN = object()


cdef inline bint _is_own(cls, str name, str kind):
    """``cls.<name>`` is flupfast's method of that ``kind`` (not an override)."""
    return getattr(cls, name, None) is _OWN_METHODS.get(kind, _NOT_OWN)


# Which of a class's methods are flupfast's own is worked out once per class and kept while
# the class is unchanged: CPython gives a class a new version tag whenever it or a base is
# modified (a method replaced), the tag its own attribute cache is keyed by. Looked up per
# request instead, the checks cost about 4,000 instructions (bench/profile-new-connection.md
# section 10). A tag of 0 (none assigned, or 3.12+'s "invalid") is never kept; before 3.12 a
# tag counts only with Py_TPFLAGS_VALID_VERSION_TAG (3.13 no longer sets that flag). Anything
# that is not a class (a requestClass factory) has no tag.
cdef extern from *:
    """
    static unsigned int flupfast_type_version(PyObject *cls) {
        PyTypeObject *tp;
        if (!PyType_Check(cls)) return 0;
        tp = (PyTypeObject *)cls;
    #if PY_VERSION_HEX >= 0x030C0000
        return tp->tp_version_tag;
    #else
        return (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? tp->tp_version_tag : 0;
    #endif
    }
    """
    unsigned int flupfast_type_version(object cls)

cdef enum:
    # A connection class's own methods (flags of _conn_plan)
    _OWN_READ_HEADER = 1
    _OWN_CGI_PREFIX = 2
    _OWN_UWSGI_PREFIX = 4
    _OWN_SERVE = 8
    _OWN_FINISH = 16
    _OWN_CLOSE = 32
    _OWN_RECV = 64
    _OWN_SEND = 2048
    _OWN_STATE = 4096  # the state is ConnectionState's fields (state.pxi's _state_in_place)
    # A server class's (flags of _server_plan); a request class's is _OWN_REQUEST
    _OWN_HANDLER = 128
    _OWN_ENVIRON = 256
    _OWN_UWSGI_ENVIRON = 512
    _OWN_REQUEST = 1024


cdef class _ClassPlan:
    """One class's flags, kept with the version tag they were worked out for."""
    cdef object cls
    cdef unsigned int version
    cdef int flags

    cdef int get(self, cls, int (*work_out)(object) except -1) except -1:
        cdef unsigned int version = flupfast_type_version(cls)
        if version and version == self.version and cls is self.cls:
            return self.flags
        flags = work_out(cls)
        # Kept only when the lookups left the class as they found it (a tag is assigned at
        # the first lookup of a class that had none).
        cdef unsigned int after = flupfast_type_version(cls)
        if after and (version == 0 or after == version):
            self.flags = flags
            self.version = after
            self.cls = cls
        return flags


cdef int _work_out_conn(cls) except -1:
    cdef int flags = 0
    if _is_own(cls, '_read_header', 'read_header'):
        flags |= _OWN_READ_HEADER
    if _is_own(cls, 'status_prefix', 'cgi_prefix'):
        flags |= _OWN_CGI_PREFIX
    elif _is_own(cls, 'status_prefix', 'uwsgi_prefix'):
        flags |= _OWN_UWSGI_PREFIX
    if _is_own(cls, '_serve', 'serve'):
        flags |= _OWN_SERVE
    if _is_own(cls, '_finish', 'scgi_finish'):
        flags |= _OWN_FINISH
    if _is_own(cls, 'close', 'close'):
        flags |= _OWN_CLOSE
    if _is_own(cls, 'recv_some', 'recv_some'):
        flags |= _OWN_RECV
    if _is_own(cls, 'send', 'send'):
        flags |= _OWN_SEND
    if _state_in_place(cls):
        flags |= _OWN_STATE
    return flags


cdef bint _uwsgi_environ_chain_own(cls) except -1:
    """uwsgi's _environ_for extends SCGI's (``super()``): both must be flupfast's."""
    uwsgi_environ = _OWN_METHODS.get('uwsgi_environ', _NOT_OWN)
    seen = False
    for klass in cls.__mro__:
        method = klass.__dict__.get('_environ_for')
        if method is None:
            continue
        if not seen:
            if method is not uwsgi_environ:
                return False
            seen = True
        else:
            return method is _OWN_METHODS.get('environ', _NOT_OWN)
    return False


cdef int _work_out_server(cls) except -1:
    """_OWN_HANDLER when handler and _sanitizeEnv are flupfast's, with which _environ_for."""
    if not (_is_own(cls, 'handler', 'handler') and _is_own(cls, '_sanitizeEnv', 'sanitize')):
        return 0
    if _is_own(cls, '_environ_for', 'environ'):
        return _OWN_HANDLER | _OWN_ENVIRON
    if _is_own(cls, '_environ_for', 'uwsgi_environ') and _uwsgi_environ_chain_own(cls):
        return _OWN_HANDLER | _OWN_UWSGI_ENVIRON
    return 0


cdef int _work_out_request(cls) except -1:
    if _is_own(cls, 'run', 'request_run') and _is_own(cls, '__init__', 'request_init'):
        return _OWN_REQUEST
    return 0


# One entry each: a process serves one server class, one connection class, one request class.
cdef _ClassPlan _conn_plan = _ClassPlan()
cdef _ClassPlan _server_plan = _ClassPlan()
cdef _ClassPlan _request_plan = _ClassPlan()
cdef _ClassPlan _server_reads_plan = _ClassPlan()
# leader.pxi's accepted socket class, checked again whenever the class changes.
cdef _ClassPlan _socket_plan = _ClassPlan()


cdef int _work_out_socket(cls) except -1:
    return _can_build_socket(cls)


# The connection's methods the compiled path runs itself, and their flags.
cdef tuple _CONN_METHOD_FLAGS = (
    ('_read_header', _OWN_READ_HEADER), ('status_prefix', _OWN_CGI_PREFIX | _OWN_UWSGI_PREFIX),
    ('_serve', _OWN_SERVE), ('_finish', _OWN_FINISH), ('close', _OWN_CLOSE),
    ('recv_some', _OWN_RECV), ('send', _OWN_SEND))


cdef int _conn_flags(conn) except -1:
    """The flags of ``conn``'s class, less those of a method set on the instance itself (a
    subclass's ``__init__`` may wrap ``self.send``: Python calls that one). A connection that
    flupfast's own ``__init__`` built (connection.pxi's plan) has nothing on the instance."""
    cdef int flags = _conn_plan.get(type(conn), _work_out_conn)
    if flags & _OWN_STATE and not _construction_plan.get(type(conn), _work_out_construction):
        own = getattr(conn, '__dict__', None)
        if own:
            for name, flag in _CONN_METHOD_FLAGS:
                if name in own:
                    flags &= ~<int>flag
    return flags


# The server's settings and app, which the request paths (SCGI/uwsgi here, FastCGI's chain)
# read at every request: read from its instance's dict, where they are, where its class lets
# that be what Python sees (_work_out_server_reads); through getattr otherwise. Each getattr
# of them costs about 200 instructions, a dict lookup a third of that.
cdef tuple _SERVER_READS = (
    'requestClass', 'request_class', 'multithreaded', 'multiprocess', 'environ', 'scriptName',
    'application', '_appLock', 'roles', '_bindAddress')

cdef extern from *:
    """
    /* 1 when attribute reads of cls's instances are the plain ones (object's getattro), its
       instances have a dict, and none of names is a data descriptor on cls. */
    static int flupfast_plain_reads(PyObject *cls, PyObject *names) {
        PyTypeObject *tp = (PyTypeObject *)cls;
        Py_ssize_t i;
        PyObject *found;
        if (!PyType_Check(cls) || tp->tp_getattro != PyObject_GenericGetAttr) return 0;
    #ifdef Py_TPFLAGS_MANAGED_DICT
        if (tp->tp_dictoffset == 0 && !(tp->tp_flags & Py_TPFLAGS_MANAGED_DICT)) return 0;
    #else
        if (tp->tp_dictoffset == 0) return 0;
    #endif
        for (i = 0; i < PyTuple_GET_SIZE(names); i++) {
            found = _PyType_Lookup(tp, PyTuple_GET_ITEM(names, i));
            if (found != NULL && Py_TYPE(found)->tp_descr_set != NULL) return 0;
        }
        return 1;
    }
    """
    int flupfast_plain_reads(object cls, tuple names)
    PyObject *PyDict_GetItemWithError(object mp, object key) except? NULL
    object PyObject_GenericGetDict(object o, void *context)


cdef int _work_out_server_reads(cls) except -1:
    """1 when a server's instance dict holds what Python reads as its _SERVER_READS where it
    has them: attribute access is the plain one (no __getattribute__ or __getattr__ of its
    own), and none of those names is a data descriptor on the class (a property, a slot),
    which would win over the dict."""
    return flupfast_plain_reads(cls, _SERVER_READS)


cdef object _server_dict(server):
    """The server's instance dict, where _server_setting may read it; else None."""
    if _server_reads_plan.get(type(server), _work_out_server_reads):
        return PyObject_GenericGetDict(server, NULL)
    return None


cdef bint _hook_on_instance(obj, own, tuple names) except -1:
    """Whether one of ``names`` (a server's hooks, a connection's methods) is set on the
    instance ``obj`` itself; ``own``: its dict (_server_dict's), or None to look it up."""
    if own is None:
        own = getattr(obj, '__dict__', None)
    if not own:
        return False
    for name in names:
        if name in own:
            return True
    return False


cdef inline object _server_setting(own, server, str name):
    """``server.<name>``: from its dict ``own`` (_server_dict) where it is there."""
    cdef PyObject *found
    if own is not None:
        found = PyDict_GetItemWithError(own, name)
        if found != NULL:
            return <object>found
    return getattr(server, name)


cdef extern from "pythread.h":
    unsigned long PyThread_get_thread_ident() nogil

# The last thread to ask and its pair: a prefork child, or a thread serving a kept connection,
# asks again and again, and a threading.local attribute costs as much as a small Python call.
cdef unsigned long _buffer_thread = 0
cdef tuple _buffer_pair = None


cdef inline tuple _thread_buffer():
    """sockio.receive_buffer(): this thread's (buffer, memoryview), without its Python call
    once the thread has one."""
    global _buffer_thread, _buffer_pair
    cdef unsigned long me = PyThread_get_thread_ident()
    if me == _buffer_thread and _buffer_pair is not None:
        return _buffer_pair
    pair = getattr(_thread_state, 'recv', None)
    if pair is None:
        pair = _receive_buffer()
    _buffer_pair = <tuple>pair
    _buffer_thread = me
    return _buffer_pair


cdef object _receive(conn, Py_ssize_t limit):
    """``conn.recv_some(limit)`` as bytes: Connection.recv_some's receive into this thread's
    buffer, copied out at once; an overriding ``recv_some`` is called."""
    cdef Py_ssize_t n
    if not _conn_flags(conn) & _OWN_RECV:
        return bytes(conn.recv_some(limit))
    buf = _thread_buffer()[0]
    if limit > _RECV_SIZE:
        limit = _RECV_SIZE
    n = _recv_into(conn._sock, buf, limit, True)  # inside a request: likely there
    return PyBytes_FromStringAndSize(PyByteArray_AS_STRING(buf), n)


@cython.freelist(8)
cdef class BodySource:
    """The twin of scgi_body.BodySource: wsgi.input's ``pull()``, the body bytes that came
    with the head, then the socket, never past CONTENT_LENGTH (``left``)."""

    cdef object _conn
    cdef object _first
    cdef public object left

    def __init__(self, conn, first, content_length):
        self._conn = conn
        self._first = first
        self.left = content_length - len(first)

    def __call__(self):
        first = self._first
        if first:
            self._first = None
            return first
        if self.left <= 0:
            return b''
        data = _receive(self._conn, self.left)
        if not data:
            raise _ClientDisconnected('the web server closed the connection with %d bytes of '
                                      'the body (CONTENT_LENGTH) still to come' % self.left)
        self.left -= len(<bytes>data)
        return data


cdef list _send_or_hold(sock, list held, Py_ssize_t *held_bytes, list buffers, bint hold):
    """Connection.send's rule on a queue its caller keeps (``held``, ``held_bytes``): with
    ``hold``, keep the buffers while the queue stays under COALESCE_LIMIT; else send the queue
    and the buffers in one ``send_buffers``. Returns the queue to keep (a new one after a
    send)."""
    if hold:
        for buf in buffers:
            held_bytes[0] += len(buf)
        if held_bytes[0] < _COALESCE_LIMIT:
            held += buffers
            return held
    held_bytes[0] = 0
    if held:
        out = held + buffers
        # Emptied before the send (the caller's list): one that raises midway never goes out
        # again from its start with the next send.
        del held[:]
    else:
        out = buffers
    if out:
        # By its module name, as Connection.send calls _impl's: a test's spy sees it.
        send_buffers(sock, out)
    return held


cdef class _RawOutputStream(PartsWriter):
    """scgi_connection.RawOutputStream for the compiled chain: the response on the
    connection's socket, parts held (``hold``) up to COALESCE_LIMIT sent in one
    ``send_buffers``, as ``Connection.send`` holds them; a regular file through ``sendfile``.
    An SCGI or uwsgi connection carries one request, sent from its one thread: the stream
    holds the queue itself, where the connection's (with its lock) serves FastCGI's
    multiplexed requests; a connection class with a ``send`` of its own gets every send."""

    cdef public object _conn
    cdef public bint dataWritten
    cdef public object status_prefix
    cdef object _sock
    cdef bint _own_send
    cdef list _held
    cdef Py_ssize_t _held_bytes

    def write_parts(self, parts, hold=False):
        self._write_parts(parts, hold)

    cdef int _write_parts(self, parts, bint hold) except -1:
        cdef list buffers = [part for part in parts if part]
        if buffers:
            self.dataWritten = True
            self._send(buffers, hold)
        return 0

    cdef _send(self, list buffers, bint hold):
        if not self._own_send:
            self._conn.send(buffers, hold)
            return
        self._held = _send_or_hold(self._sock, self._held, &self._held_bytes, buffers, hold)

    def flush(self):
        self._send([], False)

    def can_send_file(self, filelike):
        return _is_regular_file(filelike)

    def send_file(self, filelike):
        """Send the rest of a regular file from its current position (``os.sendfile``);
        the bytes sent."""
        self.flush()
        self.dataWritten = True
        return self._conn.send_file(filelike)


cdef bint _enabled_for(logger, level) except -1:
    """``logger.isEnabledFor(level)``: a plain Logger's answer from the cache its own method
    reads first (logging.Logger.isEnabledFor), without the Python call; the method when the
    cache lacks it, or for any other logger class."""
    cdef PyObject *found
    cdef dict cache
    if type(logger) is _Logger and _logger_reads_plan.get(_Logger, _work_out_logger_reads):
        # Its dict, as _server_setting reads a server's. Borrowed: nothing that can run
        # Python code (a __bool__, a key's __eq__) between a lookup and its use.
        own = PyObject_GenericGetDict(logger, NULL)
        found = PyDict_GetItemWithError(own, 'disabled')
        if found != NULL and <object>found is False:  # a bool: no __bool__ to run
            found = PyDict_GetItemWithError(own, '_cache')
            if found != NULL and type(<object>found) is dict:
                cache = <dict>found  # a reference of our own before any lookup in it
                answer = cache.get(level)
                if answer is not None:
                    return answer
    return logger.isEnabledFor(level)


cdef tuple _LOGGER_READS = ('_cache', 'disabled')
cdef _ClassPlan _logger_reads_plan = _ClassPlan()


cdef int _work_out_logger_reads(cls) except -1:
    return flupfast_plain_reads(cls, _LOGGER_READS)


# The codecs as this extension defines them: a decode that is one of these (not a test's spy)
# reads the receive buffer in place, without its Python call and the buffer's slices.
cdef object _own_scgi_decode = decode_request
cdef object _own_uwsgi_decode = decode_uwsgi_request
cdef Py_ssize_t _SCGI_CAP = MAX_SCGI_HEADER_BYTES, _UWSGI_CAP = MAX_UWSGI_VARS_BYTES
cdef Py_ssize_t _PAIRS_CAP = MAX_PARAMS_PAIRS  # the defaults of both codecs' signatures


cdef tuple _read_head(ConnectionState conn, decode, int flags):
    """SCGIConnection._read_header, compiled: (environ, content_length, body bytes received
    with the head)."""
    cdef Py_ssize_t n = 0, start, take
    cdef const unsigned char *received = NULL
    data = pair = None
    conn.idle = True  # no request byte yet: a stop may end the wait
    try:
        on_idle = conn.on_idle
        # The contract's default (no mode asks: a prefork child until it drains) needs no call.
        if on_idle is _wait_always or on_idle(conn, False) is _WAIT:
            if flags & _OWN_RECV:
                pair = _thread_buffer()
                n = _recv_into(conn._sock, pair[0], 0, True)
                received = <const unsigned char *>PyByteArray_AS_STRING(pair[0])
            else:
                data = conn.recv_some()
                n = len(data)
    finally:
        conn.idle = False
    if n == 0:
        raise EOFError  # closed before a request: a health check, not an error
    if received != NULL and (decode is _own_uwsgi_decode or decode is _own_scgi_decode):
        # The extension's codecs: 0 <= used <= n and 0 <= content_length, by construction.
        if decode is _own_uwsgi_decode:
            decoded = _decode_uwsgi_at(received, n, _UWSGI_CAP, _PAIRS_CAP)
        else:
            decoded = _decode_scgi_at(received, n, _SCGI_CAP, _PAIRS_CAP)
        if decoded is not None:
            environ, content_length, start = decoded
            # Bytes beyond CONTENT_LENGTH are not ours to read: one request per connection.
            take = n - start
            if content_length < take:
                take = content_length
            return environ, content_length, PyBytes_FromStringAndSize(
                <const char *>received + start, take)
        data = pair[1][:n]
    else:
        if received != NULL:
            data = pair[1][:n]
        decoded = decode(data)
    if decoded is None:
        head = bytearray(data)  # the head spans receives: gather it
        while decoded is None:
            data = conn.recv_some()
            if not data:
                raise conn.error('connection closed inside %s (%d bytes received)'
                                 % (conn.head_name, len(head)))
            head += data
            decoded = decode(head)
        data = head
    environ, content_length, used = decoded
    # Bytes beyond CONTENT_LENGTH are not ours to read: one request per connection.
    return environ, content_length, bytes(data[used:used + content_length])


cdef object _status_prefix(conn, int flags, environ):
    """conn.status_prefix(environ): SCGI's is CGI's ``Status:``; uwsgi's, the request's HTTP
    version, from protocols.uwsgi's cache when it holds it."""
    if flags & _OWN_CGI_PREFIX:
        return CGI_STATUS_PREFIX
    if flags & _OWN_UWSGI_PREFIX:
        prefix = _uwsgi_prefixes.get(environ.get('SERVER_PROTOCOL'))
        if prefix is not None:
            return prefix
        return _uwsgi_prefix_of(environ)
    return conn.status_prefix(environ)


def uwsgi_url_scheme(environ):
    """wsgi.url_scheme of a uwsgi request; see protocols.uwsgi.url_scheme."""
    return _uwsgi_url_scheme(environ)


cdef str _uwsgi_url_scheme(mapping):
    # Read as a dict (the codecs give one): its lookups in C, not a method call each.
    cdef dict environ = mapping if type(mapping) is dict else dict(mapping)
    value = environ.get('UWSGI_SCHEME')
    if value:
        value = value.lower()
        if value in _URL_SCHEMES:
            return value
    value = environ.get('HTTPS')
    if value:
        return 'https' if value.lower() in ('on', '1') else 'http'
    value = environ.get('REQUEST_SCHEME')
    if value:
        if value == 'http' or value == 'https':  # what nginx and Apache send
            return value
        value = value.lower()
        if value in _URL_SCHEMES:
            return value
    return 'http'


cdef bint _sanitize_common(dict environ, server, own) except -1:
    """BaseSCGIServer._sanitizeEnv where it needs no warning and no decoding: no
    WSGI_SCRIPT_NAME, no configured scriptName, and PATH_INFO sent (what the bench's fronts
    send) or REQUEST_URI's path with SCRIPT_NAME as its raw prefix (nginx's stock scgi_params
    send no PATH_INFO); False, with the environ untouched, for the method to do the rest."""
    global _NoDefault
    if environ.get('WSGI_SCRIPT_NAME') is not None:
        return False
    if _NoDefault is None:  # at the first request: importing flupfast must not load the servers
        from flupfast.server import NoDefault
        _NoDefault = NoDefault
    script_name = _server_setting(own, server, 'scriptName')
    if script_name is not None and script_name is not _NoDefault:
        return False
    path_info = None
    if script_name is not None and not environ.get('PATH_INFO'):
        uri = environ.get('REQUEST_URI')
        if uri is None:
            path_info = ''
        else:
            prefix = environ.get('SCRIPT_NAME', '')
            if type(uri) is not str or type(prefix) is not str:
                return False
            cut = (<str>uri).find('?')
            path = <str>uri if cut < 0 else (<str>uri)[:cut]
            if not path.startswith(prefix):
                return False  # gateway.derive_path_info's decoded cut, or flup's warning
            path_info = path[len(<str>prefix):]
    if not environ.get('QUERY_STRING'):
        _query_from_request_uri(environ)
    if script_name is not None and 'SCRIPT_NAME' not in environ:
        environ['SCRIPT_NAME'] = ''
    if path_info is not None:
        environ['PATH_INFO'] = path_info
    return True


cdef int _stock_handler_flags(server, own, request_class) except -1:
    """The server plan's flags when the server's request, handler, _environ_for and
    _sanitizeEnv are all flupfast's own, on the classes and the instance (``own``: its dict,
    from _server_dict, or None); else 0."""
    if not _request_plan.get(request_class, _work_out_request):
        return 0
    cdef int flags = _server_plan.get(type(server), _work_out_server)
    if not flags:
        return 0
    if _hook_on_instance(server, own, ('handler', '_sanitizeEnv', '_environ_for')):
        return 0
    return flags


cdef _stock_handler(server, own, int flags, environ, stdin, output):
    """BaseSCGIServer.handler with its _environ_for (SCGI's or uwsgi's) and _sanitizeEnv."""
    multithreaded = _server_setting(own, server, 'multithreaded')
    _build_environ(environ, _server_setting(own, server, 'environ'), stdin, _sys.stderr,
                   multithreaded, _server_setting(own, server, 'multiprocess'), False)
    environ['wsgi.file_wrapper'] = _gw_FileWrapper
    if flags & _OWN_UWSGI_ENVIRON:
        environ['wsgi.url_scheme'] = _uwsgi_url_scheme(environ)
    # The codecs give a dict; a connection's own read_header may give another mapping.
    if not (type(environ) is dict and _sanitize_common(environ, server, own)):
        server._sanitizeEnv(environ)
    _run_application(_server_setting(own, server, 'application'), environ, output,
                     None if multithreaded else _server_setting(own, server, '_appLock'))


cdef _run_stock_request(ConnectionState conn, server, own, request_class, int flags,
                        environ, stdin, _RawOutputStream output):
    """request_class(conn, environ, stdin, output).run() (scgi_connection.SCGIRequest) with
    the server's stock handler; the request itself is built only for ``server.error``."""
    logger = conn.logger
    # DEBUG is on only where INFO is: at flup's WARNING one check, not two.
    cdef bint info = _enabled_for(logger, _INFO)
    cdef bint debug = info and _enabled_for(logger, _DEBUG)
    start = None
    if info:  # the line's arguments only when logged
        _log_info(logger, '%s %s', environ['REQUEST_METHOD'], _readable(
            environ.get('SCRIPT_NAME', '') + environ.get('PATH_INFO', '')))
    if debug:
        start = _now()
    try:
        _stock_handler(server, own, flags, environ, stdin, output)
    except _ClientDisconnected as exc:
        logger.warning('%s %s: %s', environ['REQUEST_METHOD'], _readable(
            environ.get('REQUEST_URI', environ.get('PATH_INFO', ''))), exc)
    except Exception as exc:
        if _gw_is_peer_gone(exc):
            logger.debug('the web server went away: %s', exc)
        else:
            logger.exception('Exception caught from handler')
            if output.dataWritten:
                # SCGI ends at EOF: only a TCP reset tells the web server the response
                # is cut short (``truncated-response-signalled``).
                conn.end_abruptly(drain=conn.discard_body)
            else:
                server.error(request_class(conn, environ, stdin, output))
    if debug:
        elapsed = _now() - start
        logger.debug('%s %s done (%.3f secs)', environ['REQUEST_METHOD'], _readable(
            environ.get('SCRIPT_NAME', '') + environ.get('PATH_INFO', '')),
            elapsed.total_seconds())


def serve_scgi(conn):
    """Serve the one request of ``conn`` (an SCGIConnection); see scgi_connection.serve."""
    cdef int flags = _conn_flags(conn)
    if not flags & _OWN_STATE:
        return _pure_scgi('serve')(conn)  # its state is not (all) in the C fields
    _serve(conn, flags)


cdef dict _pure_scgi_twins = {}


cdef object _pure_scgi(str name):
    """scgi_connection's ``serve`` or ``run``: for a connection whose class hides a field of
    ConnectionState (state.pxi), which the compiled path reads in place."""
    twin = _pure_scgi_twins.get(name)
    if twin is None:
        from flupfast import scgi_connection
        twin = _pure_scgi_twins[name] = getattr(scgi_connection, name)
    return twin


cdef _serve(ConnectionState conn, int flags):
    cdef _RawOutputStream output
    cdef int handler_flags
    decode = None
    if flags & _OWN_READ_HEADER:
        # The codec the connection names (in _impl), by this module's name for it (looked
        # up as a module global, as _impl's is: a test's spy sees it).
        decoder = conn.decoder
        if decoder == 'decode_scgi_request':
            decode = decode_request
        elif decoder == 'decode_uwsgi_request':
            decode = decode_uwsgi_request
    if decode is not None:
        environ, content_length, first = _read_head(conn, decode, flags)
    else:
        environ, content_length, first = conn._read_header()
    body = BodySource(conn, first, content_length)
    conn._body = body
    stdin = InputStream(body)
    output = _RawOutputStream.__new__(_RawOutputStream)
    output._direct = True
    output._conn = conn
    output._sock = conn._sock
    output._own_send = flags & _OWN_SEND
    output._held = []
    output.status_prefix = _status_prefix(conn, flags, environ)
    server = conn.server
    own = _server_dict(server)
    request_class = _server_setting(own, server, 'requestClass')
    if conn._timeout:
        req = request_class(conn, environ, stdin, output)
        with _request_deadline(conn._timeout, conn._timed_out):
            req.run()
    else:
        handler_flags = _stock_handler_flags(server, own, request_class)
        if handler_flags:
            _run_stock_request(conn, server, own, request_class, handler_flags, environ,
                               stdin, output)
        else:
            request_class(conn, environ, stdin, output).run()
    if not conn.closed:
        output._send([], False)  # flush(), without the method call
    conn.served = 1


cdef _close(ConnectionState conn, int flags):
    """conn.close(): Connection.close's (on the state's fields), or an override."""
    if not flags & _OWN_CLOSE:
        conn.close()
    elif not conn.closed:
        conn.closed = True
        try:
            close_socket(conn._sock)  # by its module name, as Connection.close calls _impl's
        except OSError:
            pass


cdef _finish(ConnectionState conn, int flags):
    """conn._finish(): SCGIConnection._finish's, or an override."""
    if not flags & _OWN_FINISH:
        conn._finish()
        return
    body = conn._body
    conn._body = None
    if body is not None and (
            (<BodySource>body).left if type(body) is BodySource else body.left) > 0:
        conn.linger_close()
    else:
        _close(conn, flags)


def run_scgi(conn):
    """``run()`` of an SCGI connection; see scgi_connection.run (LoggedConnection.run's
    loop, with ``serve`` and ``_finish``)."""
    return _run_scgi(conn)


cdef object _run_scgi(object job):
    cdef int flags = _conn_flags(job)
    if not flags & _OWN_STATE:
        return _pure_scgi('run')(job)  # its state is not (all) in the C fields
    cdef ConnectionState conn = <ConnectionState>job
    addr = conn._addr
    cdef bint tcp = isinstance(addr, tuple) and len(<tuple>addr) >= 2
    logger = conn.logger
    if tcp:
        logger.debug('Connection starting up (%s:%d)', addr[0], addr[1])
    try:
        if flags & _OWN_SERVE:
            _serve(conn, flags)
        else:
            conn._serve()
    except _ProtocolError as exc:
        logger.error("Protocol error '%s'", exc)
    except EOFError:
        pass  # closed before a request: a health check, not an error
    except _ClientDisconnected as exc:
        logger.warning('%s', exc)
    except OSError as exc:
        if not _is_peer_gone(exc):
            logger.exception('Exception caught in Connection')
    except Exception:
        logger.exception('Exception caught in Connection')
    finally:
        if not conn.parked:
            _finish(conn, flags)
    if tcp:
        logger.debug('Connection shutting down (%s:%d)', addr[0], addr[1])
    return conn.served
