"""The AJP13 connection's edges that its mutation run found untested (tests/README.md): the
"overloaded" refusal, flup's log lines word for word, flup's request API (startResponse and
write: errors, str encoding, sent as called), one send for a list result, a head that fills
the packet exactly, a chunked body asked for once past its end, a handler whose web server
left.
"""
import logging
import re
import socket
import threading

import pytest

from flupfast.limits import AJP_DEFAULT_PACKET
from flupfast.protocols import ajp
from flupfast.serving.job import END, PARK, WAIT
from tests.ajp_client import (
    CPING,
    Response,
    body_packet,
    forward_request,
    packet,
    read_container_packets,
    request_bytes,
)
from tests.unit.connection_harness import SOCKET_TIMEOUT, ConnectionHarness, echo, hello
from tests.unit.deadline_helpers import (  # noqa: F401 (fixture)
    LONG, expire_armed_deadlines, stuck_app)
from tests.unit.test_ajp_connection import Harness, WebServer, use_backend  # noqa: F401 (fixture)
from tests.unit.send_spy import spy_sends


def _lines(caplog):
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == 'ajp-wsgi']


def _read_packets(sock, until):
    """The container's packets until one of kind ``until`` (or EOF)."""
    buf, packets = b'', []
    while not packets or packets[-1][0] != until:
        data = sock.recv(1 << 16)
        if not data:
            break
        buf += data
        new, buf = read_container_packets(buf)
        packets += new
    return packets


# -- the refusal when no worker is free --------------------------------------------------------

@pytest.mark.parametrize('wire', [
    CPING + request_bytes('POST', '/', body=b'b' * 100),
    request_bytes('GET', '/'),
    packet(forward_request('POST', '/', headers=[('Transfer-Encoding', 'chunked')])),
], ids=['cping-then-body', 'get', 'chunked'])
def test_overloaded_answers_503_without_reuse_and_closes_cleanly(use_backend, wire):
    """CPINGs first are answered; the first request gets a 503 and END_RESPONSE reuse=0.
    The unsolicited first body chunk is taken (a close with it unread resets the web
    server's read); none is waited for where none comes (no body, or a chunked one)."""
    h = Harness(hello)
    ours, theirs = socket.socketpair()
    ours.settimeout(SOCKET_TIMEOUT)
    refusing = threading.Thread(
        target=h.connection_class(theirs, '', h.server, None).refuse_overloaded, daemon=True)
    with ours:
        ours.sendall(wire)  # the web server's write side stays open until the answer came
        refusing.start()
        packets = _read_packets(ours, 'end')
        ours.shutdown(socket.SHUT_WR)  # ends the lingering close's wait
        assert ours.recv(1) == b''  # closed, not reset
        refusing.join(SOCKET_TIMEOUT)
    r = Response(packets)
    assert r.cpongs == (1 if wire.startswith(CPING) else 0)
    assert (r.status, r.reason, r.reuse) == (503, b'Service Unavailable', False)
    assert r.header(b'Retry-After') == b'1' and r.body


def test_overloaded_before_any_request_closes_quietly(use_backend):
    h = Harness(hello)
    ours, theirs = socket.socketpair()
    ours.settimeout(SOCKET_TIMEOUT)
    with ours:
        ours.shutdown(socket.SHUT_WR)
        h.connection_class(theirs, '', h.server, None).refuse_overloaded()
        assert ours.recv(1) == b''


# -- flup's log lines --------------------------------------------------------------------------

def test_request_lines_are_logged_word_for_word(use_backend, caplog):
    h = Harness(hello)
    with caplog.at_level(logging.DEBUG, logger='ajp-wsgi'):
        web = h.connect()
        web.exchange(request_bytes('GET', '/a%20b'))
        web.sock.close()
        h.join()
    lines = [line for level, line in _lines(caplog) if 'Connection' not in line]
    assert lines[0] == 'GET /a%20b'
    assert re.fullmatch(r'GET /a%20b done \(\d+\.\d{3} secs\)', lines[-1]), lines


def test_the_request_line_is_logged_at_info(use_backend, caplog):
    h = Harness(hello)
    with caplog.at_level(logging.INFO, logger='ajp-wsgi'):
        web = h.connect()
        web.exchange(request_bytes('GET', '/x'))
        web.sock.close()
        h.join()
    assert _lines(caplog) == [(logging.INFO, 'GET /x')]


