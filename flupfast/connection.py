"""One accepted socket and the lifecycle of its requests: receive into a reused buffer, feed the
codec, dispatch events, send responses, and close cleanly.

``Connection`` holds what every protocol shares (receive buffer, send queue, lingering close);
``FastCGIConnection`` adds FastCGI's records, KEEP_CONN, GET_VALUES and multiplexing.
No WSGI here (gateway.py) and no accept loop or process model (serving/).
"""
import collections
import fcntl
import logging
import os
import signal
import socket
import struct
import sys
import termios
import threading
import time
import traceback
import weakref

from flupfast import _impl
from flupfast.body import ClientDisconnected, Spool
from flupfast.gateway import is_peer_gone
from flupfast.limits import (COALESCE_LIMIT, DEFAULT_MAXWRITE, LINGER_SECONDS,
                             MAX_OPEN_REQUESTS, OVERLOAD_ANSWER_SECONDS, RECV_BUFFER_SIZE,
                             RESET_DRAIN_SECONDS)
from flupfast.output import OVERLOADED_CGI_RESPONSE, is_regular_file, shutdown_quietly
from flupfast.protocols import fastcgi as fcgi
from flupfast.protocols.errors import ProtocolError
from flupfast.serving.job import PARK, WAIT, Job

logger = logging.getLogger('flupfast')
# name -> logger: logging.getLogger takes the module's lock on every call.
_loggers = {}

_INPUT_TYPES = (fcgi.FCGI_STDIN, fcgi.FCGI_DATA)

# struct linger {l_onoff = 1, l_linger = 0}: close() then resets the TCP connection.
_LINGER_RESET = struct.pack('ii', 1, 0)
_INT_ZERO = struct.pack('i', 0)
# A record header of version 0, which a FastCGI peer must reject (spec 3.3: version 1):
# nginx aborts the response ("upstream sent unsupported FastCGI protocol version: 0").
_INVALID_RECORD_HEADER = bytes(fcgi.FCGI_HEADER_LEN)

# One receive buffer per thread, reused by every connection that thread serves: allocating and
# zeroing 256 KiB per accepted connection costs more than a small request. Safe because the
# codecs copy what they keep out of it before the next receive.
_thread_state = threading.local()


def _receive_buffer():
    buf = getattr(_thread_state, 'recv_buf', None)
    if buf is None:
        buf = _thread_state.recv_buf = bytearray(RECV_BUFFER_SIZE)
        _thread_state.recv_view = memoryview(buf)
    return buf, _thread_state.recv_view


def _wait_sent(sock, seconds):
    """Wait until the kernel has sent, and the peer acknowledged, what was written to ``sock``
    (SIOCOUTQ, Linux), for at most ``seconds``; elsewhere return at once."""
    deadline = time.monotonic() + seconds
    delay = 0.001
    try:
        while struct.unpack('i', fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, _INT_ZERO))[0]:
            if time.monotonic() + delay > deadline:
                return
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
    except (OSError, AttributeError):
        pass  # no SIOCOUTQ here (TIOCOUTQ is SIOCOUTQ on Linux)


