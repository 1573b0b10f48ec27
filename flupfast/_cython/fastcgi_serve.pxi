# The compiled twin of flupfast/fastcgi_connection.py's ``run``: one non-multiplexed FastCGI
# connection, from its first record to its close, with the same records, log lines and
# errors. What it saves is the interpreter: the connection's record loop (_read_events,
# _dispatch, _on_begin_request, _on_params, end_request), flup's Request with its RequestIO
# and streams, and the server's handler and _sanitizeEnv ran in Python for every request
# (bench/profile-new-connection.md section 11).
#
# It serves a connection only while everything it replaces is flupfast's own, as
# scgi_serve.pxi decides it (by identity, per class): the connection's methods marked
# ``runs_compiled('fcgi:...')`` with ``send`` and ``close``, the request class's __init__,
# run and _end, and the server's handler and _sanitizeEnv, on the class and the instance; and
# only a connection that is not multiplexed and has no request timeout. Anything else runs
# the pure twin for the whole connection. What stays Python is called as the pure path calls
# it: the server's error() (given flup's Request, built then), the answers to rare records
# (GET_VALUES), linger_close, end_abruptly and the mode's on_idle. Included after
# scgi_serve.pxi: it uses its _ClassPlan, _is_own, _thread_buffer and _close.

import time as _time
import traceback as _traceback

from flupfast.protocols import fastcgi as _fcgi_codec
from flupfast.serving.job import PARK as _PARK

cdef object _encode_end_request = _fcgi_codec.encode_end_request
cdef object _encode_record = _fcgi_codec.encode_record
cdef object _encode_unknown_type = _fcgi_codec.encode_unknown_type
cdef int _FCGI_REQUEST_COMPLETE = _fcgi_codec.FCGI_REQUEST_COMPLETE
cdef int _FCGI_UNKNOWN_ROLE = _fcgi_codec.FCGI_UNKNOWN_ROLE
cdef int _FCGI_CANT_MPX_CONN = _fcgi_codec.FCGI_CANT_MPX_CONN
cdef int _FCGI_FILTER = _fcgi_codec.FCGI_FILTER
cdef int _FCGI_KEEP_CONN = _fcgi_codec.FCGI_KEEP_CONN
cdef int _FCGI_STDOUT = _fcgi_codec.FCGI_STDOUT
cdef int _FCGI_STDERR = _fcgi_codec.FCGI_STDERR
cdef int _FCGI_NULL_REQUEST_ID = _fcgi_codec.FCGI_NULL_REQUEST_ID
cdef object _fcgi_logger = _logging.getLogger('flupfast')  # fastcgi_connection's logger

# The namespaces of fastcgi_connection (its pure ``run``, messages, prebuilt records) and of
# fcgi_base (TeeOutputStream), read from the globals of their methods registered in
# OWN_METHODS: importing them here would make a cycle (they import _impl, which imports this
# extension), and a name patched into either module is seen here as their code sees it.
cdef dict _fcgi_py = None
# fastcgi_streams' _completed_records and its cache of the usual end's bytes per request id:
# read here while the function fastcgi_connection calls is that one (a patch is called).
cdef object _own_completed_records = None
cdef dict _completed_by_id = None
cdef dict _fcgi_base_ns = None


# What run_fcgi runs itself: (attribute, kind of runs_compiled) per class.
cdef tuple _FCGI_CONN_OWN = (
    ('_serve', 'fcgi:_serve'), ('_read_events', 'fcgi:_read_events'), ('_pull', 'fcgi:_pull'),
    ('_dispatch', 'fcgi:_dispatch'), ('_on_begin_request', 'fcgi:_on_begin_request'),
    ('_on_abort_request', 'fcgi:_on_abort_request'), ('_on_params', 'fcgi:_on_params'),
    ('open_streams', 'fcgi:open_streams'), ('open_input', 'fcgi:open_input'),
    ('end_request', 'fcgi:end_request'), ('truncate_request', 'fcgi:truncate_request'),
    ('_discard_input', 'fcgi:_discard_input'),
    ('_discard_queued_input', 'fcgi:_discard_queued_input'), ('_finish', 'fcgi:_finish'),
    ('send', 'send'), ('close', 'close'))