def test_a_body_ended_short_is_one_warning_naming_the_request(use_backend, caplog):
    """mod_proxy_ajp ends a body with an empty chunk when the client left."""
    h = Harness(echo)
    web = h.connect()
    wire = packet(forward_request('POST', '/up', headers=[('Content-Length', '1000')]))
    with caplog.at_level(logging.WARNING, logger='ajp-wsgi'):
        web.sock.sendall(wire + body_packet(b'x' * 100))
        assert read_container_packets(web.sock.recv(100))[0] == [('get_body', 900)]
        web.sock.sendall(body_packet(b''))
        web.sock.shutdown(socket.SHUT_WR)
        h.join()
    assert _lines(caplog) == [(logging.WARNING, 'POST /up: the web server ended the body with '
                                                '900 bytes of Content-Length still to come')]


def test_the_web_server_closing_mid_body_is_one_warning_word_for_word(use_backend, caplog):
    h = Harness(echo)
    web = h.connect()
    with caplog.at_level(logging.WARNING, logger='ajp-wsgi'):
        web.sock.sendall(request_bytes('POST', '/up', body=b'z' * 20000))
        web.sock.shutdown(socket.SHUT_WR)
        h.join()
    assert _lines(caplog) == [
        (logging.WARNING, 'POST /up: the web server closed the connection mid-body')]


@pytest.mark.parametrize('extra, message', [
    (body_packet(b'toolong'), 'body chunk of 7 bytes where 3 remained of Content-Length'),
], ids=['past-content-length'])
def test_a_body_chunk_past_the_length_is_one_error_word_for_word(use_backend, caplog, extra,
                                                                message):
    h = Harness(echo)
    web = h.connect()
    wire = packet(forward_request('POST', '/', headers=[('Content-Length', '3')]))
    with caplog.at_level(logging.ERROR, logger='ajp-wsgi'):
        web.sock.sendall(wire + extra)
        assert web.closed()
        h.join()
    assert _lines(caplog) == [(logging.ERROR, "Protocol error '%s'" % message)]


def test_a_body_chunk_larger_than_asked_for_is_one_error_word_for_word(use_backend, caplog):
    h = Harness(echo)
    web = h.connect()
    wire = packet(forward_request('POST', '/', headers=[('Content-Length', '10000')]))
    with caplog.at_level(logging.ERROR, logger='ajp-wsgi'):
        web.sock.sendall(wire + body_packet(b'a' * 8000))
        assert read_container_packets(web.sock.recv(100))[0] == [('get_body', 2000)]
        web.sock.sendall(body_packet(b'b' * 3000))
        assert web.closed()
        h.join()
    assert _lines(caplog) == [
        (logging.ERROR, "Protocol error 'body chunk of 3000 bytes where 2000 were asked for'")]


# -- flup's request API: a handler override --------------------------------------------------

def _serve_with_handler(handler, wire=None):
    """Run one connection whose server's ``handler`` is ``handler``; returns our socket."""
    h = Harness(hello)
    h.server.handler = handler
    web = h.connect()
    web.sock.sendall(wire or request_bytes('GET', '/'))
    return h, web


def test_start_response_and_write_misuse_raise_flups_assertions(use_backend):
    errors = []

    def handler(request):
        try:
            request.write(b'early')
        except AssertionError as exc:
            errors.append(str(exc))
        request.startResponse(200, 'OK', [])
        try:
            request.startResponse(200, 'OK', [])
        except AssertionError as exc:
            errors.append(str(exc))
    h, web = _serve_with_handler(handler)
    r = Response(_read_packets(web.sock, 'end'))
    web.sock.close()
    h.join()
    assert r.status == 200
    assert errors == ['Headers must be sent first!', 'Headers already sent!']


def test_str_reason_headers_and_body_are_sent_latin_1(use_backend):
    def handler(request):
        request.startResponse(200, 'Ol\xe9', [('X-N\xe9', 'v\xe9')])
        request.write('caf\xe9')
    h, web = _serve_with_handler(handler)
    r = Response(_read_packets(web.sock, 'end'))
    web.sock.close()
    h.join()
    assert (r.reason, r.headers, r.body) == (b'Ol\xe9', [(b'X-N\xe9', b'v\xe9')], b'caf\xe9')


