"""What every protocol's connection shares: the socket, a receive buffer reused per thread, a
gathered send queue, the lingering close and the abrupt end; and the SCGI/AJP request loop.

One module per protocol beside it (fastcgi_connection.py, scgi_connection.py,
ajp_connection.py). No WSGI here (gateway.py), no codec, no accept loop or process model.
"""
import fcntl
import logging
import socket
import struct
import termios
import time

from flupfast import _impl
from flupfast.body import ClientDisconnected
from flupfast.gateway import is_peer_gone
from flupfast.limits import (COALESCE_LIMIT, LINGER_SECONDS, OVERLOAD_ANSWER_SECONDS,
                             RECV_BUFFER_SIZE, RESET_DRAIN_SECONDS)
from flupfast.output import shutdown_quietly
from flupfast.sockio import receive_buffer
from flupfast.protocols.errors import ProtocolError
from flupfast.serving.job import Job

# name -> logger: logging.getLogger takes the module's lock on every call.
_loggers = {}

# struct linger {l_onoff = 1, l_linger = 0}: close() then resets the TCP connection.
_LINGER_RESET = struct.pack('ii', 1, 0)
_INT_ZERO = struct.pack('i', 0)

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


class Connection(_impl.ConnectionState, Job):
    """What every protocol's connection shares: the socket, a reused receive buffer, a send
    queue that gathers buffers into one ``sendmsg``, and the lingering close. A connection is
    a job (serving/job.py): ``run()`` returns the requests served, and it asks ``on_idle``
    before it waits for a request. AJP13 and non-multiplexed FastCGI connections ``can_park``.
    """

    # Defaults until set: a connection is built per request, and every attribute its
    # constructor writes costs (the instance's dict). What the request path reads and writes
    # at every request is ConnectionState's (connection_state.py), with its defaults.
    _out_bytes = 0
    # A send raised (the request timeout, or a signal, while it waited on a slow reader): part
    # of what it was sending may be on the wire, and nothing sent after it reads right. A
    # protocol that would keep the connection ends it abruptly instead.
    send_broken = False
    # Held around a send only where several threads send on one connection: a multiplexed
    # FastCGI connection's requests and its reading thread (fastcgi_connection.py sets it).
    # Every other connection is served, and sends, in one thread at a time.
    _send_lock = None

    @_impl.runs_compiled('connection_init')
    def __init__(self, sock, addr):
        self._sock = sock
        self._addr = addr
        self._out = []

    @_impl.runs_compiled('recv_some')
    def recv_some(self, limit=0):
        """One ``recv_into`` this thread's buffer, of at most ``limit`` bytes if given;
        returns a view of the new bytes (empty at EOF), valid until the next receive in this
        thread. Receive and close go through _impl (sockio): the compiled twin keeps the GIL
        when the bytes are there already."""
        buf, view = receive_buffer()
        if limit > RECV_BUFFER_SIZE:
            limit = RECV_BUFFER_SIZE
        return view[:_impl.recv_into(self._sock, buf, limit)]

    @_impl.runs_compiled('send')
    def send(self, buffers, hold=False):
        """Queue ``buffers``; send everything queued unless ``hold`` and under the limit."""
        lock = self._send_lock
        if lock is None:
            self._queue_and_send(buffers, hold)
        else:
            with lock:
                self._queue_and_send(buffers, hold)

    def _queue_and_send(self, buffers, hold):
        self._out += buffers
        if hold:
            for buf in buffers:
                self._out_bytes += len(buf)
            if self._out_bytes < COALESCE_LIMIT:
                return
        out = self._out
        self._out = []
        self._out_bytes = 0
        try:
            _impl.send_buffers(self._sock, out)
        except BaseException:
            self.send_broken = True
            raise

    def send_file(self, filelike):
        """Send a regular file from its current position to the end (``os.sendfile``; the
        file's position is left after the bytes sent). Returns the bytes sent."""
        lock = self._send_lock
        if lock is None:
            return self._sock.sendfile(filelike, filelike.tell())
        with lock:
            return self._sock.sendfile(filelike, filelike.tell())

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
                if not self._sock.recv_into(receive_buffer()[0]):
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

    @_impl.runs_compiled('close')
    def close(self):
        if not self.closed:
            self.closed = True
            try:
                _impl.close_socket(self._sock)
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

    logger_name = None  # the protocol's logger: a class attribute, or given

    @_impl.runs_compiled('logged_init')
    def __init__(self, sock, addr, server, timeout=None, logger_name=None):
        super().__init__(sock, addr)
        self.server = server
        self._timeout = timeout
        if logger_name is None:
            logger_name = self.logger_name
        logger = _loggers.get(logger_name)
        if logger is None:
            logger = _loggers[logger_name] = logging.getLogger(logger_name)
        self.logger = logger

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
            if not self.parked:
                self._finish()
        if tcp:
            self.logger.debug('Connection shutting down (%s:%d)', addr[0], addr[1])
        return self.served

    def _serve(self):
        raise NotImplementedError

    def _finish(self):
        self.close()