class Connection(Job):
    """What every protocol's connection shares: the socket, a reused receive buffer, a send
    queue that gathers buffers into one ``sendmsg``, and the lingering close. A connection is
    a job (serving/job.py): ``run()`` returns the requests served, and it asks ``on_idle``
    before it waits for a request. Only a non-multiplexed FastCGI connection ``can_park``.
    """

    def __init__(self, sock, addr):
        self._sock = sock
        self._addr = addr
        self._out = []
        self._out_bytes = 0
        self._send_lock = threading.Lock()
        self.closed = False

    def recv_some(self, limit=0):
        """One ``recv_into`` this thread's buffer, of at most ``limit`` bytes if given;
        returns a view of the new bytes (empty at EOF), valid until the next receive in this
        thread."""
        buf, view = _receive_buffer()
        if limit > RECV_BUFFER_SIZE:
            limit = RECV_BUFFER_SIZE
        return view[:self._sock.recv_into(buf, limit)]

    def send(self, buffers, hold=False):
        """Queue ``buffers``; send everything queued unless ``hold`` and under the limit."""
        with self._send_lock:
            self._out += buffers
            if hold:
                for buf in buffers:
                    self._out_bytes += len(buf)
                if self._out_bytes < COALESCE_LIMIT:
                    return
            out = self._out
            self._out = []
            self._out_bytes = 0
            _impl.send_buffers(self._sock, out)

    def send_file(self, filelike):
        """Send a regular file from its current position to the end (``os.sendfile``; the
        file's position is left after the bytes sent)."""
        with self._send_lock:
            self._sock.sendfile(filelike, filelike.tell())

    def linger_close(self, seconds=LINGER_SECONDS):
        """Half-close, discard what the peer still sends for a bounded time, then close, so
        unread request bytes do not turn our FIN into an RST that destroys the response.
        """
        if self.closed:
            return
        shutdown_quietly(self._sock, socket.SHUT_WR)
        deadline = time.monotonic() + seconds
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._sock.settimeout(remaining)
                if not self._sock.recv_into(_receive_buffer()[0]):
                    break
        except OSError:
            pass
        self.close()

    def end_abruptly(self, unix_signal=b'', drain=None):
        """End the connection so that the web server cannot take the response for complete
        (``truncated-response-signalled``): on TCP a reset (SO_LINGER 0: RST, not FIN); on a
        Unix socket, which cannot reset, ``unix_signal`` (bytes the protocol forbids) first.

        ``drain(deadline)`` first reads what the web server still sends of the request:
        mod_proxy_fcgi and mod_proxy_scgi send all of it (a GET's empty STDIN too) before
        they read the answer, and a reset meeting them mid-send loses the traceback."""
        if self.closed:
            return
        deadline = time.monotonic() + RESET_DRAIN_SECONDS
        try:
            if drain is not None:
                self._sock.settimeout(RESET_DRAIN_SECONDS)
                drain(deadline)
        except (OSError, ProtocolError):
            pass  # gone, silent too long, or garbage: the reset is all that is left
        try:
            if self._sock.family in (socket.AF_INET, socket.AF_INET6):
                _wait_sent(self._sock, max(0.0, deadline - time.monotonic()))
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
            elif unix_signal:
                self.send([unix_signal])
        except OSError:
            pass  # the peer is gone already: closing is all that is left
        self.close()

    def close(self):
        if not self.closed:
            self.closed = True
            try:
                self._sock.close()
            except OSError:
                pass

    def refuse_overloaded(self):
        """Answer the connection's first request with the protocol's "overloaded" reply
        instead of serving it (no worker is free: the mode's queue is full), then close.
        Reading the request head, the answer and the lingering close take at most
        OVERLOAD_ANSWER_SECONDS: this runs in the accept loop's thread."""
        deadline = time.monotonic() + OVERLOAD_ANSWER_SECONDS
        try:
            self._sock.settimeout(OVERLOAD_ANSWER_SECONDS)
            self._answer_overloaded()
        except (OSError, EOFError, ProtocolError):
            pass  # the peer left, sent garbage or took too long: closing is all that is left
        self.linger_close(max(0.0, deadline - time.monotonic()))

    def _answer_overloaded(self):
        """Read the first request's head and send the protocol's refusal."""
        raise NotImplementedError


class LoggedConnection(Connection):
    """The connection loop of flup's SCGI and AJP servers (``scgi_base``/``ajp_base``
    ``Connection.run``): their logger's messages around the protocol's ``_serve``, a protocol
    error as one "Protocol error" line, a peer that left without a traceback. ``run()``
    returns ``served`` (the prefork child counts it against maxRequests).
    """

    def __init__(self, sock, addr, server, timeout, logger_name):
        super().__init__(sock, addr)
        self.server = server
        self._timeout = timeout
        logger = _loggers.get(logger_name)
        if logger is None:
            logger = _loggers[logger_name] = logging.getLogger(logger_name)
        self.logger = logger
        self.served = 0

    def _timed_out(self, message):
        """``request_deadline``'s report: flup logs "Timeout Exceeded" and the stack."""
        self.logger.error(message.rstrip('\n'))

    def run(self):
        addr = self._addr
        tcp = isinstance(addr, tuple) and len(addr) >= 2
        if tcp:
            self.logger.debug('Connection starting up (%s:%d)', addr[0], addr[1])
        try:
            self._serve()
        except ProtocolError as exc:
            self.logger.error("Protocol error '%s'", exc)
        except EOFError:
            pass  # closed before a request: a health check, not an error
        except ClientDisconnected as exc:
            self.logger.warning('%s', exc)
        except OSError as exc:
            if not is_peer_gone(exc):
                self.logger.exception('Exception caught in Connection')
        except Exception:
            self.logger.exception('Exception caught in Connection')
        finally:
            self._finish()
        if tcp:
            self.logger.debug('Connection shutting down (%s:%d)', addr[0], addr[1])
        return self.served

    def _serve(self):
        raise NotImplementedError

    def _finish(self):
        self.close()