def test_start_response_and_write_are_sent_as_called(use_backend):
    """Each call leaves at once: the handler goes on only once the web server has received
    what the previous call sent, which a held send never delivers."""
    got_head, got_body = threading.Event(), threading.Event()

    def handler(request):
        request.startResponse(200, b'OK', [])
        if got_head.wait(SOCKET_TIMEOUT):
            request.write(b'first')
            if got_body.wait(SOCKET_TIMEOUT):
                request.write(b' second')
    h, web = _serve_with_handler(handler)
    assert [p[0] for p in _read_packets(web.sock, 'headers')] == ['headers']
    got_head.set()
    assert _read_packets(web.sock, 'body') == [('body', b'first')]
    got_body.set()
    r = Response(_read_packets(web.sock, 'end'))
    web.sock.close()
    h.join()
    assert r.body == b' second' and r.reuse


def test_a_handler_whose_web_server_left_ends_the_connection_quietly(use_backend, caplog):
    """EPIPE from the handler is the web server going away: the connection ends, no
    traceback, no error page."""
    closed = threading.Event()

    def handler(request):
        assert closed.wait(SOCKET_TIMEOUT)
        request.startResponse(200, b'OK', [])
        request.write(b'x' * (1 << 20))
    with caplog.at_level(logging.DEBUG, logger='ajp-wsgi'):
        h, web = _serve_with_handler(handler)
        web.sock.close()
        closed.set()
        h.join()
    assert [line for line in _lines(caplog) if line[0] >= logging.WARNING] == []


# -- what leaves in one send, and the packet's limit -------------------------------------------

def test_a_list_result_leaves_in_one_send(use_backend, monkeypatch):
    """SEND_HEADERS, every body chunk and END_RESPONSE of a list result: one send."""
    sends = spy_sends(monkeypatch)

    def app(environ, start_response):
        start_response('200 OK', [])
        return [b'one ', b'two ', b'three']
    h = Harness(app)
    web = h.connect()
    r = web.exchange(request_bytes('GET', '/'))
    web.sock.close()
    h.join()
    assert r.body == b'one two three' and r.reuse
    assert len(sends) == 1, sends


@pytest.mark.parametrize('over', [0, 1])
def test_a_head_filling_the_packet_exactly_is_sent(use_backend, caplog, over):
    """SEND_HEADERS of exactly the packet size goes out; one byte more is the 500 and the
    error says why."""
    def head(fill):
        return ajp.encode_send_headers(200, b'OK', [(b'X-Fill', fill.encode()),
                                                    (b'Content-Length', b'1')])
    fill = 'f' * (AJP_DEFAULT_PACKET - len(head('')) + over)
    assert len(head(fill)) == AJP_DEFAULT_PACKET + over

    def app(environ, start_response):
        start_response('200 OK', [('X-Fill', fill), ('Content-Length', '1')])
        return [b'x']
    h = Harness(app)
    with caplog.at_level(logging.ERROR, logger='ajp-wsgi'):
        web = h.connect()
        r = web.exchange(request_bytes('GET', '/'))
        web.sock.close()
        h.join()
    if not over:
        assert r.status == 200 and r.header(b'X-Fill') == fill.encode()
    else:
        assert r.status == 500
        (record,) = [rec for rec in caplog.records if rec.exc_info]
        assert str(record.exc_info[1]) == (
            'response headers take 8193 bytes, more than the 8192-byte AJP packet (raise '
            'packetSize with ProxyIOBufferSize)')


def test_a_chunked_body_is_asked_for_once_past_its_end(use_backend):
    """After the web server's empty chunk ends a chunked body, reading on asks for nothing
    more: a GET_BODY_CHUNK then would be answered by nothing, or taken for the next
    request's."""
    def app(environ, start_response):
        stream = environ['wsgi.input']
        data = stream.read()
        more = stream.read(10) + stream.read()
        start_response('200 OK', [])
        return [b'%d %d' % (len(data), len(more))]
    h = Harness(app)
    web = h.connect()
    wire = packet(forward_request('POST', '/', headers=[('Transfer-Encoding', 'chunked')]))
    r = web.exchange(wire, b'c' * 20000, end_body=True)
    assert r.body == b'20000 0'
    assert len(r.get_body) == 4  # 8186 + 8186 + 3628, then the empty chunk
    assert web.exchange(request_bytes('GET', '/')).status == 200


# -- the connection's own answers ------------------------------------------------------------