cdef tuple _FCGI_REQUEST_OWN = (
    ('__init__', 'fcgi:request_init'), ('run', 'fcgi:request_run'), ('_end', 'fcgi:request_end'))
cdef tuple _FCGI_SERVER_OWN = (('handler', 'fcgi:handler'), ('_sanitizeEnv', 'fcgi:sanitize'))


cdef int _all_own(cls, tuple marks) except -1:
    for name, kind in marks:
        if not _is_own(cls, name, kind):
            return 0
    return 1


cdef int _work_out_fcgi_conn(cls) except -1:
    # The chain reads the connection's state in place (state.pxi), FastCGIState's too.
    return _all_own(cls, _FCGI_CONN_OWN) and issubclass(cls, FastCGIState) and \
        _state_in_place(cls)


cdef int _work_out_fcgi_request(cls) except -1:
    return _all_own(cls, _FCGI_REQUEST_OWN)


cdef int _work_out_fcgi_server(cls) except -1:
    return _all_own(cls, _FCGI_SERVER_OWN)


cdef _ClassPlan _fcgi_conn_plan = _ClassPlan()
cdef _ClassPlan _fcgi_request_plan = _ClassPlan()
cdef _ClassPlan _fcgi_server_plan = _ClassPlan()


cdef tuple _FCGI_CONN_NAMES = tuple([name for name, _ in _FCGI_CONN_OWN])
cdef object _PureFastCGIParser = _fcgi_codec.FastCGIParser


cdef bint _fcgi_runs_compiled(conn) except -1:
    """The connection, its parser, its server and its request class are flupfast's own,
    unchanged."""
    global _fcgi_base_ns
    if not _fcgi_conn_plan.get(type(conn), _work_out_fcgi_conn):
        return False
    if conn.multiplexed or (<FastCGIState>conn).timeout:  # the plan: a FastCGIState
        return False
    # The chain takes the parser's events as flupfast's parsers make them (tuples).
    parser_type = type((<FastCGIState>conn)._parser)
    if parser_type is not FastCGIParser and parser_type is not _PureFastCGIParser:
        return False
    # A method set on the instance (a subclass's __init__ wrapping self.send) is Python's to
    # call; flupfast's own __init__ (connection.pxi's plan) sets none.
    if not _fcgi_construction_plan.get(type(conn), _work_out_fcgi_construction) \
            and _hook_on_instance(conn, None, _FCGI_CONN_NAMES):
        return False
    server = conn.server
    own = _server_dict(server)
    if not _fcgi_request_plan.get(_server_setting(own, server, 'request_class'),
                                  _work_out_fcgi_request):
        return False
    if not _fcgi_server_plan.get(type(server), _work_out_fcgi_server):
        return False
    if _hook_on_instance(server, own, ('handler', '_sanitizeEnv')):
        return False
    if _fcgi_base_ns is None:
        _fcgi_base_ns = _OWN_METHODS['fcgi:handler'].__globals__
    return True


cdef class _FcgiChain


@cython.freelist(8)
cdef class _FcgiIO:
    """What one request's streams share (fastcgi_streams.RequestIO): its id and whether the
    web server aborted it. Nothing here leads back to the request."""
    cdef object request_id
    cdef long rid  # the same, for comparing in C
    cdef bint aborted
    cdef bint unsettled  # a pull is under way (fastcgi_streams.RequestIO.settled, negated)