class RawOutputStream:
    """A response written straight onto the connection's socket (SCGI; flup's
    ``StdoutWrapper`` over ``sock.makefile('wb')``): no framing, held parts coalesced into one
    send, and regular files handed to the kernel with ``sendfile``.
    """

    def __init__(self, conn):
        self._conn = conn
        self.dataWritten = False

    def write_parts(self, parts, hold=False):
        buffers = [part for part in parts if part]
        if buffers:
            self.dataWritten = True
            self._conn.send(buffers, hold)

    def write(self, data):
        if isinstance(data, str):
            data = data.encode('latin-1')
        self.write_parts((data,))

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        self._conn.send([])

    def can_send_file(self, filelike):
        return is_regular_file(filelike)

    def send_file(self, filelike):
        """Send the rest of a regular file from its current position (``os.sendfile``)."""
        self.flush()
        self.dataWritten = True
        self._conn.send_file(filelike)


class StdoutStream:
    """FCGI_STDOUT of one request (flup's ``OutputStream``): ``write`` frames bytes as records
    and sends them; ``close`` ends the stream with an empty record if anything was written.
    """

    record_type = fcgi.FCGI_STDOUT

    def __init__(self, conn, req):
        self._conn = conn
        # Weak: a strong reference back to the request would make a cycle per request.
        self._req = weakref.ref(req)
        self.dataWritten = False
        self.closed = False

    def write_parts(self, parts, hold=False):
        req = self._req()
        if req is None or req.aborted:
            return  # the web server gave up on this request: nothing reads the bytes
        buffers = []
        for part in parts:
            if part:
                buffers += _impl.frame_stdout(req.requestId, part, self._conn.max_content,
                                              self.record_type)
        if buffers:
            self.dataWritten = True
            self._conn.send(buffers, hold and not self._conn.multiplexed)

    def write(self, data):
        if isinstance(data, str):
            data = data.encode('utf-8')
        self.write_parts((data,))

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        self._conn.send([])

    def end_buffers(self):
        """The buffers that close the stream (empty if nothing was ever written)."""
        if self.closed:
            return []
        self.closed = True
        if not self.dataWritten:
            return []
        return [fcgi.encode_record(self.record_type, self._req().requestId)]

    def close(self):
        self._conn.send(self.end_buffers())


class StderrStream(StdoutStream):
    """FCGI_STDERR (``wsgi.errors``): held in memory until flushed or the request ends, as
    flup's buffered stream; str is encoded UTF-8 as flup does.
    """

    record_type = fcgi.FCGI_STDERR

    def __init__(self, conn, req):
        super().__init__(conn, req)
        self._held = []

    def write(self, data):
        if isinstance(data, str):
            data = data.encode('utf-8')
        if data:
            self._held.append(bytes(data))

    def flush(self):
        if self._held:
            held, self._held = self._held, []
            self.write_parts((b''.join(held),))

    def end_buffers(self):
        buffers = []
        req = self._req()
        if self._held and not req.aborted:
            held, self._held = self._held, []
            buffers = _impl.frame_stdout(req.requestId, b''.join(held),
                                         self._conn.max_content, self.record_type)
            self.dataWritten = True
        return buffers + super().end_buffers()


# request id -> the empty FCGI_STDOUT record and END_REQUEST (app status 0, REQUEST_COMPLETE)
# that end a request with output and no stderr; web servers reuse a few small ids (nginx: 1).
_completed = {}
_COMPLETED_MAX_ID = 64


