"""One SCGI connection: read the header netstring, serve the one request it carries with a
body stream bounded by CONTENT_LENGTH, answer on the raw socket, close.

The WSGI glue is gateway.py (through the server's ``handler``); the codec is
protocols/scgi.py or its compiled twin; the socket plumbing and the logged loop are connection.LoggedConnection.
Log messages and levels are flup's (logger ``scgi-wsgi``), so a site's logging keeps working.
"""
import datetime
import logging
import time

from flupfast import _impl, fastlog
from flupfast.body import ClientDisconnected
from flupfast.connection import LoggedConnection
from flupfast.deadline import request_deadline
from flupfast.gateway import is_peer_gone
from flupfast.output import CGI_STATUS_PREFIX, is_regular_file, overloaded_response
from flupfast.protocols.errors import SCGIError
from flupfast.serving.job import WAIT

LoggerName = 'scgi-wsgi'


class RawOutputStream(_impl.PartsWriter):
    """A response written straight onto the connection's socket (SCGI; flup's
    ``StdoutWrapper`` over ``sock.makefile('wb')``): no framing, held parts coalesced into one
    send, and regular files handed to the kernel with ``sendfile``.
    """

    def __init__(self, conn):
        self._conn = conn
        self.dataWritten = False

    def write_parts(self, parts, hold=False):
        buffers = list(filter(None, parts))  # in C: a comprehension is a call of its own
        if buffers:
            self.dataWritten = True
            self._conn.send(buffers, hold)

    def flush(self):
        self._conn.send([])

    def can_send_file(self, filelike):
        return is_regular_file(filelike)

    def send_file(self, filelike):
        """Send the rest of a regular file from its current position (``os.sendfile``);
        the bytes sent."""
        self.flush()
        self.dataWritten = True
        return self._conn.send_file(filelike)


class SCGIRequest:
    """One SCGI (or uwsgi) request (flup's ``scgi_base.Request``: ``environ``, ``stdin``,
    ``stdout`` and ``run``, the names a ``handler``/``error`` override uses); its connection
    gives the logger and what starts the response head (``status_prefix``)."""

    @_impl.runs_compiled('request_init')
    def __init__(self, conn, environ, input, output):
        self._conn = conn
        self.environ = environ
        self.stdin = input
        self.stdout = output
        self.logger = conn.logger
        # The connection gave its stream the prefix (_serve); flup-style code may pass any
        # file-like object (flup's StdoutWrapper) and gets the connection's.
        self.status_prefix = getattr(output, 'status_prefix', None) \
            or conn.status_prefix(environ)

    @_impl.runs_compiled('request_run')
    def run(self):
        """Run the handler; on an exception log it and answer the 500 page if nothing was
        sent yet (flup scgi_base.py:150-175)."""
        environ = self.environ
        logger = self.logger
        # DEBUG is on only where INFO is: at flup's WARNING one check, not two.
        info = logger.isEnabledFor(logging.INFO)
        debug = info and logger.isEnabledFor(logging.DEBUG)
        if info:  # the line's arguments only when logged
            fastlog.info(logger, '%s %s', environ['REQUEST_METHOD'], fastlog.readable(
                environ.get('SCRIPT_NAME', '') + environ.get('PATH_INFO', '')))
        if debug:
            start = datetime.datetime.now()
        try:
            self._conn.server.handler(self)
        except ClientDisconnected as exc:
            logger.warning('%s %s: %s', environ['REQUEST_METHOD'], fastlog.readable(
                environ.get('REQUEST_URI', environ.get('PATH_INFO', ''))), exc)
        except Exception as exc:
            if is_peer_gone(exc):
                logger.debug('the web server went away: %s', exc)
            else:
                logger.exception('Exception caught from handler')
                if self.stdout.dataWritten:
                    # SCGI ends at EOF: only a TCP reset tells the web server the response
                    # is cut short (``truncated-response-signalled``).
                    self._conn.end_abruptly(drain=self._conn.discard_body)
                else:
                    self._conn.server.error(self)
        if debug:
            elapsed = datetime.datetime.now() - start
            logger.debug('%s %s done (%.3f secs)', environ['REQUEST_METHOD'], fastlog.readable(
                environ.get('SCRIPT_NAME', '') + environ.get('PATH_INFO', '')),
                elapsed.total_seconds())