cdef class _FcgiStdout(PartsWriter):
    """fastcgi_streams.StdoutStream for the compiled chain: ``write_parts`` frames the parts as
    records and sends them through the chain's queue; nothing once the request is aborted."""

    STR_ENCODING = 'utf-8'  # as flup's fcgi_base OutputStream

    cdef _FcgiChain _chain
    cdef _FcgiIO _io
    cdef int _type
    cdef public bint dataWritten
    cdef public bint closed

    def write_parts(self, parts, hold=False):
        self._write_parts(parts, hold)

    cdef int _attached(self) except -1:
        """The chain's streams are made by the chain; one made from Python has no request."""
        if self._chain is None or self._io is None:
            raise ValueError('this stream belongs to no FastCGI request')
        return 0

    cdef int _write_parts(self, parts, bint hold) except -1:
        cdef list buffers
        self._attached()
        if self._io.aborted:
            return 0  # the web server gave up on this request: nothing reads the bytes
        buffers = []
        for part in parts:
            if part:
                buffers += _frame(self._io.request_id, part, self._chain.max_content, self._type)
        if buffers:
            self.dataWritten = True
            self._chain.send(buffers, hold)
        return 0

    def flush(self):
        self._attached()
        self._chain.send([], False)

    cdef list end_buffers(self):
        """The buffers that close the stream (empty if nothing was ever written)."""
        if self.closed:
            return []
        self.closed = True
        if not self.dataWritten:
            return []
        return [_encode_record(self._type, self._io.request_id)]

    def close(self):
        self._attached()
        self._chain.send(self.end_buffers(), False)


cdef class _FcgiStderr(_FcgiStdout):
    """fastcgi_streams.StderrStream: held until flushed or the request ends; str as UTF-8."""

    cdef list _held  # None while nothing is held

    def write(self, data):
        if isinstance(data, str):
            data = data.encode('utf-8')
        if data:
            if self._held:
                self._held.append(bytes(data))
            else:
                self._held = [bytes(data)]

    def flush(self):
        if self._held:
            held = self._held
            self._held = None
            self._write_parts((b''.join(held),), False)

    cdef list end_buffers(self):
        cdef list buffers = []
        if self._held and not self._io.aborted:
            held = self._held
            self._held = None
            buffers = _frame(self._io.request_id, b''.join(held), self._chain.max_content,
                             self._type)
            self.dataWritten = True
        return buffers + _FcgiStdout.end_buffers(self)


@cython.freelist(8)
cdef class _FcgiInput:
    """One input stream of a request (FCGI_STDIN or FCGI_DATA): its InputStream's pull, the
    connection's ``_pull``: records taken as they come, the socket read only when the app
    asks, whatever else arrives meanwhile handled. Once the request ended (``_chain`` None)
    the stream has nothing more."""

    cdef _FcgiChain _chain
    cdef _FcgiIO _io
    cdef int _type
    cdef list _queue
    cdef Py_ssize_t _at
    cdef bint ended

    def __call__(self):
        return self.pull()

    cdef object pull(self):
        cdef _FcgiChain chain = self._chain
        cdef object data
        if chain is None:
            return b''
        if self._io.unsettled:  # a pull was cut short: nothing more is read (see the twin)
            raise _ClientDisconnected(_fcgi_py['BODY_READ_INTERRUPTED'])
        self._io.unsettled = True  # until its records are read and handled (see the twin)
        while self._at >= len(self._queue):
            if self.ended:
                self._io.unsettled = False
                return b''
            if self._io.aborted:
                self._io.unsettled = False
                raise _ClientDisconnected(_fcgi_py['_aborted_message'](self._type))
            if chain.at >= len(chain.events) and not chain.read_events(True):
                self._io.unsettled = False
                raise _ClientDisconnected(
                    'the web server closed the connection before the end of FCGI_%s'
                    % _fcgi_py['_stream_name'](self._type))
            while (chain.at < len(chain.events) and self._at >= len(self._queue)
                   and not self.ended and not self._io.aborted):
                chain.dispatch_next()
        self._io.unsettled = False
        data = self._queue[self._at]
        self._at += 1
        if self._at >= len(self._queue):
            self._queue = []
            self._at = 0
        return data

    cdef int drain(self) except -1:
        while self.pull():
            pass
        return 0