def _completed_records(request_id):
    records = _completed.get(request_id)
    if records is None:
        records = (fcgi.encode_record(fcgi.FCGI_STDOUT, request_id)
                   + fcgi.encode_end_request(request_id, 0, fcgi.FCGI_REQUEST_COMPLETE))
        if request_id <= _COMPLETED_MAX_ID:
            _completed[request_id] = records
    return records


class TimeoutException(Exception):
    """Raised inside the app when a fork server's per-request ``timeout`` expires."""


# The signal that interrupts a blocking call (sleep, recv) of the main thread when its request's
# deadline passes. A real-time signal, which no app is likely to use: SIGALRM is the app's.
_WAKE_SIGNAL = signal.SIGRTMIN + 3 if hasattr(signal, 'SIGRTMIN') else None


def _raise_in_thread(thread_id, exc_class):
    """Make ``exc_class`` (None: nothing) the exception ``thread_id`` raises at its next
    bytecode; the CPython API every per-thread timeout builds on."""
    import ctypes
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_class) if exc_class else None)


def _on_wake_signal(signum, frame):
    """Does nothing itself: running any Python code lets the pending TimeoutException raise,
    out of the blocking call the signal interrupted."""


class _Deadlines:
    """One watchdog thread per process for every request's ``timeout``: when one passes, it
    reports flup's "Timeout Exceeded" and the request thread's stack, and raises
    TimeoutException in that thread (any thread, unlike flup's SIGALRM, which works only in the
    main thread and replaces the app's alarm and handler)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._armed = {}  # id(entry) -> [deadline, thread id, report, fired]
        self._pid = None  # the process whose watchdog thread runs (threads die with fork)

    def arm(self, seconds, report):
        entry = [time.monotonic() + seconds, threading.get_ident(), report, False]
        if threading.current_thread() is threading.main_thread():
            self._install_wake_handler()
        with self._cond:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._armed = {}
                threading.Thread(target=self._watch, name='flupfast-deadlines',
                                 daemon=True).start()
            self._armed[id(entry)] = entry
            self._cond.notify()
        return entry

    def disarm(self, entry, timed_out):
        with self._cond:
            self._armed.pop(id(entry), None)
            if entry[3] and not timed_out:
                _raise_in_thread(entry[1], None)  # fired as the request ended: cancel it

    @staticmethod
    def _install_wake_handler():
        if _WAKE_SIGNAL is not None and signal.getsignal(_WAKE_SIGNAL) in (signal.SIG_DFL,
                                                                            None):
            signal.signal(_WAKE_SIGNAL, _on_wake_signal)

    def _watch(self):
        cond = self._cond
        with cond:
            while True:
                now = time.monotonic()
                wait = None
                for key, entry in list(self._armed.items()):
                    if entry[0] <= now:
                        del self._armed[key]
                        entry[3] = True
                        self._fire(entry)
                    elif wait is None or entry[0] - now < wait:
                        wait = entry[0] - now
                cond.wait(wait)

    @staticmethod
    def _fire(entry):
        _, thread_id, report, _ = entry
        frame = sys._current_frames().get(thread_id)
        try:
            report('Timeout Exceeded\n')
            if frame is not None:
                report(''.join(traceback.format_stack(frame)))
        except Exception:
            logger.exception('cannot report a request timeout')
        _raise_in_thread(thread_id, TimeoutException)
        if _WAKE_SIGNAL is not None and thread_id == threading.main_thread().ident \
                and signal.getsignal(_WAKE_SIGNAL) is _on_wake_signal:
            signal.pthread_kill(thread_id, _WAKE_SIGNAL)  # out of a blocking call


_deadlines = _Deadlines()


class request_deadline:
    """flup's per-request ``timeout`` of the fork servers (fcgi_base.py:561-591): once it
    passes, "Timeout Exceeded" and the stack are reported and TimeoutException raises inside
    the app. A watchdog thread does it, not SIGALRM: it works in any thread (multiplexed
    requests too), and the app's own alarm and SIGALRM handler are left alone.
    """

    def __init__(self, timeout, report):
        self._timeout = timeout
        self._report = report
        self._entry = None

    def __enter__(self):
        if self._timeout:
            self._entry = _deadlines.arm(self._timeout, self._report)
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._entry is not None:
            entry, self._entry = self._entry, None
            _deadlines.disarm(entry, exc_type is not None and issubclass(exc_type,
                                                                         TimeoutException))
        return False


class FastCGIRequest:
    """One FastCGI request (flup's ``fcgi_base.Request``; its attribute names are kept because
    ``handler``/``error`` overrides use them): params, stdin, stdout, stderr, data.
    """

    def __init__(self, conn, inputStreamClass=None, timeout=None):
        self._conn = conn
        self.server = conn.server
        self._timeout = timeout
        self.requestId = None
        self.role = None
        self.flags = 0
        self.aborted = False
        self._started = False  # PARAMS complete: the handler runs or has run
        self.params = {}
        self.keep_conn = False
        # Input not yet read by the app: deques filled by this thread, or, when multiplexed,
        # spools filled by the connection's reading thread.
        self._pending = conn.new_pending()
        self._sources = []
        self._ended = {fcgi.FCGI_STDIN: False, fcgi.FCGI_DATA: False}
        self.stdin = conn.open_input(self, fcgi.FCGI_STDIN)
        self._data = None
        self.stdout = StdoutStream(conn, self)
        self.stderr = StderrStream(conn, self)

    @property
    def data(self):
        """FCGI_DATA, the FILTER role's second input; made on first use (rarely needed)."""
        if self._data is None:
            self._data = self._conn.open_input(self, fcgi.FCGI_DATA)
        return self._data

    @data.setter
    def data(self, stream):
        self._data = stream

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
            else:
                traceback.print_exc(file=self.stderr)
                self.stderr.flush()
                if self.stdout.dataWritten:
                    self._conn.truncate_request(self)
                    return
                self.server.error(self)
                protocol_status, app_status = fcgi.FCGI_REQUEST_COMPLETE, 0
        self._end(app_status, protocol_status)

    def _end(self, appStatus=0, protocolStatus=fcgi.FCGI_REQUEST_COMPLETE):
        self._conn.end_request(self, appStatus, protocolStatus)


