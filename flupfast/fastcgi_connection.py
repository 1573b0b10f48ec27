"""One FastCGI connection from the web server (spec 3): its records, KEEP_CONN, GET_VALUES,
ABORT_REQUEST and multiplexing; its requests, to which it hands their streams
(fastcgi_streams.py).

The WSGI glue is gateway.py (through the server's ``handler``); the codec is
protocols/fastcgi.py or its compiled twin; the socket plumbing is connection.Connection.
"""
import collections
import logging
import socket
import sys
import threading
import time
import traceback
from functools import partial
from operator import attrgetter

from flupfast import _impl
from flupfast.body import BODY_READ_INTERRUPTED, ClientDisconnected, Spool
from flupfast.connection import Connection
from flupfast.deadline import request_deadline
from flupfast.fastcgi_streams import RequestIO, StderrStream, StdoutStream, _completed_records
from flupfast.gateway import is_peer_gone
from flupfast.limits import DEFAULT_MAXWRITE, MAX_OPEN_REQUESTS
from flupfast.output import OVERLOADED_CGI_RESPONSE, shutdown_quietly
from flupfast.protocols import fastcgi as fcgi
from flupfast.protocols.errors import ProtocolError
from flupfast.serving.job import PARK, WAIT
from flupfast.sockio import receive_buffer

logger = logging.getLogger('flupfast')

_INPUT_TYPES = (fcgi.FCGI_STDIN, fcgi.FCGI_DATA)

# A record header of version 0, which a FastCGI peer must reject (spec 3.3: version 1):
# nginx aborts the response ("upstream sent unsupported FastCGI protocol version: 0").
_INVALID_RECORD_HEADER = bytes(fcgi.FCGI_HEADER_LEN)


class FastCGIRequest:
    """One FastCGI request (flup's ``fcgi_base.Request``; its attribute names are kept because
    ``handler``/``error`` overrides use them): params, stdin, stdout, stderr, data.
    """

    @_impl.runs_compiled('fcgi:request_init')
    def __init__(self, conn, inputStreamClass=None, timeout=None):
        self._conn = conn
        self.server = conn.server
        self._timeout = timeout
        self._io = RequestIO()
        self.role = None
        self.flags = 0
        self._started = False  # PARAMS complete: the handler runs or has run
        self.params = {}
        self.keep_conn = False
        # The streams: the connection builds them when it takes the request (open_streams).
        self.stdin = self.stdout = self.stderr = self._data = None

    requestId = property(attrgetter('_io.request_id'),
                         lambda self, value: setattr(self._io, 'request_id', value))
    aborted = property(attrgetter('_io.aborted'),  # FCGI_ABORT_REQUEST came for it
                       lambda self, value: setattr(self._io, 'aborted', value))

    @property
    def data(self):
        """FCGI_DATA, the FILTER role's second input (the connection opens it for that role;
        for another, on first use: it is rarely wanted)."""
        if self._data is None:
            self._data = self._conn.open_input(self._io, fcgi.FCGI_DATA)
        return self._data

    @data.setter
    def data(self, stream):
        self._data = stream

    @_impl.runs_compiled('fcgi:request_run')
    def run(self):
        """Run the handler, answer errors, end the request (flup fcgi_base.py:568-598)."""
        try:
            if self._timeout:
                with request_deadline(self._timeout, self.stderr.write):
                    protocol_status, app_status = self.server.handler(self)
            else:  # the threaded servers' case: no watchdog to arm and disarm
                protocol_status, app_status = self.server.handler(self)
        except Exception:
            if self.aborted or is_peer_gone(sys.exc_info()[1]):
                # Nothing of an aborted request is sent (its ClientDisconnected included):
                # the web server waits for END_REQUEST only.
                protocol_status, app_status = fcgi.FCGI_REQUEST_COMPLETE, 0
            elif self._conn.send_broken:
                # A send cut short: nothing more goes on the stream, where a record may be
                # half sent (the traceback would be read as records); the server's log has it.
                logger.exception('FastCGI request %s: a send was cut short; ending the '
                                 'connection', self.requestId)
                self._conn.truncate_request(self)
                return
            else:
                traceback.print_exc(file=self.stderr)
                self.stderr.flush()
                if self.stdout.dataWritten:
                    self._conn.truncate_request(self)
                    return
                self.server.error(self)
                protocol_status, app_status = fcgi.FCGI_REQUEST_COMPLETE, 0
        self._end(app_status, protocol_status)

    @_impl.runs_compiled('fcgi:request_end')
    def _end(self, appStatus=0, protocolStatus=fcgi.FCGI_REQUEST_COMPLETE):
        self._conn.end_request(self, appStatus, protocolStatus)