@cython.freelist(8)
cdef class _FcgiExchange:
    """One request of the chain: what flup's Request holds (role, flags, params, streams)
    without the Python object, which is built (``_request_for``) only for ``server.error``."""

    cdef _FcgiIO io
    cdef object role
    cdef object flags
    cdef bint keep_conn
    cdef bint started
    cdef object params
    cdef _FcgiInput stdin_src
    cdef _FcgiInput data_src
    cdef InputStream stdin
    cdef _FcgiStdout stdout
    cdef _FcgiStderr stderr

    cdef _FcgiInput input(self, int record_type):
        if record_type != _DATA:
            return self.stdin_src
        if self.data_src is None:
            self.data_src = _new_input(self.stdin_src._chain, self.io, _DATA)
        return self.data_src

    cdef int end_inputs(self) except -1:
        """The request ended: its input streams read nothing more (``io.pending = None``)."""
        self.stdin_src._chain = None
        if self.data_src is not None:
            self.data_src._chain = None
        return 0


cdef _FcgiInput _new_input(_FcgiChain chain, _FcgiIO io, int record_type):
    cdef _FcgiInput src = _FcgiInput.__new__(_FcgiInput)
    src._chain = chain
    src._io = io
    src._type = record_type
    src._queue = []
    return src


cdef _FcgiStdout _output_stream(_FcgiStdout stream, _FcgiChain chain, _FcgiIO io,
                                int record_type):
    """A new output stream (STDOUT or STDERR) of the request ``io`` on ``chain``."""
    stream._chain = chain
    stream._io = io
    stream._type = record_type
    stream._direct = type(stream) is _FcgiStdout
    return stream


cdef InputStream _input_stream(pull):
    """InputStream(pull), without the Python call of its __init__."""
    cdef InputStream stream = InputStream.__new__(InputStream)
    stream._pull = pull
    return stream