class _StreamSource:
    """``pull()`` for one input stream of a non-multiplexed request. ``detach`` at the end of
    the request drops the references that would otherwise keep request, streams and
    connection in a cycle only the garbage collector can free (a cost on every request).
    """

    __slots__ = ('_conn', '_req', '_stream_type')

    def __init__(self, conn, req, stream_type):
        self._conn = conn
        self._req = req
        self._stream_type = stream_type

    def __call__(self):
        if self._req is None:
            return b''
        return self._conn._pull(self._req, self._stream_type)

    def detach(self):
        self._conn = self._req = None


def _stream_name(stream_type):
    return 'STDIN' if stream_type == fcgi.FCGI_STDIN else 'DATA'


def _aborted_message(stream_type):
    return ('the web server aborted the request (FCGI_ABORT_REQUEST) before the end of '
            'FCGI_%s' % _stream_name(stream_type))


class FastCGIConnection(Connection):
    """A FastCGI connection from the web server (spec 3): requests one after another in this
    thread, or, when the server is ``multiplexed``, each in its own thread while this one reads.
    """

    def __init__(self, sock, addr, server, timeout=None):
        super().__init__(sock, addr)
        self.server = server
        self.timeout = timeout
        self.multiplexed = bool(getattr(server, 'multiplexed', False))
        self.can_park = not self.multiplexed
        maxwrite = getattr(server, 'maxwrite', DEFAULT_MAXWRITE)
        # Record content: a multiple of 8 so only a stream's last record needs padding.
        self.max_content = max(8, min(maxwrite - fcgi.FCGI_HEADER_LEN, 0xFFF8) & ~7)
        self._parser = _impl.FastCGIParser()
        self._events = collections.deque()
        self._requests = {}
        self._eof = False
        self.max_requests = None  # set by a prefork child: retire after this many
        self.served = 0
        self.idle = False

    # -- reading -----------------------------------------------------------------------------

    def _read_events(self):
        """Receive once and queue the events; returns False at EOF."""
        # recv_some inlined: this runs once per request. The parser copies what it keeps.
        buf, view = _receive_buffer()
        data = view[:self._sock.recv_into(buf)]
        if not data:
            self._eof = True
            return False
        self._events.extend(self._parser.feed(data))
        return True

    def new_pending(self):
        if self.multiplexed:
            return {fcgi.FCGI_STDIN: Spool(), fcgi.FCGI_DATA: Spool()}
        return {fcgi.FCGI_STDIN: collections.deque(), fcgi.FCGI_DATA: collections.deque()}

    def open_input(self, req, stream_type):
        if self.multiplexed:
            return _impl.InputStream(req._pending[stream_type].pull)
        source = _StreamSource(self, req, stream_type)
        req._sources.append(source)
        return _impl.InputStream(source)

    def _pull(self, req, stream_type):
        """The next chunk of one of ``req``'s input streams; reads the socket only when the app
        asks, handling whatever else arrives meanwhile (flup's lazy stdin).
        """
        pending = req._pending[stream_type]
        while not pending:
            if req._ended[stream_type]:
                return b''
            if req.aborted:
                raise ClientDisconnected(_aborted_message(stream_type))
            if not self._events and not self._read_events():
                raise ClientDisconnected('the web server closed the connection before the '
                                         'end of FCGI_%s' % _stream_name(stream_type))
            ended = req._ended
            while self._events and not pending and not ended[stream_type] and not req.aborted:
                self._dispatch(self._events.popleft())
        return pending.popleft()

    # -- the connection loop -----------------------------------------------------------------

    def run(self):
        """Serve until the web server closes, a request without KEEP_CONN ends, or the
        request budget (``max_requests``) is spent. Returns the number of requests served.
        """
        try:
            self._serve()
        except ProtocolError as exc:
            logger.error('FastCGI protocol error from %s: %s; closing the connection',
                         self._peer_name(), exc)
        except ClientDisconnected:
            pass
        except OSError as exc:
            if not is_peer_gone(exc):
                logger.exception('FastCGI connection from %s failed', self._peer_name())
        finally:
            if not self.parked:
                self._finish()
        return self.served

    def _peer_name(self):
        if isinstance(self._addr, tuple) and len(self._addr) >= 2:
            return '%s:%s' % self._addr[:2]
        return self._addr or 'unix socket'

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

    def _finish(self):
        for req in list(self._requests.values()):
            if self.multiplexed:
                for spool in req._pending.values():
                    spool.abort()
        if self.multiplexed:
            for req in list(self._requests.values()):
                thread = getattr(req, '_thread', None)
                if thread is not None:
                    thread.join()
                self._release_spools(req)  # also when the request's thread died unended
        self.close()

    @staticmethod
    def _release_spools(req):
        for spool in req._pending.values():
            spool.close()

    def _dispatch(self, event):
        record_type, request_id, payload = event
        if record_type == fcgi.FCGI_STDIN or record_type == fcgi.FCGI_DATA:
            req = self._requests.get(request_id)
            if req is None or req._ended[record_type]:
                return  # spec 3.3: records for inactive requests are ignored
            if self.multiplexed:
                spool = req._pending[record_type]
                if payload:
                    spool.push(payload)
                else:
                    req._ended[record_type] = True
                    spool.end()
            elif payload:
                req._pending[record_type].append(payload)
            else:
                req._ended[record_type] = True
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
        req.requestId = request_id
        req.role = role
        req.flags = flags
        req.keep_conn = bool(flags & fcgi.FCGI_KEEP_CONN)
        self._requests[request_id] = req

    def _on_abort_request(self, req):
        """Spec 5.4: answer END_REQUEST as soon as possible. The app cannot be interrupted,
        but a read of its body waiting for STDIN is: it raises ClientDisconnected (the
        request then ends at once); its later output is dropped (StdoutStream). A request
        whose PARAMS have not all come yet has not started: it ends here
        (``fastcgi-abort-request``)."""
        req.aborted = True
        if self.multiplexed:
            for stream_type, spool in req._pending.items():
                spool.abort(_aborted_message(stream_type))
        if not req._started:
            self.end_request(req)

    def _on_params(self, request_id, params):
        req = self._requests.get(request_id)
        if req is None:
            return
        req.params = params
        req._started = True
        if not self.multiplexed:
            req.run()
            return
        thread = threading.Thread(target=req.run, name='flupfast-fcgi-%d' % request_id,
                                  daemon=True)
        req._thread = thread
        try:
            thread.start()
        except RuntimeError:
            # flup means to answer OVERLOADED here but raises NameError (fcgi_base.py:894).
            logger.error('FastCGI: cannot start a thread for request %d; answering OVERLOADED',
                         request_id)
            req._thread = None
            self.end_request(req, 0, fcgi.FCGI_OVERLOADED)

    def _on_get_values(self, names):
        capability = getattr(self.server, 'capability', {})
        answer = {}
        for name in names:
            # flup looks str keys up with bytes names, so it always answers empty.
            if name in capability:
                answer[name] = capability[name]
        self.send([fcgi.encode_get_values_result(answer)])

    # -- ending a request --------------------------------------------------------------------

    def end_request(self, req, app_status=0, protocol_status=fcgi.FCGI_REQUEST_COMPLETE):
        """Close STDOUT and STDERR, then END_REQUEST (spec 5.5: always in this order), all in
        one send; then keep the connection, drain it, or close it.
        """
        stdout, stderr = req.stdout, req.stderr
        if (app_status == 0 and protocol_status == fcgi.FCGI_REQUEST_COMPLETE
                and type(stdout) is StdoutStream and type(stderr) is StderrStream
                and stdout.dataWritten and not stdout.closed and not stderr.closed
                and not stderr.dataWritten and not stderr._held):
            # The usual end (output written, nothing on stderr): prebuilt bytes.
            stdout.closed = stderr.closed = True
            buffers = [_completed_records(req.requestId)]
        else:
            buffers = stdout.end_buffers() + stderr.end_buffers()
            buffers.append(fcgi.encode_end_request(req.requestId, app_status, protocol_status))
        if self.multiplexed:
            # Inactive before END_REQUEST leaves: the web server may reuse the id at once, and
            # the reading thread must not take its BEGIN_REQUEST for a duplicate.
            self._requests.pop(req.requestId, None)
        try:
            self.send(buffers)
        except OSError as exc:
            # Closed meanwhile: the reading thread ends a multiplexed connection at EOF.
            if not (is_peer_gone(exc) or self.closed):
                raise
            self._requests.pop(req.requestId, None)
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
                if req._ended[fcgi.FCGI_STDIN] and not self._events and not self._parser.pending:
                    self.close()  # nothing unread: a plain close sends FIN, not RST
                else:
                    self.linger_close()
                return
            # KEEP_CONN: the stream must be at its end before the next request's records.
            # Its end usually came in the same receive as the request (a GET's empty STDIN):
            # taking it from the queue saves the stream's drain -> pull -> dispatch round.
            # After ABORT_REQUEST nothing more is due: later records for the id are ignored
            # (spec 3.3), so there is nothing to drain.
            self._discard_queued_input(req)
            if req.aborted:
                return
            if not req._ended[fcgi.FCGI_STDIN]:
                req.stdin.drain()
            if req.role == fcgi.FCGI_FILTER and not req._ended[fcgi.FCGI_DATA]:
                req.data.drain()
        finally:
            self._requests.pop(req.requestId, None)
            for source in req._sources:
                source.detach()

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
            self.end_abruptly(b'' if req.keep_conn else _INVALID_RECORD_HEADER,
                              lambda deadline: self._discard_input(req, deadline))
        finally:
            self._requests.pop(req.requestId, None)
            for source in req._sources:
                source.detach()

    def _discard_input(self, req, deadline):
        """Read and drop the rest of ``req``'s STDIN until its end or ``deadline``."""
        self._discard_queued_input(req)
        while not req._ended[fcgi.FCGI_STDIN] and time.monotonic() < deadline:
            self._pull(req, fcgi.FCGI_STDIN)

    def _discard_queued_input(self, req):
        """Take the request's input records already received (typically the empty STDIN that
        came with the body), so that closing needs no lingering read."""
        events = self._events
        while events and events[0][1] == req.requestId and events[0][0] in _INPUT_TYPES:
            record_type, _, payload = events.popleft()
            if not payload:
                req._ended[record_type] = True

    def _end_multiplexed(self, req):
        with self._send_lock:
            self._requests.pop(req.requestId, None)
            last = not self._requests
        self._release_spools(req)
        if last and not req.keep_conn:
            # Wake the reading thread; it closes the socket once the reads stop.
            shutdown_quietly(self._sock, socket.SHUT_RDWR)
