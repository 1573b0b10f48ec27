"""The FastCGI connection's edges that its mutation run found untested (tests/README.md): the
"overloaded" refusal (spec 5.5), what an input stream's read raises when the web server aborts
or leaves (the message names the stream), and the peer named in the protocol-error line.
"""
import errno
import logging
import socket
import threading
import time

import pytest

from flupfast.protocols import fastcgi as f
from tests.fcgi_client import read_response, request_bytes
from tests.unit.connection_harness import SOCKET_TIMEOUT, hello, read_to_eof, read_until_reset, tcp_pair
from tests.unit.deadline_helpers import (  # noqa: F401 (fixture)
    LONG, expire_armed_deadlines, stuck_app)
from tests.unit.test_fastcgi_connection import Harness, use_backend  # noqa: F401 (fixture)
from tests.unit.send_spy import spy_sends

# -- the refusal when no worker is free --------------------------------------------------------

def test_overloaded_answers_503_then_end_request_overloaded(use_backend):
    """GET_VALUES before the request is answered; the request gets a 503 on STDOUT (nginx and
    Apache ignore the protocol status), the empty STDOUT, END_REQUEST(FCGI_OVERLOADED)."""
    h = Harness(hello)
    ours, theirs = socket.socketpair()
    ours.settimeout(SOCKET_TIMEOUT)
    names = f.encode_params([('FCGI_MPXS_CONNS', '')])
    refusing = threading.Thread(
        target=h.connection_class(theirs, None, h.server, None).refuse_overloaded, daemon=True)
    with ours:
        ours.sendall(f.encode_record(f.FCGI_GET_VALUES, 0, names)
                     + request_bytes('/', request_id=5))
        refusing.start()
        resp = read_response(ours, request_id=5)
        ours.shutdown(socket.SHUT_WR)  # ends the lingering close's wait
        assert read_to_eof(ours) == b''
        refusing.join(SOCKET_TIMEOUT)
    assert resp.end == (0, f.FCGI_OVERLOADED)
    assert resp.records == [f.FCGI_GET_VALUES_RESULT, f.FCGI_STDOUT, f.FCGI_STDOUT,
                            f.FCGI_END_REQUEST]
    assert f.decode_params(resp.other[0][2]) == {'FCGI_MPXS_CONNS': '0'}
    assert resp.status == 503 and resp.header('Retry-After') == '1'


def test_overloaded_before_any_request_closes_quietly(use_backend):
    h = Harness(hello)
    ours, theirs = socket.socketpair()
    ours.settimeout(SOCKET_TIMEOUT)
    with ours:
        ours.shutdown(socket.SHUT_WR)
        h.connection_class(theirs, None, h.server, None).refuse_overloaded()
        assert read_to_eof(ours) == b''


# -- what a read raises when the input cannot end ------------------------------------------------

def _reading_handler(stream_name, seen, read=True):
    """A flup-style handler reading ``request.stdin`` or ``request.data`` to the end; records
    what the read raised."""
    def handler(request):
        try:
            getattr(request, stream_name).read()
        except Exception as exc:
            seen.append((type(exc).__name__, str(exc)))
        return f.FCGI_REQUEST_COMPLETE, 0
    return handler


@pytest.mark.parametrize('multiplexed', [False, True], ids=['one', 'multiplexed'])
@pytest.mark.parametrize('stream_name, record_type, name', [
    ('stdin', f.FCGI_STDIN, 'STDIN'), ('data', f.FCGI_DATA, 'DATA')])
def test_an_abort_mid_stream_names_the_stream(use_backend, stream_name, record_type, name,
                                              multiplexed):
    seen = []
    h = Harness(hello, multiplexed=multiplexed)
    h.server.handler = _reading_handler(stream_name, seen)
    head, _ = request_bytes('/', body=b'x' * 10, role=f.FCGI_FILTER, split=True)
    with h.connect() as sock:
        sock.sendall(head + f.encode_record(record_type, 1, b'part'))
        sock.sendall(f.encode_record(f.FCGI_ABORT_REQUEST, 1))
        assert read_response(sock).end == (0, f.FCGI_REQUEST_COMPLETE)
    h.join()
    assert seen == [('ClientDisconnected', 'the web server aborted the request '
                     '(FCGI_ABORT_REQUEST) before the end of FCGI_%s' % name)]


