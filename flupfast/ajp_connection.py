"""One AJP13 connection from the web server: persistent, one request at a time. Packets are
read from a reused receive buffer; the body is pulled with GET_BODY_CHUNK only when the app
reads; every response packet goes out through one gathered send.

The WSGI glue is gateway.py (through the server's ``handler``); the codec is protocols/ajp.py
or its compiled twin. Log messages and levels are flup's (logger ``ajp-wsgi``).
"""
import collections
import datetime
import logging

from flupfast import _impl, fastlog
from flupfast.body import BODY_READ_INTERRUPTED, ClientDisconnected
from flupfast.connection import LoggedConnection
from flupfast.deadline import request_deadline
from flupfast.gateway import is_peer_gone
from flupfast.limits import AJP_BODY_AHEAD, AJP_DEFAULT_PACKET, AJP_MAX_PACKET
from flupfast.output import (OVERLOADED_BODY, OVERLOADED_HEADERS, OVERLOADED_REASON,
                             OVERLOADED_STATUS)
from flupfast.protocols import ajp
from flupfast.protocols.errors import AJPError
from flupfast.serving.job import PARK, WAIT

LoggerName = 'ajp-wsgi'
_logger = logging.getLogger(LoggerName)


def body_chunk_size(packet_size):
    """Data bytes per SEND_BODY_CHUNK in packets of ``packet_size`` (header 4, type 1, length
    2, trailing NUL 1): 8184 for Apache's default 8 KiB packets (flup's ``_maxWrite``)."""
    return packet_size - 8