class SCGIConnection(LoggedConnection):
    """A connection from the web server: one request, then the socket is closed (scgi
    protocol.txt; flup ``scgi_base.Connection``). ``run()`` returns the requests served.

    uwsgi_connection.py serves uwsgi with it: a request head, CONTENT_LENGTH body bytes and a
    response on the raw socket there too; the class attributes below are what differs."""

    logger_name = LoggerName
    decoder = 'decode_scgi_request'  # the codec's name in _impl (looked up per request)
    error = SCGIError
    head_name = 'the header netstring'

    @_impl.runs_compiled('cgi_prefix')
    def status_prefix(self, environ):
        """What starts the response head: SCGI answers with CGI's ``Status:`` header."""
        return CGI_STATUS_PREFIX

    @_impl.runs_compiled('read_header')
    def _read_header(self):
        """The request head: (environ, content_length, body bytes received with it)."""
        self.idle = True  # no request byte yet: a stop may end the wait
        try:
            data = self.recv_some() if self.on_idle(self, False) is WAIT else b''
        finally:
            self.idle = False
        if not data:
            raise EOFError  # closed before a request: a health check, not an error
        decode = getattr(_impl, self.decoder)
        decoded = decode(data)
        if decoded is None:
            head = bytearray(data)  # the head spans receives: gather it
            while decoded is None:
                data = self.recv_some()
                if not data:
                    raise self.error('connection closed inside %s (%d bytes received)'
                                     % (self.head_name, len(head)))
                head += data
                decoded = decode(head)
            data = head
        environ, content_length, used = decoded
        # Bytes beyond CONTENT_LENGTH are not ours to read: one request per connection.
        return environ, content_length, bytes(data[used:used + content_length])

    @_impl.runs_compiled('scgi:run')
    def run(self):
        return _impl.run_scgi(self)

    @_impl.runs_compiled('serve')
    def _serve(self):
        _impl.serve_scgi(self)

    def discard_body(self, deadline):
        """Read and drop what is left of the body (CONTENT_LENGTH) until ``deadline``."""
        body = self._body
        while body is not None and body.left > 0 and time.monotonic() < deadline:
            data = self.recv_some(body.left)
            if not data:
                return
            body.left -= len(data)

    def _answer_overloaded(self):
        """SCGI (and uwsgi) has no refusal of its own: the request head is read, a 503
        sent."""
        environ = self._read_header()[0]
        self.send([overloaded_response(self.status_prefix(environ))])

    @_impl.runs_compiled('scgi_finish')
    def _finish(self):
        """Close; when body bytes may still be on the way, close lingering so the web
        server reads our response instead of a reset. The body source is dropped: it refers
        to this connection (a cycle the garbage collector would have to find)."""
        body, self._body = self._body, None
        if body is not None and body.left > 0:
            self.linger_close()
        else:
            self.close()


def serve(conn):
    """Serve the one request of ``conn`` (an SCGIConnection): read its head, open its body,
    run the server's ``requestClass`` with a RawOutputStream, flush. The compiled twin
    (_cython/scgi_serve.pxi) does the same, and runs flup's request, ``handler``,
    ``_environ_for`` and ``_sanitizeEnv`` in C while the server uses them unchanged."""
    environ, content_length, first = conn._read_header()
    conn._body, stdin = _impl.open_scgi_body(conn, first, content_length)
    output = RawOutputStream(conn)
    prefix = conn.status_prefix(environ)
    if prefix is not CGI_STATUS_PREFIX:  # uwsgi: the stream starts an HTTP head
        output.status_prefix = prefix
    req = conn.server.requestClass(conn, environ, stdin, output)
    if conn._timeout:
        with request_deadline(conn._timeout, conn._timed_out):
            req.run()
    else:  # the threaded servers' case: no watchdog to arm and disarm
        req.run()
    if not conn.closed:
        output.flush()
    conn.served = 1


def run(conn):
    """``run()`` of an SCGI connection: flup's connection loop (``LoggedConnection.run``)
    around ``_serve``; the compiled twin runs the loop, ``serve`` and ``_finish`` in C while
    they are flupfast's own."""
    return LoggedConnection.run(conn)