@pytest.mark.parametrize('stream_name, record_type, name', [
    ('stdin', f.FCGI_STDIN, 'STDIN'), ('data', f.FCGI_DATA, 'DATA')])
def test_a_web_server_gone_mid_stream_names_the_stream(use_backend, stream_name, record_type,
                                                       name):
    seen = []
    h = Harness(hello)
    h.server.handler = _reading_handler(stream_name, seen)
    head, _ = request_bytes('/', body=b'x' * 10, role=f.FCGI_FILTER, split=True)
    with h.connect() as sock:
        sock.sendall(head + f.encode_record(record_type, 1, b'part'))
        sock.shutdown(socket.SHUT_WR)
        read_to_eof(sock)
    h.join()
    assert seen == [('ClientDisconnected', 'the web server closed the connection before the '
                     'end of FCGI_%s' % name)]


# -- the peer in the log line ------------------------------------------------------------------

def _tcp6_pair():
    with socket.create_server(('::1', 0), family=socket.AF_INET6) as listener:
        ours = socket.create_connection(listener.getsockname()[:2])
        theirs, address = listener.accept()
    return ours, theirs, address


@pytest.mark.parametrize('tcp', ['tcp', 'tcp6', ''], ids=['tcp', 'tcp6', 'unix'])
def test_a_protocol_error_names_the_peer(use_backend, caplog, tcp):
    """host:port over TCP (an IPv6 peer's address is a 4-tuple), else 'unix socket'."""
    h = Harness(hello)
    if tcp:
        ours, theirs, address = tcp_pair() if tcp == 'tcp' else _tcp6_pair()
        peer = '%s:%s' % address[:2]
    else:
        (ours, theirs), peer = socket.socketpair(), 'unix socket'
    ours.settimeout(SOCKET_TIMEOUT)
    with caplog.at_level(logging.ERROR, logger='flupfast'):
        thread = threading.Thread(target=h.connection_class(theirs, address if tcp else None,
                                                            h.server, None).run, daemon=True)
        thread.start()
        with ours:
            ours.sendall(f.encode_begin_request(1) + f.encode_begin_request(1))
            read_to_eof(ours)
        thread.join(SOCKET_TIMEOUT)
    assert [r.getMessage() for r in caplog.records if r.name == 'flupfast'] == [
        'FastCGI protocol error from %s: BEGIN_REQUEST for request 1, which is already '
        'active; closing the connection' % peer]


# -- the streams through flup's request API ------------------------------------------------------

def _handler_response(handler, **kw):
    h = Harness(hello, **kw)
    h.server.handler = handler
    resp = h.request('/')
    h.join()
    return resp


def test_stdout_flush_and_close_by_the_handler(use_backend):
    """``request.stdout.flush()`` and ``close()`` (flup's stream API): the stream's end (the
    empty STDOUT record) is sent once, at close, not again at the request's end."""
    def handler(request):
        request.stdout.write(b'Status: 200 OK\r\n\r\nbody')
        request.stdout.flush()
        request.stdout.close()
        return f.FCGI_REQUEST_COMPLETE, 0
    resp = _handler_response(handler)
    assert resp.body == b'body' and resp.end == (0, f.FCGI_REQUEST_COMPLETE)
    assert resp.records == [f.FCGI_STDOUT, f.FCGI_STDOUT, f.FCGI_END_REQUEST]


def test_stderr_held_writes_are_flushed_joined(use_backend):
    def handler(request):
        request.stderr.write('caf\xe9 ')
        request.stderr.write(b'and bytes')
        request.stderr.flush()
        request.stdout.write(b'Status: 200 OK\r\n\r\n')
        return f.FCGI_REQUEST_COMPLETE, 0
    resp = _handler_response(handler)
    assert bytes(resp.stderr) == 'caf\xe9 and bytes'.encode('utf-8')
    assert resp.records == [f.FCGI_STDERR, f.FCGI_STDOUT, f.FCGI_STDOUT, f.FCGI_STDERR,
                            f.FCGI_END_REQUEST]