def body_asks_ahead(chunk):
    """How many GET_BODY_CHUNKs may be in flight when each answer carries up to ``chunk``
    bytes: their answers together within limits.AJP_BODY_AHEAD, and always one."""
    return max(1, AJP_BODY_AHEAD // chunk)


# Largest body chunk one GET_BODY_CHUNK may ask for: a 64 KiB packet less its header (4) and
# the chunk's length field (2). The web server sends at most what its own buffer holds.
MAX_BODY_REQUEST = AJP_MAX_PACKET - 6


class _BodySource:
    """``pull()`` for wsgi.input: the first chunk as it arrives unsolicited (when the length
    is known), then GET_BODY_CHUNKs for as much as a packet can carry, kept in flight ahead of
    the app's reads (up to ``conn.body_ahead`` asks); a chunked body (no Content-Length) is
    asked for one chunk at a time until the web server sends an empty chunk.

    The wire stays right because of what mod_proxy_ajp does (spec "Request Packet Structure",
    GET_BODY_CHUNK / SEND_BODY_CHUNK; ``ajp-upload-speed``): it reads our packets one at a
    time, in order, and answers each GET_BODY_CHUNK with one SEND_BODY_CHUNK of what its own
    buffer takes from the client, whatever size was asked (at most its packet's data, at most
    what is left of Content-Length). So the answers owed (``asked``, the unsolicited first
    chunk counted as a whole-packet ask) never add up to more than the body still to come
    (``left``): each ask finds data, none is answered empty or past the body. Only an ask
    sent when nothing is owed may be short (it covers the rest of the body); those sent ahead
    ask for a whole 64 KiB packet, so an answer of any packet size fits its ask. Answers still
    owed when the request ends are read off the wire (``finish``) before the next request's
    packets."""

    __slots__ = ('_conn', 'left', 'asked', 'promised', 'ahead', 'ended', 'sized', 'settled')

    def __init__(self, conn, content_length):
        self._conn = conn
        # False while a pull is under way: the request timeout raises wherever the app's
        # thread is, and a pull cut short leaves unknown which answers are owed and which
        # bytes of them were read (``wire_known``).
        self.settled = True
        self.left = content_length  # None: chunked, length unknown
        self.asked = collections.deque()  # the sizes of the asks whose answers are owed
        self.promised = 0  # their sum
        self.ahead = conn.body_ahead
        self.ended = content_length == 0
        self.sized = not content_length  # the first answer has shown the web server's packets
        if content_length:  # mod_proxy_ajp pushes the first chunk, a packet's worth at most
            self._owe(MAX_BODY_REQUEST)

    def _owe(self, want):
        self.asked.append(want)
        self.promised += want

    def _ask(self):
        """Send the asks that keep the pipe full, once half of those in flight are answered
        (one send for several): one for what is left when nothing is owed, then whole-packet
        asks while the body still to come covers them."""
        asked = self.asked
        if len(asked) > self.ahead // 2:
            return
        if self.left is None:  # chunked: the end is an empty chunk, so one ask at a time
            if not asked:
                self._owe(MAX_BODY_REQUEST)
                self._conn.send([ajp.encode_get_body_chunk(MAX_BODY_REQUEST)])
            return
        room = self.left - self.promised
        asks = []
        while room > 0 and len(asked) < self.ahead and (room >= MAX_BODY_REQUEST or not asked):
            want = min(room, MAX_BODY_REQUEST)
            self._owe(want)
            asks.append(ajp.encode_get_body_chunk(want))
            room -= want
        if asks:
            self._conn.send(asks)

    def _answer(self):
        """The next owed answer, checked against its ask."""
        want = self.asked.popleft()
        self.promised -= want
        try:
            data = self._conn.next_body_chunk()
        except ClientDisconnected:
            self.asked.clear()  # nothing more will come
            self.ended = True
            raise
        if len(data) > want:
            raise AJPError('body chunk of %d bytes where %d were asked for' % (len(data), want))
        if len(data) * self.ahead > AJP_BODY_AHEAD:
            # A web server with larger packets than ours (ProxyIOBufferSize above our
            # packetSize): fewer asks keep the same bytes in flight.
            self.ahead = body_asks_ahead(len(data))
        return data

    @property
    def wire_known(self):
        """Whether the connection's next packets are known: no pull was cut short, or the
        body had ended with nothing owed."""
        return self.settled or (self.ended and not self.asked)

    def __call__(self):
        if self.ended:
            return b''
        if not self.settled:
            # A pull was cut short: nothing more is read from a wire whose state is unknown
            # (an app's error path may read again, and would settle it on a misread).
            raise ClientDisconnected(BODY_READ_INTERRUPTED)
        self.settled = False
        try:
            data = self._pull()
        except ClientDisconnected:
            # Raised with the accounting done (the web server ended the body, or left).
            self.settled = True
            raise
        self.settled = True
        return data

    def _pull(self):
        # The asks ahead go out once the pushed first chunk has shown the web server's packet
        # size: sized by ours, they would hold up to 8 times AJP_BODY_AHEAD in flight from a
        # web server with 64 KiB packets (ProxyIOBufferSize 65536).
        first = not self.sized
        if not first:
            self._ask()
        data = self._answer()
        if not data:
            self.ended = True
            if self.left:
                raise ClientDisconnected('the web server ended the body with %d bytes of '
                                         'Content-Length still to come' % self.left)
            return b''
        if self.left is not None:
            if len(data) > self.left:
                raise AJPError('body chunk of %d bytes where %d remained of Content-Length'
                               % (len(data), self.left))
            self.left -= len(data)
            if not self.left:
                self.ended = True
        if first:
            self.sized = True
            if not self.ended:
                self._ask()
        return data

    def finish(self):
        """Read off the answers still owed (the unsolicited first chunk if the app never
        asked for it, those asked ahead of an app that stopped reading), so the next packet
        on the connection is the next request's. The request is over then: a ``wsgi.input``
        kept past it reads nothing (the next request's packets are not its own)."""
        try:
            while self.asked:
                self._answer()
        finally:
            self.ended = True


class AJPRequest:
    """One AJP request (flup's ``ajp_base.Request``): ``environ``, ``input``,
    ``startResponse(statusCode, statusMsg, headers)`` and ``write(data)``, the names an
    ``error``/``handler`` override uses."""

    def __init__(self, conn):
        self._conn = conn
        self.environ = {}
        self.input = None
        self._headersSent = False
        self.truncated = False  # the app failed after the response began
        self.logger = _logger

    def run(self):
        """Run the handler; on an exception log it and answer the 500 page if nothing was
        sent yet (flup ajp_base.py:480-508; the END_RESPONSE is the connection's)."""
        environ = self.environ
        logger = self.logger
        fastlog.info(logger, '%s %s', environ['REQUEST_METHOD'],
                     fastlog.readable(environ['REQUEST_URI']))
        debug = logger.isEnabledFor(logging.DEBUG)
        if debug:
            start = datetime.datetime.now()
        try:
            self._conn.server.handler(self)
        except ClientDisconnected as exc:
            self.warn_disconnected(exc)
        except Exception as exc:
            if is_peer_gone(exc) or isinstance(exc, AJPError):
                raise  # the connection cannot go on; it logs and closes
            logger.exception('Exception caught from handler')
            if self._headersSent or self._conn.send_broken:  # a packet may be half sent
                self.truncated = True
            else:
                self._conn.server.error(self)
        if debug:
            elapsed = datetime.datetime.now() - start
            logger.debug('%s %s done (%.3f secs)', environ['REQUEST_METHOD'],
                         fastlog.readable(environ['REQUEST_URI']), elapsed.total_seconds())

    def warn_disconnected(self, exc):
        """The one line for a body the web server ended or dropped, naming the request."""
        environ = self.environ
        self.logger.warning('%s %s: %s', environ['REQUEST_METHOD'],
                            fastlog.readable(environ['REQUEST_URI']), exc)

    # -- flup's response API --------------------------------------------------------------

    def startResponse(self, statusCode, statusMsg, headers):
        """Begin the HTTP response: must be called once, before write(). ``statusMsg`` and
        the header names and values are bytes (str is encoded latin-1)."""
        if self._headersSent:
            raise AssertionError('Headers already sent!')
        self.send_head(statusCode, statusMsg, headers, b'', False)

    def write(self, data):
        """Write response body bytes, split into packets the web server accepts."""
        if not self._headersSent:
            raise AssertionError('Headers must be sent first!')
        if isinstance(data, str):
            data = data.encode('latin-1')
        self.send_body(data, False)

    # -- the responder the gateway drives -------------------------------------------------

    def send_head(self, status_code, reason, headers, data, more):
        if isinstance(reason, str):
            reason = reason.encode('latin-1')
        headers = [(n.encode('latin-1') if isinstance(n, str) else n,
                    v.encode('latin-1') if isinstance(v, str) else v) for n, v in headers]
        head = ajp.encode_send_headers(status_code, reason, headers)
        if len(head) > self._conn.packet_size:
            # The web server would refuse the packet and drop the connection; raising here
            # (before anything is sent) gives the app's error path a 500 instead.
            raise ValueError('response headers take %d bytes, more than the %d-byte AJP '
                             'packet (raise packetSize with ProxyIOBufferSize)'
                             % (len(head), self._conn.packet_size))
        buffers = [head]
        if data:
            buffers += _impl.frame_body(data, self._conn.body_chunk)
        self._headersSent = True
        self._conn.send(buffers, more)

    def send_body(self, data, more):
        if data:
            self._conn.send(_impl.frame_body(data, self._conn.body_chunk), more)


class AJPResponder:
    """The gateway's responder for AJP: WSGI's status line becomes SEND_HEADERS' code and
    reason (flup sends the reason as given; so do we)."""

    __slots__ = ('_req',)

    def __init__(self, req):
        self._req = req

    def send_head(self, status, headers, data, more):
        self._req.send_head(int(status[:3]), status[4:], headers, data, more)

    def send_body(self, data, more):
        self._req.send_body(data, more)


class AJPConfig:
    """An AJP13 connection's settings: built once per run() by the server (flup's
    ``packetSize``, in ``BaseAJPServer._connectionConfig``) and shared by every connection it
    serves."""

    __slots__ = ('packet_size', 'body_chunk', 'body_ahead')

    def __init__(self, packet_size=AJP_DEFAULT_PACKET):
        self.packet_size = packet_size
        self.body_chunk = body_chunk_size(packet_size)
        # A web server's body packet of the same size carries its length (2) after the
        # header (4): 8186 bytes at 8 KiB, so sixteen asks in flight.
        self.body_ahead = body_asks_ahead(packet_size - 6)


class AJPConnection(LoggedConnection):
    """A persistent connection from the web server (flup ``ajp_base.Connection``): requests
    one after another, CPING answered between them. ``run()`` returns the requests served."""

    def __init__(self, sock, addr, server, timeout=None, config=None):
        super().__init__(sock, addr, server, timeout, LoggerName)
        self._parser = _impl.AJPParser()
        self._packets = collections.deque()
        if config is None:  # built outside the server's run() (a flup-style jobArgs, a test)
            config = server._connectionConfig()
        self.packet_size = config.packet_size
        self.body_chunk = config.body_chunk
        self.body_ahead = config.body_ahead
        # idle (False) and max_requests (None: set by a prefork child) start at their
        # defaults (connection_state.py).
        # Between requests a kept connection may wait in the threaded mode's parked set
        # instead of a blocked thread; that is also how a reload hands it to the new image.
        self.can_park = True

    # -- packets ------------------------------------------------------------------------------

    def _next_packet(self):
        """The next packet's payload; None when the web server closed between packets."""
        packets = self._packets
        while not packets:
            data = self.recv_some()
            if not data:
                if self._parser.pending:
                    raise AJPError('connection closed inside a packet (%d bytes of it received)'
                                   % self._parser.pending)
                return None
            packets.extend(self._parser.feed(data))
        return packets.popleft()

    def next_body_chunk(self):
        payload = self._next_packet()
        if payload is None:
            raise ClientDisconnected('the web server closed the connection mid-body')
        return _impl.decode_body_chunk(payload)

    # -- the connection loop ----------------------------------------------------------------

    def _serve(self):
        ready = self.parked  # back from the parked set: the socket is readable
        self.parked = False
        while not self.closed:
            # Waiting for the next request: the mode may end or park the wait (a new
            # connection is not idle: its first request is on the way, and only a stop ends
            # it; it does not park either, so its first request costs no extra hand-off).
            if not ready:
                served = self.served
                self.idle = served > 0
                answer = self.on_idle(self, served > 0 and not self._packets
                                      and not self._parser.pending)
                if answer is not WAIT:
                    self.idle = False
                    self.parked = answer is PARK
                    return
            ready = False
            try:
                payload = self._next_packet()
            finally:
                self.idle = False
            if payload is None:
                return
            if not payload:
                raise AJPError('unexpected empty packet')
            kind = payload[0]
            if kind == ajp.PKTTYPE_FWD_REQ:
                if not self._forward_request(payload):
                    return
            elif kind == ajp.PKTTYPE_CPING:
                self.logger.debug('Received PING, sending PONG')
                self.send([ajp.CPONG_PACKET])
            elif kind == ajp.PKTTYPE_SHUTDOWN:
                self.logger.info('Received shutdown request from server')
            elif kind == ajp.PKTTYPE_PING:
                self.logger.debug('Received ping')
            else:
                raise AJPError('unknown packet type 0x%02x (%d bytes) between requests'
                               % (kind, len(payload)))

    def _answer_overloaded(self):
        """A 503 to the first FORWARD_REQUEST (CPINGs before it are answered: the web server
        checks the connection that way), with END_RESPONSE telling it not to reuse the
        connection."""
        while True:
            payload = self._next_packet()
            if not payload:
                return
            if payload[0] == ajp.PKTTYPE_CPING:
                self.send([ajp.CPONG_PACKET])
            elif payload[0] == ajp.PKTTYPE_FWD_REQ:
                break
        _, content_length, chunked, _ = _impl.decode_forward_request(payload)
        if content_length and not chunked:
            self.next_body_chunk()  # the unsolicited first chunk, so the close is clean
        self.send([ajp.encode_send_headers(OVERLOADED_STATUS, OVERLOADED_REASON,
                                           OVERLOADED_HEADERS)]
                  + _impl.frame_body(OVERLOADED_BODY, self.body_chunk)
                  + [ajp.encode_end_response(False)])

    def _forward_request(self, payload):
        """Serve one request; returns False when the connection must close afterwards."""
        environ, content_length, chunked, secret = _impl.decode_forward_request(payload)
        if chunked:
            content_length = None
        elif content_length is None:
            content_length = 0
        req = self.server.requestClass(self)
        req.environ = environ
        body = _BodySource(self, content_length)
        req.input = _impl.InputStream(body)
        if not self.server._isSecretValid(secret):
            self.logger.warning('%s %s: refused, wrong or missing AJP secret',
                                environ.get('REQUEST_METHOD'),
                                fastlog.readable(environ.get('REQUEST_URI', '')))
            req.startResponse(403, b'Forbidden', [(b'Content-Type', b'text/plain'),
                                                  (b'Content-Length', b'10')])
            req.write(b'Forbidden\n')
        else:
            with request_deadline(self._timeout, self._timed_out):
                req.run()
        self.served += 1
        if req.truncated or self.send_broken:
            # No END_RESPONSE: mod_proxy_ajp takes the close for a failed backend and ends
            # the client's response unfinished (``truncated-response-signalled``); after a
            # send cut short (the request timeout), a packet may be half sent.
            body.ended = True
            self.close()
            return False
        if not body.wire_known:
            self._end_unknown_wire(req, body)
            return False
        try:
            body.finish()
        except ClientDisconnected as exc:  # it left while answers were owed: nothing to end
            req.warn_disconnected(exc)
            self.close()
            return False
        # The wire is clean now (the web server sends body chunks only when asked, and every
        # answer owed, the unsolicited first chunk included, was taken), so reuse, unless a
        # prefork child retires or its pool needs the child for a connection that waits.
        reuse = (self.max_requests is None or self.served < self.max_requests) \
            and self.may_keep(self)
        if not req._headersSent:
            # A handler that answered nothing (flup sends END_RESPONSE alone; the web server
            # then reports a bad gateway): say so with an empty 500.
            req.send_head(500, b'Internal Server Error', [(b'Content-Length', b'0')], b'',
                          True)
        self.send([ajp.encode_end_response(reuse)])
        return reuse

    def _end_unknown_wire(self, req, body):
        """End a request whose body pull an exception cut short (the request timeout): the
        web server's answers still to come are not known, so none of them may be read as the
        next request (a client's upload would be taken for one). The response ends with
        END_RESPONSE(reuse=0) and the connection closes, lingering while those answers
        arrive so that the close does not reset the response."""
        body.ended = True  # a wsgi.input kept past the request reads nothing more
        if not req._headersSent:
            req.send_head(500, b'Internal Server Error', [(b'Content-Length', b'0')], b'',
                          True)
        self.send([ajp.encode_end_response(False)])
        self.linger_close()

