"""The AJP13 request body pipeline (ajp_connection._BodySource, limits.AJP_BODY_AHEAD) on both
backends, against a web server that answers as mod_proxy_ajp does: each GET_BODY_CHUNK in
order, with one body packet of what is left, whatever size was asked. As asks arrive it checks
that those unanswered never add up to more than the body left to send. The connection keeps
asks in flight ahead of the app (three besides the unsolicited first chunk at 8 KiB packets,
none at 64 KiB), one at a time for a chunked body; it reads off the answers an app left unread
before the next request; a web server that leaves, lies about the length or sends a malformed
chunk in the pipelined state gets one clear log line, and the server serves on.
"""
import hashlib
import itertools
import logging
import socket
import struct

import pytest

from flupfast.ajp_connection import MAX_BODY_REQUEST
from flupfast.limits import AJP_BODY_AHEAD
from tests.ajp_client import (Response, body_packet, forward_request, packet,
                              read_container_packets, request_bytes)
from tests.unit.connection_harness import echo, peer_closed, read_to_eof
from tests.unit.test_ajp_connection import Harness, use_backend  # noqa: F401 (fixture)

BODY = bytes(range(256)) * 4096  # 1 MiB: many whole-packet asks fit in it
BODY_SIZE = len(BODY)
AHEAD_8K = AJP_BODY_AHEAD // 8186  # asks in flight at 8 KiB packets, the first chunk included
AHEAD_64K = max(1, AJP_BODY_AHEAD // 65530)  # ... at 64 KiB packets


def _lines(caplog):
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == 'ajp-wsgi']


def _digest(body):
    return hashlib.sha256(body).hexdigest().encode() + b' %d' % len(body)


class ApacheLike:
    """The web-server end of one connection, as mod_proxy_ajp behaves: it reads the
    container's packets in order and answers each GET_BODY_CHUNK with one body packet of up to
    ``chunk`` bytes of what is left (``sizes``, cycled, makes some shorter: a slow client),
    whatever size was asked. ``faults`` collects every ask the body left to send could not
    cover; ``batches`` the number of asks unanswered at once, per read of the socket."""

    def __init__(self, sock, chunk=8186, sizes=()):
        self.sock = sock
        self.chunk = chunk
        self.sizes = itertools.cycle(sizes) if sizes else None
        self.buf = b''
        self.faults = []
        self.batches = []

    def post(self, uri, body, **answer):
        """POST ``body`` (Content-Length, the first chunk unsolicited); the Response."""
        self.sock.sendall(request_bytes('POST', uri, body=body, chunk=self.chunk))
        return self.serve(body[self.chunk:], **answer)

    def get(self, uri='/'):
        self.sock.sendall(request_bytes('GET', uri))
        return self.serve(b'')

    def serve(self, rest, answer=None, stop_after=None, chunked=False):
        """Answer asks from ``rest`` up to END_RESPONSE (past a ``chunked`` body with empty
        chunks). ``answer(n, data)`` may replace the n-th answer's packet; after
        ``stop_after`` batches of asks the web server closes its sending side instead of
        answering. None if the container closed first."""
        rest = memoryview(rest)
        packets, owed = [], []
        answered = 0
        stopped = False
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except ConnectionResetError:  # it closed with our answers unread
                data = b''
            if not data:
                return Response(packets) if packets else None
            self.buf += data
            new, self.buf = read_container_packets(self.buf)
            packets += new
            for item in new:
                if item[0] == 'get_body':
                    owed.append(item[1])
                    if sum(owed) > len(rest) and not chunked:
                        self.faults.append((owed[:], len(rest)))
            if owed:
                self.batches.append(len(owed))
                if stopped or (stop_after is not None and len(self.batches) > stop_after):
                    if not stopped:
                        self.sock.shutdown(socket.SHUT_WR)
                        stopped = True
                    owed = []
            while owed:
                owed.pop(0)
                n = min(self.chunk, len(rest), next(self.sizes) if self.sizes else self.chunk)
                if n == 0 and not chunked:
                    self.faults.append('asked past the body')
                wire = body_packet(bytes(rest[:n]))
                rest = rest[n:]
                answered += 1
                try:
                    self.sock.sendall(answer(answered, wire) if answer else wire)
                except (BrokenPipeError, ConnectionResetError):  # it closed on a bad one
                    owed = []
            if new and new[-1][0] == 'end':
                return Response(packets)

    def closed(self):
        return peer_closed(self.sock)


def _connect(app, chunk=8186, **server):
    h = Harness(app, **server)
    return h, ApacheLike(h.connect().sock, chunk)


def _route(environ, start_response):
    """/partial reads one chunk and answers (/partial-raise then fails); anything else is
    the echo."""
    path = environ['PATH_INFO']
    if not path.startswith('/partial'):
        return echo(environ, start_response)
    got = environ['wsgi.input'].read(100)
    if path == '/partial-raise':
        raise RuntimeError('stopped reading')
    start_response('200 OK', [])
    return [b'read %d' % len(got)]