def test_stderr_held_to_the_end_is_sent_and_closed(use_backend):
    """Held stderr leaves at the request's end, followed by its empty closing record."""
    def handler(request):
        request.stdout.write(b'Status: 200 OK\r\n\r\n')
        request.stderr.write(b'held')
        return f.FCGI_REQUEST_COMPLETE, 0
    resp = _handler_response(handler)
    assert bytes(resp.stderr) == b'held'
    assert resp.records == [f.FCGI_STDOUT, f.FCGI_STDOUT, f.FCGI_STDERR, f.FCGI_STDERR,
                            f.FCGI_END_REQUEST]


def test_a_request_with_no_output_is_end_request_alone(use_backend):
    """Nothing written on either stream: no stream's closing record (spec 5.3: a stream is
    closed only if it was opened), END_REQUEST alone."""
    resp = _handler_response(lambda request: (f.FCGI_UNKNOWN_ROLE, 0))
    assert resp.records == [f.FCGI_END_REQUEST] and resp.end == (0, f.FCGI_UNKNOWN_ROLE)


@pytest.mark.parametrize('request_id', [1, 64, 65, 777])
def test_the_usual_end_carries_the_request_id(use_backend, request_id):
    """The usual end (output, no stderr) is prebuilt per request id: any id gets its own."""
    h = Harness(hello)
    with h.connect() as sock:
        sock.sendall(request_bytes('/', request_id=request_id))
        resp = read_response(sock, request_id=request_id)
    h.join()
    assert resp.body == b'Hello world!\n' and resp.end == (0, f.FCGI_REQUEST_COMPLETE)
    assert resp.records == [f.FCGI_STDOUT, f.FCGI_STDOUT, f.FCGI_END_REQUEST]


# -- ending connections --------------------------------------------------------------------------

def test_a_multiplexed_connection_ends_after_its_last_request_without_keep_conn(use_backend):
    """The web server keeps its side open: the connection's reading thread is woken and
    closes once the last request without KEEP_CONN has ended."""
    h = Harness(hello, multiplexed=True)
    with h.connect() as sock:
        sock.sendall(request_bytes('/', keep_conn=False))
        assert read_response(sock).body == b'Hello world!\n'
        assert read_to_eof(sock) == b''
        h.join()


def test_a_failed_response_resets_once_the_input_has_ended(use_backend, monkeypatch):
    """The drain before the reset stops at the end of STDIN, not at its time limit."""
    from flupfast import connection as connection_module
    monkeypatch.setattr(connection_module, 'RESET_DRAIN_SECONDS', 60)

    def late(environ, start_response):
        start_response('200 OK', [])
        yield b'first'
        raise RuntimeError('late')
    h = Harness(late)
    with h.connect(tcp=True) as sock:
        sock.sendall(request_bytes('/', body=b'p' * 1000, keep_conn=True))
        _, reset = read_until_reset(sock)  # a socket timeout: the drain went on
    h.join()
    assert reset


# -- the request's end as the handler reports it ---------------------------------------------------

@pytest.mark.parametrize('protocol_status, app_status', [
    (f.FCGI_REQUEST_COMPLETE, 1), (f.FCGI_OVERLOADED, 0)], ids=['app-status', 'protocol'])
def test_end_request_carries_the_handlers_statuses_after_output(use_backend, protocol_status,
                                                                app_status):
    def handler(request):
        request.stdout.write(b'Status: 200 OK\r\n\r\nbody')
        return protocol_status, app_status
    resp = _handler_response(handler)
    assert resp.body == b'body' and resp.end == (app_status, protocol_status)


def test_a_handler_raising_epipe_ends_the_request_quietly(use_backend):
    """EPIPE from a handler is the web server going away: END_REQUEST alone, no traceback
    on STDERR, no error page."""
    def handler(request):
        raise BrokenPipeError(errno.EPIPE, 'gone')
    resp = _handler_response(handler)
    assert resp.records == [f.FCGI_END_REQUEST] and resp.end == (0, f.FCGI_REQUEST_COMPLETE)