def test_a_wrong_secret_is_flups_403_word_for_word(use_backend, caplog):
    h = Harness(hello, secret='s3cret')
    web = h.connect()
    with caplog.at_level(logging.WARNING, logger='ajp-wsgi'):
        r = web.exchange(request_bytes('GET', '/x', attributes=[('secret', 'wrong')]))
        web.sock.close()
        h.join()
    assert (r.status, r.reason, r.headers, r.body, r.reuse) == (
        403, b'Forbidden', [(b'content-type', b'text/plain'), (b'content-length', b'10')],
        b'Forbidden\n', True)
    assert _lines(caplog) == [(logging.WARNING, 'GET /x: refused, wrong or missing AJP secret')]


def test_a_handler_answering_nothing_gets_an_empty_500_in_one_send(use_backend, monkeypatch):
    """flup sends END_RESPONSE alone (the web server then reports a bad gateway); we send an
    empty 500 with it, in one send."""
    sends = spy_sends(monkeypatch)
    h, web = _serve_with_handler(lambda request: None)
    r = Response(_read_packets(web.sock, 'end'))
    web.sock.close()
    h.join()
    assert (r.status, r.reason, r.headers, r.body, r.reuse) == (
        500, b'Internal Server Error', [(b'content-length', b'0')], b'', True)
    # SEND_HEADERS and END_RESPONSE (reuse) together in one send
    assert len(sends) == 1 and sends[0].endswith(b'AB\x00\x02\x05\x01'), sends


def test_a_failed_response_counts_as_served(use_backend, caplog):
    """A request whose app failed mid-response still counts against maxRequests."""
    def app(environ, start_response):
        start_response('200 OK', [])
        if environ['PATH_INFO'] == '/fail':
            yield b'first'
            raise RuntimeError('late')
        yield b'fine'
    h = Harness(app)
    web = h.connect()
    with caplog.at_level(logging.CRITICAL, logger='ajp-wsgi'):
        assert web.exchange(request_bytes('GET', '/ok')).body == b'fine'
        assert web.exchange(request_bytes('GET', '/fail')) is None or web.closed()
        h.join()
    assert h.served == [2]


def test_a_request_past_its_timeout_is_reported_and_answered_500(use_backend, caplog):
    """The fork servers' per-request ``timeout``: "Timeout Exceeded" on ``ajp-wsgi`` and
    TimeoutException in the app, which gets the 500 page. The app loops until it comes."""
    started = threading.Event()
    h = Harness(stuck_app(started))
    ours, theirs = socket.socketpair()
    ours.settimeout(SOCKET_TIMEOUT)
    conn = h.connection_class(theirs, '', h.server, LONG)
    with caplog.at_level(logging.ERROR, logger='ajp-wsgi'):
        thread = threading.Thread(target=conn.run, daemon=True)
        thread.start()
        with ours:
            ours.sendall(request_bytes('GET', '/'))
            assert started.wait(SOCKET_TIMEOUT)
            expire_armed_deadlines()
            r = Response(_read_packets(ours, 'end'))
        thread.join(SOCKET_TIMEOUT)
    assert r.status == 500
    lines = [line for _, line in _lines(caplog)]
    assert lines[0] == 'Timeout Exceeded' and 'in stuck' in lines[1], lines


def test_packets_between_requests_are_logged_word_for_word(use_backend, caplog):
    """CPING, SHUTDOWN and PING as flup logs them; over TCP the connection's start and end."""
    h = Harness(hello)
    with caplog.at_level(logging.DEBUG, logger='ajp-wsgi'):
        web = WebServer(ConnectionHarness.connect(h, tcp=True))
        address = '%s:%d' % web.sock.getsockname()
        assert web.exchange(CPING).cpongs == 1
        web.sock.sendall(packet(b'\x07') + packet(b'\x08'))
        assert web.exchange(request_bytes('GET', '/')).status == 200
        web.sock.close()
        h.join()
    lines = [line for _, line in _lines(caplog)]
    assert lines[:4] == ['Connection starting up (%s)' % address, 'Received PING, sending PONG',
                         'Received shutdown request from server', 'Received ping']
    assert lines[-1] == 'Connection shutting down (%s)' % address


@pytest.mark.parametrize('wire, message', [
    (packet(b''), 'unexpected empty packet'),
    (packet(b'\x42\x00'), 'unknown packet type 0x42 (2 bytes) between requests'),
    (packet(b'\x02\x00\x00')[:6], 'connection closed inside a packet (6 bytes of it received)'),
], ids=['empty', 'unknown', 'cut'])
def test_bad_packets_are_one_error_word_for_word(use_backend, caplog, wire, message):
    h = Harness(hello)
    web = h.connect()
    with caplog.at_level(logging.ERROR, logger='ajp-wsgi'):
        web.sock.sendall(wire)
        web.sock.shutdown(socket.SHUT_WR)
        assert web.closed()
        h.join()
    assert _lines(caplog) == [(logging.ERROR, "Protocol error '%s'" % message)]