@cython.freelist(8)
cdef class _FcgiChain:
    """One run of a connection: its records not yet handled, its request, its send queue."""

    cdef FastCGIState conn
    cdef object sock
    cdef object server
    cdef object parser_obj
    cdef FastCGIParser parser     # the compiled parser, or None (a pure one: parser_obj)
    cdef list events
    cdef Py_ssize_t at
    cdef _FcgiExchange current
    cdef list held
    cdef Py_ssize_t held_bytes
    cdef object max_content
    cdef long max_requests        # -1: no budget
    cdef long served
    cdef bint closed
    cdef bint hand_over           # the rest of the connection goes to the pure path
    cdef bint send_broken         # a send raised (Connection.send_broken)

    cdef int init(self, FastCGIState conn) except -1:
        self.conn = conn
        self.sock = conn._sock
        self.server = conn.server
        parser = conn._parser
        self.parser_obj = parser
        self.parser = parser if type(parser) is FastCGIParser else None
        self.events = []
        self.held = []
        self.max_content = conn.max_content
        max_requests = conn.max_requests
        self.max_requests = -1 if max_requests is None else max_requests
        self.served = conn.served
        self.closed = conn.closed
        self.hand_over = False
        return 0

    # -- the send queue (Connection.send) --------------------------------------------------

    cdef int send(self, list buffers, bint hold) except -1:
        try:
            self.held = _send_or_hold(self.sock, self.held, &self.held_bytes, buffers, hold)
        except BaseException:
            self.send_broken = True  # part of it may be on the wire (Connection.send_broken)
            raise
        return 0

    cdef int hand_queue_to_conn(self) except -1:
        """Before a method of the connection that sends: what is held goes first, in the
        connection's own queue (empty: the chain never uses it)."""
        if self.held:
            self.conn._out = self.held
            self.conn._out_bytes = self.held_bytes
            self.held = []
            self.held_bytes = 0
        return 0

    cdef int close(self) except -1:
        _close(self.conn, _OWN_CLOSE)
        self.closed = True
        return 0

    # -- reading -----------------------------------------------------------------------------

    cdef bint read_events(self, bint expected) except -1:
        """Receive once and queue the events; False at EOF. ``expected``: inside a request,
        or its first: the bytes are likely there (sockio.pxi's _recv_into)."""
        cdef tuple pair = _thread_buffer()
        buf = pair[0]
        cdef Py_ssize_t n = _recv_into(self.sock, buf, 0, expected)
        if n == 0:
            self.conn._eof = True
            return False
        if self.at >= len(self.events):
            self.events = []
            self.at = 0
        if self.parser is None:
            self.events += self.parser_obj.feed(pair[1][:n])
            return True
        if self.parser._busy:
            raise RuntimeError('FastCGIParser.feed() re-entered')
        self.parser._busy = True
        try:
            self.parser._feed(<const unsigned char *>PyByteArray_AS_STRING(buf), n, self.events)
        finally:
            self.parser._busy = False
        return True

    cdef bint parser_pending(self) except -1:
        if self.parser is not None:
            return self.parser._held_len != 0
        return bool(self.parser_obj.pending)

    # -- the connection loop (FastCGIConnection._serve) -------------------------------------

    cdef int serve(self) except -1:
        cdef ConnectionState conn = self.conn
        cdef bint ready = conn.parked  # back from the parked set: the socket is readable
        if ready:
            conn.parked = False
        while not self.closed and not self.hand_over:
            if self.at >= len(self.events):
                # Between requests (KEEP_CONN) the mode may end or park the wait; a new
                # connection is not idle: its first request is on the way.
                if self.served > 0 and self.current is None and not ready:
                    conn.idle = True
                    try:
                        answer = conn.on_idle(conn, not self.parser_pending())
                        if answer is not _WAIT:
                            conn.parked = answer is _PARK
                            return 0
                        if not self.read_events(False):
                            return 0
                    finally:
                        conn.idle = False
                else:
                    ready = False
                    if not self.read_events(True):
                        return 0
            while self.at < len(self.events) and not self.closed and not self.hand_over:
                self.dispatch_next()
        return 0

    cdef int dispatch_next(self) except -1:
        cdef tuple event = <tuple>self.events[self.at]
        self.at += 1
        return self.dispatch(event)

    cdef int dispatch(self, tuple event) except -1:
        """FastCGIConnection._dispatch, for one request at a time."""
        cdef int record_type = event[0]
        cdef long request_id = event[1]
        cdef _FcgiExchange ex = self.current
        cdef _FcgiInput src
        payload = event[2]
        if record_type == _STDIN or record_type == _DATA:
            if ex is None or ex.io.rid != request_id:
                return 0  # spec 3.3: records for inactive requests are ignored
            src = ex.input(record_type)
            if src.ended:
                return 0
            if payload:
                src._queue.append(payload)
            else:
                src.ended = True
        elif record_type == _PARAMS:
            if ex is None or ex.io.rid != request_id:
                return 0
            ex.params = payload
            ex.started = True
            self.run_request(ex)
        elif record_type == _BEGIN_REQUEST:
            if self.served > 0 and ex is None and not self.still_compiled():
                self.at -= 1  # this request and the rest: the pure path's (_run_fcgi)
                self.hand_over = True
                return 0
            self.begin_request(event[1], payload)
        elif record_type == _ABORT_REQUEST:
            if ex is not None and ex.io.rid == request_id:
                # Spec 5.4: a request not started yet ends here (``fastcgi-abort-request``);
                # a running one's stdin read raises, its later output is dropped.
                ex.io.aborted = True
                if not ex.started:
                    self.end_request(ex, 0, _FCGI_REQUEST_COMPLETE)
        elif record_type == _GET_VALUES:
            self.hand_queue_to_conn()
            self.conn._on_get_values(payload)
        elif request_id == _FCGI_NULL_REQUEST_ID:
            # Spec 4.2: an unknown management record gets FCGI_UNKNOWN_TYPE.
            _fcgi_logger.warning('FastCGI: unknown management record type %d from %s',
                                 record_type, self.conn._peer_name())
            self.send([_encode_unknown_type(record_type)], False)
        else:
            _fcgi_logger.warning('FastCGI: ignoring record of unknown type %d for request %d '
                                 'from %s', record_type, request_id, self.conn._peer_name())
        return 0

    cdef bint still_compiled(self) except -1:
        """Before a kept connection's next request: Python reads the hooks at every request
        (the server's handler, its request class, the connection's methods), and any of them
        may have changed since the connection began."""
        self.server = self.conn.server
        return self.conn._parser is self.parser_obj and _fcgi_runs_compiled(self.conn)

    cdef int begin_request(self, request_id, payload) except -1:
        role, flags = payload
        cdef _FcgiExchange ex = self.current
        if ex is not None:
            if ex.io.request_id == request_id:
                raise _ProtocolError('BEGIN_REQUEST for request %d, which is already active'
                                     % request_id)
            # flup fcgi_base.py:770: one request at a time unless multiplexed.
            self.send([_encode_end_request(request_id, 0, _FCGI_CANT_MPX_CONN)], False)
            return 0
        cdef _FcgiIO io = _FcgiIO.__new__(_FcgiIO)
        io.request_id = request_id
        io.rid = request_id
        ex = _FcgiExchange.__new__(_FcgiExchange)
        ex.io = io
        ex.role = role
        ex.flags = flags
        ex.keep_conn = flags & _FCGI_KEEP_CONN
        ex.params = {}
        ex.stdin_src = _new_input(self, io, _STDIN)
        ex.stdin = _input_stream(ex.stdin_src)
        ex.stdout = _output_stream(_FcgiStdout.__new__(_FcgiStdout), self, io, _FCGI_STDOUT)
        ex.stderr = _output_stream(_FcgiStderr.__new__(_FcgiStderr), self, io, _FCGI_STDERR)
        self.current = ex
        return 0

    # -- one request (FastCGIRequest.run with BaseFCGIServer.handler) ----------------------

    cdef int run_request(self, _FcgiExchange ex) except -1:
        cdef int protocol_status = _FCGI_REQUEST_COMPLETE  # also after an exception
        try:
            protocol_status = self.handle(ex)
        except Exception as exc:
            if self.send_broken and not (ex.io.aborted or _gw_is_peer_gone(exc)):
                # A send cut short: nothing more goes on the stream (see the twin).
                _fcgi_py['logger'].exception('FastCGI request %s: a send was cut short; '
                                             'ending the connection', ex.io.request_id)
                self.truncate_request(ex)
                return 0
            if not (ex.io.aborted or _gw_is_peer_gone(exc)):
                # Nothing of an aborted request is sent: the web server waits for END_REQUEST.
                _traceback.print_exc(file=ex.stderr)
                ex.stderr.flush()
                if ex.stdout.dataWritten:
                    self.truncate_request(ex)
                    return 0
                self.server.error(self.request_for(ex))
        self.end_request(ex, 0, protocol_status)
        return 0

    cdef int handle(self, _FcgiExchange ex) except -1:
        """BaseFCGIServer.handler: returns the protocol status (the app status is 0)."""
        server = self.server
        own = _server_dict(server)  # per request: a kept connection's server may change
        if ex.role not in _server_setting(own, server, 'roles'):
            return _FCGI_UNKNOWN_ROLE
        if _server_setting(own, server, '_bindAddress') is None:
            stderr = ex.stderr
        else:
            stderr = _fcgi_base_ns['TeeOutputStream']((_sys.stderr, ex.stderr))
        multithreaded = _server_setting(own, server, 'multithreaded')
        environ = _build_environ(ex.params, _server_setting(own, server, 'environ'), ex.stdin,
                                 stderr, multithreaded,
                                 _server_setting(own, server, 'multiprocess'), False)
        if not _sanitize_cgi_fast(environ):
            _gw_sanitize_cgi_environ(environ, server.__class__.__name__)
        _run_application(_server_setting(own, server, 'application'), environ, ex.stdout,
                         None if multithreaded else _server_setting(own, server, '_appLock'))
        return _FCGI_REQUEST_COMPLETE

    cdef object request_for(self, _FcgiExchange ex):
        """flup's Request for ``server.error``: the server's request class with this request's
        id, role, flags, params and streams."""
        cdef ConnectionState conn = self.conn
        req = self.server.request_class(conn, None, conn.timeout)
        req._io.request_id = ex.io.request_id
        req._io.aborted = ex.io.aborted
        req.role = ex.role
        req.flags = ex.flags
        req.keep_conn = ex.keep_conn
        req.params = ex.params
        req._started = True
        req.stdin = ex.stdin
        req.stdout = ex.stdout
        req.stderr = ex.stderr
        if ex.role == _FCGI_FILTER:
            req.data = _input_stream(ex.input(_DATA))
        return req

    # -- ending a request (FastCGIConnection.end_request, truncate_request) ---------------

    cdef int end_request(self, _FcgiExchange ex, long app_status, int protocol_status) except -1:
        """Close STDOUT and STDERR, then END_REQUEST (spec 5.5), in one send; then keep the
        connection, drain it, or close it."""
        cdef _FcgiStdout stdout = ex.stdout
        cdef _FcgiStderr stderr = ex.stderr
        cdef list buffers
        if self.send_broken:
            # A send cut short: a record may be half on the wire (see the twin).
            self.truncate_request(ex)
            return 0
        request_id = ex.io.request_id
        if (app_status == 0 and protocol_status == _FCGI_REQUEST_COMPLETE
                and stdout.dataWritten and not stdout.closed and not stderr.closed
                and not stderr.dataWritten and not stderr._held):
            # The usual end (output written, nothing on stderr): prebuilt bytes.
            stdout.closed = stderr.closed = True
            buffers = [_completed_records(request_id)]
        else:
            buffers = stdout.end_buffers() + stderr.end_buffers()
            buffers.append(_encode_end_request(request_id, app_status, protocol_status))
        try:
            self.send(buffers, False)
        except OSError as exc:
            if not (_gw_is_peer_gone(exc) or self.conn.closed):
                raise
            self.current = None
            self.close()
            return 0
        self.served += 1
        self.conn.served = self.served
        try:
            self.discard_queued_input(ex)
            if not ex.keep_conn or (self.max_requests >= 0
                                    and self.served >= self.max_requests):
                if ex.stdin_src.ended and self.at >= len(self.events) \
                        and not self.parser_pending():
                    self.close()  # nothing unread: a plain close sends FIN, not RST
                else:
                    self.conn.linger_close()
                    self.closed = True
                return 0
            if ex.io.unsettled:
                # A pull cut short: the records are unknown; the connection ends here.
                self.conn.linger_close()
                self.closed = True
                return 0
            # KEEP_CONN: the stream must be at its end before the next request's records.
            # After ABORT_REQUEST nothing more is due (spec 3.3: later records are ignored).
            if ex.io.aborted:
                return 0
            if not ex.stdin_src.ended:
                ex.stdin.drain()
            if ex.role == _FCGI_FILTER and not ex.input(_DATA).ended:
                ex.input(_DATA).drain()
        finally:
            self.current = None
            ex.end_inputs()
        return 0

    cdef int discard_queued_input(self, _FcgiExchange ex) except -1:
        """Take the request's input records already received (typically the empty STDIN that
        came with the body), so that closing needs no lingering read."""
        cdef tuple event
        cdef int record_type
        while self.at < len(self.events):
            event = <tuple>self.events[self.at]
            record_type = event[0]
            if <long>event[1] != ex.io.rid or not (record_type == _STDIN
                                                   or record_type == _DATA):
                break
            self.at += 1
            if not event[2]:
                ex.input(record_type).ended = True
        return 0

    cdef int truncate_request(self, _FcgiExchange ex) except -1:
        """FastCGIConnection.truncate_request: the app failed after its response began; the
        connection ends abruptly (``truncated-response-signalled``)."""
        self.served += 1
        self.conn.served = self.served
        try:
            self.hand_queue_to_conn()
            self.conn.end_abruptly(b'' if ex.keep_conn else _fcgi_py['_INVALID_RECORD_HEADER'],
                                   None if ex.io.unsettled else self.discard_input)
            self.closed = True
        finally:
            self.current = None
            ex.end_inputs()
        return 0

    def discard_input(self, deadline):
        """Read and drop the rest of the request's STDIN until its end or ``deadline``; once
        the request has ended (a drain kept and called later), nothing."""
        cdef _FcgiExchange ex = self.current
        if ex is None:
            return
        self.discard_queued_input(ex)
        while not ex.stdin_src.ended and _monotonic() < deadline:
            ex.stdin_src.pull()

    cdef int release(self) except -1:
        """The run is over: a request left unended reads nothing more, and nothing refers
        back to the chain (a PARAMS event holds the environ, which holds the streams)."""
        self.events = []
        self.at = 0
        if self.current is not None:
            self.current.end_inputs()
            self.current = None
        return 0