def test_a_request_past_its_timeout_is_reported_on_stderr_and_answered_500(use_backend):
    """The fork servers' per-request ``timeout``: "Timeout Exceeded" and the stack go to the
    request's STDERR (flup's), TimeoutException into the app, which gets the 500 page. The
    app loops until the exception comes."""
    started = threading.Event()
    h = Harness(stuck_app(started))
    ours, theirs = socket.socketpair()
    conn = h.connection_class(theirs, None, h.server, LONG)
    thread = threading.Thread(target=conn.run, daemon=True)
    thread.start()
    with ours:
        ours.sendall(request_bytes('/'))
        assert started.wait(SOCKET_TIMEOUT)
        expire_armed_deadlines()
        resp = read_response(ours)
    thread.join(SOCKET_TIMEOUT)
    assert resp.status == 500
    assert resp.stderr.startswith(b'Timeout Exceeded\n') and b'in stuck' in resp.stderr


def test_a_multiplexed_request_ending_after_the_web_server_left_is_quiet(use_backend,
                                                                        monkeypatch):
    """The END_REQUEST send fails (EPIPE): the request's thread ends quietly, its spools
    released, no exception escapes the thread."""
    escaped = []
    monkeypatch.setattr(threading, 'excepthook', lambda args: escaped.append(args.exc_value))
    closed = threading.Event()

    def handler(request):
        closed.wait(SOCKET_TIMEOUT)
        return f.FCGI_REQUEST_COMPLETE, 0
    h = Harness(hello, multiplexed=True)
    h.server.handler = handler
    sock = h.connect()
    sock.sendall(request_bytes('/', keep_conn=True))
    sock.close()
    closed.set()
    h.join()
    assert escaped == []


# -- how many requests a connection served, and how it closes -------------------------------------

def test_served_counts_every_request_and_max_requests_ends_the_connection(use_backend):
    h = Harness(hello)
    with h.connect() as sock:
        for _ in range(2):
            sock.sendall(request_bytes('/', keep_conn=True))
            assert read_response(sock).status == 200
    h.join()
    with h.connect(max_requests=1) as sock:
        sock.sendall(request_bytes('/', keep_conn=True))
        assert read_response(sock).status == 200
        assert read_to_eof(sock) == b''  # closed despite KEEP_CONN: the budget is spent
    h.join()
    assert h.served == [2, 1]


def test_a_failed_response_counts_as_served_and_ends_at_its_last_record(use_backend):
    """With KEEP_CONN over a Unix socket the early EOF alone says the response failed:
    nothing follows the traceback's records. The failed request counts as served."""
    def late(environ, start_response):
        start_response('200 OK', [])
        yield b'first'
        if environ['PATH_INFO'] == '/fail':
            raise RuntimeError('late')
    h = Harness(late)
    with h.connect() as sock:
        sock.sendall(request_bytes('/ok', keep_conn=True))
        assert read_response(sock).body == b'first'
        sock.sendall(request_bytes('/fail', keep_conn=True))
        data = read_to_eof(sock)
    h.join()
    parser = f.FastCGIParser()
    records = parser.feed(data)
    assert not parser.pending and records[-1][0] == f.FCGI_STDERR
    assert h.served == [2]


def test_an_input_stream_read_after_its_request_ended_is_at_eof(use_backend):
    kept = []

    def handler(request):
        kept.append(request.stdin)
        request.stdout.write(b'Status: 200 OK\r\n\r\n')
        return f.FCGI_REQUEST_COMPLETE, 0
    resp = _handler_response(handler)
    assert resp.status == 200
    assert kept[0].read(10) == b''