def _stream_name(stream_type):
    return 'STDIN' if stream_type == fcgi.FCGI_STDIN else 'DATA'


def _aborted_message(stream_type):
    return ('the web server aborted the request (FCGI_ABORT_REQUEST) before the end of '
            'FCGI_%s' % _stream_name(stream_type))


class FastCGIConfig:
    """A FastCGI connection's settings: built once per run() by the server (flup's
    ``multiplexed``, ``maxwrite`` and ``capability`` attributes, in
    ``BaseFCGIServer._connectionConfig``) and shared by every connection it serves."""

    __slots__ = ('multiplexed', 'max_content', 'capability')

    def __init__(self, multiplexed=False, maxwrite=DEFAULT_MAXWRITE, capability=None):
        self.multiplexed = bool(multiplexed)
        # Record content: a multiple of 8 so only a stream's last record needs padding.
        self.max_content = max(8, min(maxwrite - fcgi.FCGI_HEADER_LEN, 0xFFF8) & ~7)
        # GET_VALUES answers (spec 4.1), names as bytes.
        self.capability = {} if capability is None else capability


class FastCGIConnection(Connection, _impl.FastCGIState):
    """A FastCGI connection from the web server (spec 3): requests one after another in this
    thread, or, when the server is ``multiplexed``, each in its own thread while this one reads.
    A subclass may fix ``multiplexed`` as a class attribute (fcgi_base's two classes do: no
    __init__ of their own per connection); None takes the server's config. What __init__
    writes is FastCGIState's (connection_state.py).
    """

    multiplexed = None
    _eof = False  # the web server closed its end

    @_impl.runs_compiled('fcgi_init')
    def __init__(self, sock, addr, server, timeout=None, config=None):
        # The compiled ChildJobs and new_job make the same writes in the same order while
        # this is the class's __init__ (_cython/connection.pxi).
        super().__init__(sock, addr)
        self.server = server
        self.timeout = timeout
        if config is None:  # built outside the server's run() (a flup-style jobArgs, a test)
            config = server._connectionConfig()
        self._config = config
        multiplexed = self.multiplexed
        if multiplexed is None:
            multiplexed = self.multiplexed = config.multiplexed
        if multiplexed:  # the request threads send beside the reading thread
            self._send_lock = threading.Lock()
        self.can_park = not multiplexed
        self.max_content = config.max_content
        self._parser = _impl.FastCGIParser()
        self._events = collections.deque()
        self._requests = {}
        # A multiplexed request leaves _requests before its END_REQUEST is sent (the id is
        # free again at once): the connection's end waits for its threads, not its entries.
        self._request_threads = []
        # served (0), idle (False) and max_requests (None: set by a prefork child) start at
        # their defaults (connection_state.py).

    # -- reading -----------------------------------------------------------------------------

    @_impl.runs_compiled('fcgi:_read_events')
    def _read_events(self):
        """Receive once and queue the events; returns False at EOF."""
        # recv_some inlined: this runs once per request. The parser copies what it keeps.
        buf, view = receive_buffer()
        data = view[:_impl.recv_into(self._sock, buf)]
        if not data:
            self._eof = True
            return False
        self._events.extend(self._parser.feed(data))
        return True

    @_impl.runs_compiled('fcgi:open_streams')
    def open_streams(self, req):
        """Give a new request its streams: stdin, stdout, stderr, and data for the FILTER
        role. They share ``req._io`` with this connection and hold no reference to ``req``."""
        io = req._io
        if self.multiplexed:
            io.pending = {fcgi.FCGI_STDIN: Spool(), fcgi.FCGI_DATA: Spool()}
        else:
            io.pending = {fcgi.FCGI_STDIN: collections.deque(),
                          fcgi.FCGI_DATA: collections.deque()}
        req.stdin = self.open_input(io, fcgi.FCGI_STDIN)
        req.stdout = StdoutStream(self, io)
        req.stderr = StderrStream(self, io)
        if req.role == fcgi.FCGI_FILTER:
            req.data = self.open_input(io, fcgi.FCGI_DATA)

    @_impl.runs_compiled('fcgi:open_input')
    def open_input(self, io, stream_type):
        if self.multiplexed:
            return _impl.InputStream(io.pending[stream_type].pull)
        # A partial (built in C, no Python __init__): most requests never read their body.
        return _impl.InputStream(partial(self._pull, io, stream_type))

    @_impl.runs_compiled('fcgi:_pull')
    def _pull(self, io, stream_type):
        """The next chunk of one of a request's input streams; reads the socket only when the
        app asks, handling whatever else arrives meanwhile (flup's lazy stdin). After the
        request's end (``pending`` None) the stream has nothing more.
        """
        pending = io.pending
        if pending is None:
            return b''
        pending = pending[stream_type]
        ended = io.ended
        if not io.settled:
            # A pull was cut short: nothing more is read from records whose state is unknown
            # (an app's error path may read again, and would settle them on a misread).
            raise ClientDisconnected(BODY_READ_INTERRUPTED)
        io.settled = False
        try:
            while not pending:
                if ended[stream_type]:
                    io.settled = True
                    return b''
                if io.aborted:
                    raise ClientDisconnected(_aborted_message(stream_type))
                if not self._events and not self._read_events():
                    raise ClientDisconnected('the web server closed the connection before the '
                                             'end of FCGI_%s' % _stream_name(stream_type))
                while self._events and not pending and not ended[stream_type] \
                        and not io.aborted:
                    self._dispatch(self._events.popleft())
        except ClientDisconnected:
            io.settled = True  # raised with the records accounted for
            raise
        io.settled = True
        return pending.popleft()

    # -- the connection loop -----------------------------------------------------------------

    @_impl.runs_compiled('fcgi:run')
    def run(self):
        """Serve until the web server closes, a request without KEEP_CONN ends, or the
        request budget (``max_requests``) is spent. Returns the number of requests served.
        """
        return _impl.run_fcgi(self)

    def _peer_name(self):
        if isinstance(self._addr, tuple) and len(self._addr) >= 2:
            return '%s:%s' % self._addr[:2]
        return self._addr or 'unix socket'

    @_impl.runs_compiled('fcgi:_serve')
    def _serve(self):
        ready = self.parked  # back from the parked set: the socket is readable
        self.parked = False
        while not self.closed:
            if not self._events:
                # Between requests (KEEP_CONN) the mode may end or park the wait; a new
                # connection is not idle: its first request is on the way.
                if self.served > 0 and not self._requests and not ready:
                    self.idle = True
                    answer = self.on_idle(self, not self._parser.pending)
                    if answer is not WAIT:
                        self.idle = False
                        self.parked = answer is PARK
                        return
                ready = False
                try:
                    if not self._read_events():
                        return
                finally:
                    self.idle = False
            while self._events and not self.closed:
                self._dispatch(self._events.popleft())

    def _answer_overloaded(self):
        """FastCGI's refusal (spec 5.5): END_REQUEST with FCGI_OVERLOADED for the first
        request. nginx and Apache ignore the protocol status and would show a 502 for a request
        with no output, so a 503 response on STDOUT comes first."""
        while True:
            while not self._events:
                if not self._read_events():
                    return
            record_type, request_id, payload = self._events.popleft()
            if record_type == fcgi.FCGI_BEGIN_REQUEST:
                break
            if record_type == fcgi.FCGI_GET_VALUES:
                self._on_get_values(payload)
        self.send([fcgi.encode_record(fcgi.FCGI_STDOUT, request_id, OVERLOADED_CGI_RESPONSE),
                   fcgi.encode_record(fcgi.FCGI_STDOUT, request_id),
                   fcgi.encode_end_request(request_id, 0, fcgi.FCGI_OVERLOADED)])

    @_impl.runs_compiled('fcgi:_finish')
    def _finish(self):
        for req in list(self._requests.values()):
            if self.multiplexed:
                for spool in req._io.pending.values():
                    spool.abort()
        if self.multiplexed:
            for thread in self._request_threads:
                thread.join()
            for req in list(self._requests.values()):
                self._release_spools(req)  # also when the request's thread died unended
        if not self.closed:  # usually closed already, by the last request's end
            self.close()

    @staticmethod
    def _release_spools(req):
        for spool in req._io.pending.values():
            spool.close()

    @_impl.runs_compiled('fcgi:_dispatch')
    def _dispatch(self, event):
        record_type, request_id, payload = event
        if record_type == fcgi.FCGI_STDIN or record_type == fcgi.FCGI_DATA:
            req = self._requests.get(request_id)
            if req is None:
                return  # spec 3.3: records for inactive requests are ignored
            io = req._io
            if io.ended[record_type]:
                return
            if self.multiplexed:
                spool = io.pending[record_type]
                if payload:
                    spool.push(payload)
                else:
                    io.ended[record_type] = True
                    spool.end()
            elif payload:
                io.pending[record_type].append(payload)
            else:
                io.ended[record_type] = True
        elif record_type == fcgi.FCGI_PARAMS:
            self._on_params(request_id, payload)
        elif record_type == fcgi.FCGI_BEGIN_REQUEST:
            self._on_begin_request(request_id, payload)
        elif record_type == fcgi.FCGI_ABORT_REQUEST:
            req = self._requests.get(request_id)
            if req is not None:
                self._on_abort_request(req)
        elif record_type == fcgi.FCGI_GET_VALUES:
            self._on_get_values(payload)
        elif request_id == fcgi.FCGI_NULL_REQUEST_ID:
            # Spec 4.2: an unknown management record gets FCGI_UNKNOWN_TYPE.
            logger.warning('FastCGI: unknown management record type %d from %s',
                           record_type, self._peer_name())
            self.send([fcgi.encode_unknown_type(record_type)])
        else:
            logger.warning('FastCGI: ignoring record of unknown type %d for request %d from %s',
                           record_type, request_id, self._peer_name())

    @_impl.runs_compiled('fcgi:_on_begin_request')
    def _on_begin_request(self, request_id, payload):
        role, flags = payload
        if request_id in self._requests:
            raise ProtocolError('BEGIN_REQUEST for request %d, which is already active'
                                % request_id)
        if self._requests and not self.multiplexed:
            # flup fcgi_base.py:770: one request at a time unless multiplexed.
            self.send([fcgi.encode_end_request(request_id, 0, fcgi.FCGI_CANT_MPX_CONN)])
            return
        if len(self._requests) >= MAX_OPEN_REQUESTS:
            self.send([fcgi.encode_end_request(request_id, 0, fcgi.FCGI_OVERLOADED)])
            return
        req = self.server.request_class(self, None, self.timeout)
        req._io.request_id = request_id  # req.requestId, without the property's call
        req.role = role
        req.flags = flags
        req.keep_conn = bool(flags & fcgi.FCGI_KEEP_CONN)
        self.open_streams(req)
        self._requests[request_id] = req

    @_impl.runs_compiled('fcgi:_on_abort_request')
    def _on_abort_request(self, req):
        """Spec 5.4: answer END_REQUEST as soon as possible. The app cannot be interrupted,
        but a read of its body waiting for STDIN is: it raises ClientDisconnected (the
        request then ends at once); its later output is dropped (StdoutStream). A request
        whose PARAMS have not all come yet has not started: it ends here
        (``fastcgi-abort-request``)."""
        req.aborted = True
        if self.multiplexed:
            for stream_type, spool in req._io.pending.items():
                spool.abort(_aborted_message(stream_type))
        if not req._started:
            self.end_request(req)

    @_impl.runs_compiled('fcgi:_on_params')
    def _on_params(self, request_id, params):
        req = self._requests.get(request_id)
        if req is None:
            return
        req.params = params
        req._started = True
        if not self.multiplexed:
            req.run()
            return
        if self._send_lock is None:  # made multiplexed after __init__: no request thread yet
            self._send_lock = threading.Lock()
        thread = threading.Thread(target=req.run, name='flupfast-fcgi-%d' % request_id,
                                  daemon=True)
        try:
            thread.start()
        except RuntimeError:
            # flup means to answer OVERLOADED here but raises NameError (fcgi_base.py:894).
            logger.error('FastCGI: cannot start a thread for request %d; answering OVERLOADED',
                         request_id)
            self.end_request(req, 0, fcgi.FCGI_OVERLOADED)
            return
        threads = self._request_threads
        threads[:] = [t for t in threads if t.is_alive()]  # bounded by the open-request cap
        threads.append(thread)

    def _on_get_values(self, names):
        capability = self._config.capability
        answer = {}
        for name in names:
            # flup looks str keys up with bytes names, so it always answers empty.
            if name in capability:
                answer[name] = capability[name]
        self.send([fcgi.encode_get_values_result(answer)])

    # -- ending a request --------------------------------------------------------------------

    @_impl.runs_compiled('fcgi:end_request')
    def end_request(self, req, app_status=0, protocol_status=fcgi.FCGI_REQUEST_COMPLETE):
        """Close STDOUT and STDERR, then END_REQUEST (spec 5.5: always in this order), all in
        one send; then keep the connection, drain it, or close it.
        """
        if self.send_broken:
            # A send cut short: a record may be half on the wire (known_differences
            # 'truncated-response-signalled' is how the web server is told).
            if not self.multiplexed:
                self.truncate_request(req)
                return
            shutdown_quietly(self._sock, socket.SHUT_RDWR)  # every request on it ends
        stdout, stderr = req.stdout, req.stderr
        io = req._io
        request_id = io.request_id
        if (app_status == 0 and protocol_status == fcgi.FCGI_REQUEST_COMPLETE
                and type(stdout) is StdoutStream and type(stderr) is StderrStream
                and stdout.dataWritten and not stdout.closed and not stderr.closed
                and not stderr.dataWritten and not stderr._held):
            # The usual end (output written, nothing on stderr): prebuilt bytes.
            stdout.closed = stderr.closed = True
            buffers = [_completed_records(request_id)]
        else:
            buffers = stdout.end_buffers() + stderr.end_buffers()
            buffers.append(fcgi.encode_end_request(request_id, app_status, protocol_status))
        if self.multiplexed:
            # Inactive before END_REQUEST leaves: the web server may reuse the id at once, and
            # the reading thread must not take its BEGIN_REQUEST for a duplicate.
            self._requests.pop(request_id, None)
        try:
            self.send(buffers)
        except OSError as exc:
            # Closed meanwhile: the reading thread ends a multiplexed connection at EOF.
            if not (is_peer_gone(exc) or self.closed):
                raise
            self._requests.pop(request_id, None)
            if self.multiplexed:
                self._release_spools(req)
            self.close()
            return
        self.served += 1
        if self.multiplexed:
            self._end_multiplexed(req)
            return
        try:
            if not req.keep_conn or (self.max_requests is not None
                                     and self.served >= self.max_requests):
                self._discard_queued_input(req)
                if req._io.ended[fcgi.FCGI_STDIN] and not self._events \
                        and not self._parser.pending:
                    self.close()  # nothing unread: a plain close sends FIN, not RST
                else:
                    self.linger_close()
                return
            if not io.settled:
                # A pull cut short: which bytes the parser missed is unknown, and a client's
                # upload must never be read as records. The connection ends here.
                self.linger_close()
                return
            # KEEP_CONN: the stream must be at its end before the next request's records.
            # Its end usually came in the same receive as the request (a GET's empty STDIN):
            # taking it from the queue saves the stream's drain -> pull -> dispatch round.
            # After ABORT_REQUEST nothing more is due: later records for the id are ignored
            # (spec 3.3), so there is nothing to drain.
            self._discard_queued_input(req)
            ended = io.ended
            if io.aborted:
                return
            if not ended[fcgi.FCGI_STDIN]:
                req.stdin.drain()
            if req.role == fcgi.FCGI_FILTER and not ended[fcgi.FCGI_DATA]:
                req.data.drain()
        finally:
            self._requests.pop(request_id, None)
            io.pending = None  # its input streams read nothing more

    @_impl.runs_compiled('fcgi:truncate_request')
    def truncate_request(self, req):
        """The app failed after its response began: END_REQUEST would pass the part sent for
        the whole response (nginx and Apache then end the client's response normally).
        Instead the connection ends abruptly: a reset on TCP; on a Unix socket a close when
        the web server asked for KEEP_CONN (it takes an early close for an error), else an
        invalid record first. A multiplexed connection carries other requests: there, only
        END_REQUEST's appStatus can say it (``truncated-response-signalled``)."""
        if self.multiplexed:
            self.end_request(req, 1)
            return
        self.served += 1
        try:
            # A pull cut short leaves the records unknown: nothing is read as the request's.
            self.end_abruptly(b'' if req.keep_conn else _INVALID_RECORD_HEADER,
                              (lambda deadline: self._discard_input(req, deadline))
                              if req._io.settled else None)
        finally:
            self._requests.pop(req.requestId, None)
            req._io.pending = None

    @_impl.runs_compiled('fcgi:_discard_input')
    def _discard_input(self, req, deadline):
        """Read and drop the rest of ``req``'s STDIN until its end or ``deadline``."""
        self._discard_queued_input(req)
        io = req._io
        while not io.ended[fcgi.FCGI_STDIN] and time.monotonic() < deadline:
            self._pull(io, fcgi.FCGI_STDIN)

    @_impl.runs_compiled('fcgi:_discard_queued_input')
    def _discard_queued_input(self, req):
        """Take the request's input records already received (typically the empty STDIN that
        came with the body), so that closing needs no lingering read."""
        events = self._events
        io = req._io
        while events and events[0][1] == io.request_id and events[0][0] in _INPUT_TYPES:
            record_type, _, payload = events.popleft()
            if not payload:
                io.ended[record_type] = True

    def _end_multiplexed(self, req):
        requests = self._requests
        with self._send_lock:
            # The web server may have begun its next request under this id already (nginx
            # always sends id 1): that one stays.
            if requests.get(req.requestId) is req:
                del requests[req.requestId]
            last = not requests
        self._release_spools(req)
        if last and not req.keep_conn:
            # Wake the reading thread; it closes the socket once the reads stop.
            shutdown_quietly(self._sock, socket.SHUT_RDWR)


def run(conn):
    """``run()`` of a FastCGI connection: the record loop (``_serve``), a protocol error as one
    line naming the peer, a peer that left without a traceback, then ``_finish``. The compiled
    twin (_cython/fastcgi_serve.pxi) runs the whole non-multiplexed connection in C while its
    methods, flup's Request and the server's ``handler`` and ``_sanitizeEnv`` are flupfast's
    own (``_impl.runs_compiled``); otherwise it calls this."""
    try:
        conn._serve()
    except ProtocolError as exc:
        logger.error('FastCGI protocol error from %s: %s; closing the connection',
                     conn._peer_name(), exc)
    except ClientDisconnected:
        pass
    except OSError as exc:
        if not is_peer_gone(exc):
            logger.exception('FastCGI connection from %s failed', conn._peer_name())
    finally:
        if not conn.parked:
            conn._finish()
    return conn.served