cdef object _completed_records(request_id):
    """fastcgi_connection's _completed_records(request_id), its cache read in C."""
    global _own_completed_records, _completed_by_id
    completed = _fcgi_py['_completed_records']
    if completed is _own_completed_records:
        records = _completed_by_id.get(request_id)
        if records is not None:
            return records
    elif _own_completed_records is None:
        from flupfast import fastcgi_streams
        _own_completed_records = fastcgi_streams._completed_records
        _completed_by_id = fastcgi_streams._completed
    return completed(request_id)


def run_fcgi(conn):
    """``run()`` of a FastCGI connection; see fastcgi_connection.run."""
    return _run_fcgi(conn)


cdef object _run_fcgi(job):
    global _fcgi_py
    cdef _FcgiChain chain
    cdef FastCGIState conn
    if _fcgi_py is None:
        _fcgi_py = _OWN_METHODS['fcgi:_serve'].__globals__
    if not _fcgi_runs_compiled(job):
        return _fcgi_py['run'](job)
    conn = <FastCGIState>job  # _fcgi_runs_compiled: a class with its state in place
    chain = _FcgiChain.__new__(_FcgiChain)
    chain.init(conn)
    try:
        chain.serve()
        if chain.hand_over:  # between requests: the records not yet handled go along
            conn._events.extend(chain.events[chain.at:])
            chain.events = []
            chain.hand_queue_to_conn()
    except _ProtocolError as exc:
        _fcgi_logger.error('FastCGI protocol error from %s: %s; closing the connection',
                           conn._peer_name(), exc)
    except _ClientDisconnected:
        pass
    except OSError as exc:
        if not _is_peer_gone(exc):
            _fcgi_logger.exception('FastCGI connection from %s failed', conn._peer_name())
    finally:
        chain.release()
        if not chain.hand_over and not conn.parked and not conn.closed:
            _close(conn, _OWN_CLOSE)  # _finish, one request at a time
    if chain.hand_over:
        return _fcgi_py['run'](job)
    return conn.served


def run_job(job):
    """``job.run()``; see serving.job.run_job."""
    return _run_job(job)


cdef object _run_job(job):
    """``job.run()``; a connection whose ``run`` is flupfast's own (on its class:
    ``runs_compiled('scgi:run')`` or ``('fcgi:run')``, one line handing the connection to
    run_scgi or run_fcgi) is handed over here, without that Python frame per connection."""
    run = getattr(type(job), 'run', None)
    if run is _OWN_METHODS.get('scgi:run', _NOT_OWN):
        return _run_scgi(job)
    if run is _OWN_METHODS.get('fcgi:run', _NOT_OWN):
        return _run_fcgi(job)
    return job.run()