def test_a_request_received_whole_is_closed_not_lingered(use_backend):
    """No KEEP_CONN and the request's STDIN ended in what was received: a plain close, so the
    web server's next send fails at once instead of being read and dropped."""
    h = Harness(hello)
    with h.connect() as sock:
        sock.sendall(request_bytes('/', body=b'whole'))
        assert read_response(sock).status == 200
        assert read_to_eof(sock) == b''
        with pytest.raises(OSError):  # EPIPE: closed, not half-closed
            sock.sendall(b'late')
    h.join()


def test_stdin_still_on_the_way_is_read_after_the_response(use_backend):
    """The app never read the body and its end is still to come: the connection half-closes
    and reads it (lingering close), so the web server's send of it succeeds."""
    head, rest = request_bytes('/', body=b'b' * 1000, split=True)
    h = Harness(hello)
    with h.connect() as sock:
        sock.sendall(head)
        assert read_response(sock).status == 200
        assert read_to_eof(sock) == b''  # half-closed
        sock.sendall(rest)  # EPIPE if the server closed instead
        sock.shutdown(socket.SHUT_WR)
        h.join()


def test_a_list_result_leaves_in_one_send(use_backend, monkeypatch):
    """A list is complete in memory: its records and the request's end go out in one send."""
    sends = spy_sends(monkeypatch)

    def app(environ, start_response):
        start_response('200 OK', [])
        return [b'one ', b'two ', b'three']
    resp = Harness(app).request('/')
    assert resp.body == b'one two three'
    assert len(sends) == 1, sends


def test_a_multiplexed_request_id_reused_at_once_is_served(use_backend, monkeypatch):
    """The web server reuses an id as soon as its END_REQUEST arrives (nginx always sends
    id 1): the ended request's last bookkeeping must not remove the new request of that id
    (found in review: its STDIN was then ignored and it waited for good)."""
    from flupfast.fastcgi_connection import FastCGIConnection
    end_multiplexed = FastCGIConnection._end_multiplexed

    def after_the_next_request_began(conn, req):
        deadline = threading.Event()
        for _ in range(200):  # the reading thread has taken the next BEGIN_REQUEST
            if conn._requests.get(req.requestId, req) is not req:
                break
            deadline.wait(0.01)
        end_multiplexed(conn, req)
    monkeypatch.setattr(FastCGIConnection, '_end_multiplexed', after_the_next_request_began)

    def echo(environ, start_response):
        body = environ['wsgi.input'].read()
        start_response('200 OK', [])
        return [b'got %d' % len(body)]
    h = Harness(echo, multiplexed=True)
    with h.connect() as sock:
        sock.sendall(request_bytes('/', keep_conn=True))
        assert read_response(sock).body == b'got 0'
        whole = request_bytes('/', body=b'x' * 100, keep_conn=True)
        stdin = f.encode_stream(f.FCGI_STDIN, 1, b'x' * 100)
        assert whole.endswith(stdin)
        sock.sendall(whole[:-len(stdin)])  # BEGIN_REQUEST and PARAMS: the request starts
        time.sleep(0.2)  # the ended request's bookkeeping runs now
        sock.sendall(stdin)
        assert read_response(sock, timeout=5).body == b'got 100'


def test_a_send_cut_short_ends_the_kept_connection(use_backend, monkeypatch):
    """The request timeout (or flup's fork-mode timeout) raises while a send waits on a slow
    web server: part of a record is on the wire. Nothing more may follow, neither the
    traceback nor the 500 page nor END_REQUEST, and the kept connection ends (found in
    review: the stream went on out of step, the compiled twin sending its queue again from
    the start, and the next request was read inside a record)."""
    from tests.unit.send_spy import cut_a_send_short
    # The app's big stderr write: half of it goes out.
    sent = cut_a_send_short(monkeypatch, lambda data: b'E' * 1000 in data,
                            lambda data: data[:len(data) // 2])

    def logs_a_lot(environ, start_response):
        environ['wsgi.errors'].write('E' * 100000)
        environ['wsgi.errors'].flush()
        start_response('200 OK', [])
        return [b'ok']
    h = Harness(logs_a_lot)
    with h.connect() as sock:
        sock.sendall(request_bytes('/', keep_conn=True))
        assert read_to_eof(sock) == sent[0]
    h.join()