# -- the wait between requests (serving/job.py's contract) ---------------------------------------

def _contract_connection(app, answers):
    """A connection over a socketpair whose ``on_idle`` records (job is conn, idle, parkable)
    and answers from ``answers`` (then WAIT); returns (conn, our WebServer end, seen, busy)."""
    seen, busy = [], []
    h = Harness(app)
    ours, theirs = socket.socketpair()
    ours.settimeout(SOCKET_TIMEOUT)
    conn = h.connection_class(theirs, '', h.server, None)
    answers = list(answers)

    def on_idle(job, parkable):
        seen.append((job is conn, job.idle, parkable))
        return answers.pop(0) if answers else WAIT
    conn.on_idle = on_idle

    def recording(environ, start_response):
        busy.append(conn.idle)
        return app(environ, start_response)
    h.server.application = recording
    return conn, WebServer(ours), seen, busy


def test_a_wait_between_requests_is_idle_and_parkable_only_with_nothing_buffered(use_backend):
    """A new connection's first wait is not idle (its request is on the way) and not
    parkable; later waits are idle, and parkable unless the next request is already read."""
    conn, web, seen, busy = _contract_connection(hello, [])
    assert not conn.idle  # a new connection's first request is on the way: a stop waits
    thread = threading.Thread(target=lambda: busy.append(('served', conn.run())), daemon=True)
    thread.start()
    assert web.exchange(request_bytes('GET', '/')).status == 200
    web.sock.sendall(request_bytes('GET', '/') * 2)  # one receive takes both
    packets = _read_packets(web.sock, 'end')
    while [p[0] for p in packets].count('end') < 2:
        packets += _read_packets(web.sock, 'end')
    assert [p[1] for p in packets if p[0] == 'headers'] == [200, 200]
    web.sock.close()
    thread.join(SOCKET_TIMEOUT)
    assert seen == [(True, False, False), (True, True, True), (True, True, False),
                    (True, True, True)]
    assert busy == [False, False, False, ('served', 3)] and not conn.idle
    assert conn.can_park and not conn.idle  # a mode may park an AJP13 connection


def test_a_parked_connection_resumes_without_asking_again(use_backend):
    """PARK: run() returns with ``parked`` set and the socket open; run() again (the socket
    is readable) reads the request at once. END: the connection closes."""
    conn, web, seen, busy = _contract_connection(hello, [WAIT, PARK, END])
    web.sock.sendall(request_bytes('GET', '/'))
    assert conn.run() == 1 and conn.parked and not conn.idle
    assert Response(_read_packets(web.sock, 'end')).status == 200
    web.sock.sendall(request_bytes('GET', '/'))
    assert conn.run() == 2 and not conn.parked and not conn.idle
    assert Response(_read_packets(web.sock, 'end')).status == 200
    assert web.closed()
    assert seen == [(True, False, False), (True, True, True), (True, True, True)]
    assert busy == [False, False]


@pytest.mark.parametrize('read_first', [0, 10])
def test_an_input_kept_past_its_request_takes_nothing_of_the_next(use_backend, read_first):
    """An app that keeps wsgi.input and reads it during the next request on the same kept
    connection gets at most its own request's bytes already received: the next request's body
    packets stay the next request's (found in review: the old stream asked the web server for
    more and took them, and the next request failed)."""
    kept = {}

    def app(environ, start_response):
        if environ['PATH_INFO'] == '/first':
            kept['input'] = environ['wsgi.input']
            environ['wsgi.input'].read(read_first)
            body = b'first'
        else:
            stale = kept['input'].read(30000)
            own = environ['wsgi.input'].read()
            body = b'%d %d %d' % (stale.count(b'B'), len(own), own.count(b'B'))
        start_response('200 OK', [('Content-Type', 'text/plain')])
        return [body]

    h = Harness(app)
    web = h.connect()
    first = b'A' * 20000  # more than the first chunk: the rest is never asked for
    assert web.exchange(request_bytes('POST', '/first', body=first), first[8186:]).body \
        == b'first'
    second = b'B' * 30000
    answer = web.exchange(request_bytes('POST', '/second', body=second), second[8186:])
    assert (answer.status, answer.body, answer.reuse) == (200, b'0 30000 30000', True)
    web.sock.close()
    h.join()