def _pipelined(web, size=BODY_SIZE):
    """The first asks the web server saw came ahead of the app: those sent with the first read
    (the unsolicited chunk one more in flight), maybe with the next read's; as many as
    AJP_BODY_AHEAD and the body of ``size`` bytes still to come allow (every ask sent ahead
    is for a whole 64 KiB packet)."""
    most = min(AHEAD_8K, size // MAX_BODY_REQUEST)
    assert most - 1 <= web.batches[0] <= most
    assert max(web.batches) <= AHEAD_8K


def _check_asks(asks):
    """Whole 64 KiB packets are asked for while the body covers them, then the rest."""
    assert asks == sorted(asks, reverse=True) and asks[0] == MAX_BODY_REQUEST
    assert asks[-1] > 0


@pytest.mark.parametrize('sizes', [(), (1, 1000, 8186, 3, 5000)], ids=['full', 'short'])
def test_an_upload_keeps_asks_in_flight_never_past_the_body(use_backend, sizes):
    """Three asks go out with the first read, before the unsolicited chunk is taken; answers
    of any size up to a packet fit them (mod_proxy_ajp ignores the size asked)."""
    h, web = _connect(echo)
    web.sizes = itertools.cycle(sizes) if sizes else None
    r = web.post('/', BODY)
    assert r.body == _digest(BODY) and r.reuse
    assert web.faults == []
    _pipelined(web)
    _check_asks(r.get_body)
    assert web.get().body == _digest(b'')


@pytest.mark.parametrize('read', ['read7', 'readline', 'read65536'])
def test_small_reads_take_the_whole_body_in_order(use_backend, read):
    def app(environ, start_response):
        stream, parts = environ['wsgi.input'], []
        while True:
            part = {'read7': lambda: stream.read(7), 'readline': stream.readline,
                    'read65536': lambda: stream.read(65536)}[read]()
            if not part:
                break
            parts.append(part)
        start_response('200 OK', [])
        return [_digest(b''.join(parts))]
    body = (b'line of the body\n' * 20000)[:300000]
    h, web = _connect(app)
    r = web.post('/', body)
    assert r.body == _digest(body) and r.reuse and web.faults == []
    _pipelined(web, len(body))


@pytest.mark.parametrize('path, status', [('/partial', 200), ('/partial-raise', 500)])
def test_answers_an_app_left_unread_are_drained_before_the_next_request(use_backend, caplog,
                                                                          path, status):
    """The app reads 100 bytes and answers (or fails): the three asks sent ahead are
    answered by the web server before it reads the response, and read off before the
    END_RESPONSE; the same connection then serves a GET and a whole upload."""
    h, web = _connect(_route)
    with caplog.at_level(logging.ERROR, logger='ajp-wsgi'):
        r = web.post(path, BODY)
    assert (r.status, r.reuse) == (status, True)
    if status == 200:
        assert r.body == b'read 100'
    assert r.get_body == [MAX_BODY_REQUEST] * (AHEAD_8K - 1) and web.faults == []
    assert web.get('/echo').body == _digest(b'')
    assert web.post('/echo', BODY).body == _digest(BODY)
    web.sock.close()
    h.join()
    assert h.served == [3]


def test_64k_packets_ask_no_more_than_fits_ahead(use_backend):
    """At 64 KiB packets AJP_BODY_AHEAD holds two answers: never more asks in flight."""
    h, web = _connect(echo, chunk=65530, packetSize=65536)
    r = web.post('/', BODY)
    assert r.body == _digest(BODY) and web.faults == []
    assert max(web.batches) == AHEAD_64K
    assert len(r.get_body) == -(-(len(BODY) - 65530) // 65530)


def test_a_web_server_with_larger_packets_than_ours_gets_fewer_asks(use_backend):
    """Our packetSize 8192, Apache's ProxyIOBufferSize 65536: the asks ahead wait for the
    pushed first chunk, whose 64 KiB shows the web server's packets, so no more than
    AJP_BODY_AHEAD's worth is ever in flight (sized by our packets: 1 MiB)."""
    h, web = _connect(echo, chunk=65530)
    r = web.post('/', BODY)
    assert r.body == _digest(BODY) and web.faults == []
    assert max(web.batches) <= AHEAD_64K


def test_a_chunked_body_is_still_asked_for_one_chunk_at_a_time(use_backend):
    """No Content-Length: nothing bounds the asks, so one at a time until the empty chunk."""
    h, web = _connect(echo)
    web.sock.sendall(packet(forward_request('POST', '/', headers=[('Transfer-Encoding',
                                                                    'chunked')])))
    body = BODY[:200000]
    r = web.serve(body, chunked=True)
    assert r.body == _digest(body)
    assert set(web.batches) == {1} and r.get_body == [MAX_BODY_REQUEST] * len(r.get_body)


def test_the_web_server_leaving_mid_pipeline_is_one_warning(use_backend, caplog):
    """It closes with asks owed while the app reads: one warning naming the request; the
    server serves the next connection."""
    h, web = _connect(echo)
    with caplog.at_level(logging.WARNING, logger='ajp-wsgi'):
        assert web.post('/up', BODY, stop_after=0).status == 500
        h.join()
    _pipelined(web)
    assert _lines(caplog) == [
        (logging.WARNING, 'POST /up: the web server closed the connection mid-body')]
    assert ApacheLike(h.connect().sock).get().status == 200


def test_the_web_server_leaving_while_answers_are_drained_is_one_warning(use_backend, caplog):
    """The app stopped reading and answered; the web server closes instead of answering the
    asks sent ahead: one warning naming the request, the connection closes (the response,
    held for one send with END_RESPONSE, goes nowhere)."""
    h, web = _connect(_route)
    with caplog.at_level(logging.WARNING, logger='ajp-wsgi'):
        r = web.post('/partial', BODY, stop_after=0)
        assert web.closed()
        h.join()
    assert (r.status, r.reuse, r.get_body) == (None, None, [MAX_BODY_REQUEST] * (AHEAD_8K - 1))
    assert _lines(caplog) == [
        (logging.WARNING, 'POST /partial: the web server closed the connection mid-body')]
    assert h.served == [1]
    assert ApacheLike(h.connect().sock).get().status == 200


def test_a_body_ended_short_mid_pipeline_is_one_warning_and_the_connection_serves_on(
        use_backend, caplog):
    """The web server ends the body with an empty chunk (the client left) while asks are
    owed, and answers those empty too: one warning, the owed answers read off, and the
    connection serves the next request."""
    h, web = _connect(echo)
    with caplog.at_level(logging.WARNING, logger='ajp-wsgi'):
        r = web.post('/up', BODY, answer=lambda n, wire: body_packet(b''))
    left = len(BODY) - 8186
    assert (r.status, r.reuse) == (500, True)
    assert _lines(caplog) == [(logging.WARNING, 'POST /up: the web server ended the body with '
                                                '%d bytes of Content-Length still to come'
                               % left)]
    _pipelined(web)
    assert web.get().body == _digest(b'')


def test_a_malformed_chunk_mid_pipeline_is_one_error_and_the_server_serves_on(use_backend,
                                                                              caplog):
    h, web = _connect(echo)
    bad = packet(struct.pack('>H', 100) + b'short')
    with caplog.at_level(logging.ERROR, logger='ajp-wsgi'):
        web.post('/', BODY, answer=lambda n, wire: bad if n == 2 else wire)
        assert web.closed()
        h.join()
    _pipelined(web)
    assert _lines(caplog) == [
        (logging.ERROR, "Protocol error 'body chunk declares 100 bytes but carries 5'")]
    assert ApacheLike(h.connect().sock).get().status == 200


def _reads_again_when_it_fails(environ, start_response):
    """The echo, behind an error path that logs the body: it reads wsgi.input again."""
    try:
        return echo(environ, start_response)
    except Exception:
        environ['wsgi.input'].read()
        raise


@pytest.mark.parametrize('app', [echo, _reads_again_when_it_fails], ids=['echo', 'reads-again'])
@pytest.mark.parametrize('where', ['before the receive', 'after the receive'])
def test_a_request_timeout_inside_a_body_read_ends_the_connection(use_backend, monkeypatch,
                                                                   where, app):
    """The request timeout raises wherever the app's thread is: inside a body read, which
    answers are still owed and which bytes of them were read is unknown. The 500 ends with
    END_RESPONSE(reuse=0) and the connection closes (found in review: it was kept, and the
    web server's late answer, a client's upload, was read as the next request)."""
    from flupfast.ajp_connection import AJPConnection
    from flupfast.deadline import RequestTerminated
    receive = AJPConnection.next_body_chunk
    calls = []

    def cut_short(conn):
        calls.append(1)
        if len(calls) == 2:  # the app's second read: an ask sent ahead is owed
            if where == 'after the receive':
                receive(conn)  # the answer is taken, and lost with the exception
            raise RequestTerminated()
        return receive(conn)
    monkeypatch.setattr(AJPConnection, 'next_body_chunk', cut_short)
    h, web = _connect(app)
    r = web.post('/', BODY)
    assert (r.status, r.reuse) == (500, False)  # a read after the cut reads nothing
    web.sock.shutdown(socket.SHUT_WR)  # as Apache closes a connection it may not reuse
    assert web.closed()
    h.join()
    assert h.served == [1]


def test_an_ask_cut_short_ends_the_connection_without_another_packet(use_backend, monkeypatch):
    """The request timeout lands while GET_BODY_CHUNKs go out: part of one may be on the
    wire, and nothing may follow it (not the 500, not END_RESPONSE): the connection closes."""
    from tests.unit.send_spy import cut_a_send_short
    # The first batch of GET_BODY_CHUNKs: three bytes of it go out.
    sent = cut_a_send_short(monkeypatch, lambda data: data[4:5] == b'\x06',
                            lambda data: data[:3])
    h, web = _connect(echo)
    web.sock.sendall(request_bytes('POST', '/', body=BODY, chunk=8186))
    assert read_to_eof(web.sock) == sent[0]
    h.join()
