"""More of the FastCGI connection's edges found by its mutation run (tests/README.md):
multiplexed requests' threads, the open-request cap, unknown records, failed receives, the
end of a multiplexed connection, record sizes, and the wait between KEEP_CONN requests
(serving/job.py's contract).
"""
import logging
import socket
import struct
import threading

import pytest

from flupfast.protocols import fastcgi as f
from flupfast.serving.job import END, PARK, WAIT
from tests.fcgi_client import read_response, request_bytes
from tests.unit.connection_harness import SOCKET_TIMEOUT, hello, read_to_eof, tcp_pair
from tests.unit.test_fastcgi_connection import Harness, use_backend  # noqa: F401 (fixture)


# -- multiplexed requests' threads and the cap on open requests -----------------------------------

def test_a_multiplexed_request_runs_in_its_own_named_daemon_thread(use_backend):
    """Daemon even when the connection runs in a non-daemon thread (the single mode's main
    thread, here the test's): a request left running must not keep the process alive."""
    seen = []

    def app(environ, start_response):
        thread = threading.current_thread()
        seen.append((thread.name, thread.daemon))
        return hello(environ, start_response)
    h = Harness(app, multiplexed=True)
    ours, theirs = socket.socketpair()
    ours.settimeout(SOCKET_TIMEOUT)
    conn = h.connection_class(theirs, None, h.server, None)
    with ours:
        ours.sendall(request_bytes('/', request_id=7))
        ours.shutdown(socket.SHUT_WR)
        assert conn.run() == 1
        assert read_response(ours, request_id=7).status == 200
    assert seen == [('flupfast-fcgi-7', True)]


def test_the_end_of_a_multiplexed_connection_waits_for_a_request_still_sending(use_backend):
    """A multiplexed request leaves the open requests before its END_REQUEST is sent (the id
    is free again at once); the web server's EOF arriving in that gap must not close the
    socket under the send. The request's last send (after it left ``_requests``) here waits
    until the connection would close (at most 2 s): before the fix the close came first and
    the response was lost."""
    h = Harness(hello, multiplexed=True)
    ours, theirs = socket.socketpair()
    ours.settimeout(SOCKET_TIMEOUT)
    conn = h.connection_class(theirs, None, h.server, None)
    closing = threading.Event()
    real_send, real_close = conn.send, conn.close

    def send(buffers, *args, **kwargs):
        if threading.current_thread().name.startswith('flupfast-fcgi-') and not conn._requests:
            closing.wait(2)
        return real_send(buffers, *args, **kwargs)

    def close():
        closing.set()
        real_close()
    conn.send, conn.close = send, close
    with ours:
        ours.sendall(request_bytes('/', request_id=5))
        ours.shutdown(socket.SHUT_WR)
        assert conn.run() == 1
        resp = read_response(ours, request_id=5)
    assert (resp.status, resp.end) == (200, (0, f.FCGI_REQUEST_COMPLETE))


def test_the_handler_sees_flups_request_attributes(use_backend):
    seen = []

    def handler(request):
        seen.append((request.requestId, request.role, request.flags, request.keep_conn))
        request.stdout.write(b'Status: 200 OK\r\n\r\n')
        return f.FCGI_REQUEST_COMPLETE, 0
    h = Harness(hello)
    h.server.handler = handler
    with h.connect() as sock:
        sock.sendall(request_bytes('/', request_id=9, keep_conn=True))
        assert read_response(sock, request_id=9).end == (0, f.FCGI_REQUEST_COMPLETE)
    h.join()
    assert seen == [(9, f.FCGI_RESPONDER, f.FCGI_KEEP_CONN, True)]


def test_a_thread_that_cannot_start_is_answered_overloaded(use_backend, caplog, monkeypatch):
    """No thread left for a multiplexed request (RuntimeError from start()): END_REQUEST with
    FCGI_OVERLOADED for it and one error line (flup means to, but raises NameError)."""
    from types import SimpleNamespace

    from flupfast import fastcgi_connection

    class Unstartable(threading.Thread):
        def start(self):
            raise RuntimeError("can't start new thread")
    monkeypatch.setattr(fastcgi_connection, 'threading', SimpleNamespace(Thread=Unstartable,
                                                                           Lock=threading.Lock))
    h = Harness(hello, multiplexed=True)
    with caplog.at_level(logging.ERROR, logger='flupfast'):
        with h.connect() as sock:
            sock.sendall(request_bytes('/', request_id=3, keep_conn=True))
            resp = read_response(sock, request_id=3)
        h.join()
    assert resp.records == [f.FCGI_END_REQUEST] and resp.end == (0, f.FCGI_OVERLOADED)
    assert [r.getMessage() for r in caplog.records if r.name == 'flupfast'] == [
        'FastCGI: cannot start a thread for request 3; answering OVERLOADED']


def test_open_requests_are_capped_at_the_limit(use_backend, monkeypatch):
    """MAX_OPEN_REQUESTS begun requests are held; the next gets END_REQUEST(FCGI_OVERLOADED)
    at once (the GET_VALUES after it shows the answer came, or did not, in order). The cap is
    lowered to 2 here: the parser refuses more than the real one of requests still without
    their PARAMS, so only running requests can reach it."""
    from flupfast import fastcgi_connection
    monkeypatch.setattr(fastcgi_connection, 'MAX_OPEN_REQUESTS', 2)
    h = Harness(hello, multiplexed=True)
    names = f.encode_params([('FCGI_MPXS_CONNS', '')])
    with h.connect() as sock:
        sock.sendall(b''.join(f.encode_begin_request(i, f.FCGI_RESPONDER, f.FCGI_KEEP_CONN)
                              for i in (1, 2, 3))
                     + f.encode_record(f.FCGI_GET_VALUES, 0, names))
        parser, answers = f.FastCGIParser(), []
        while not answers or answers[-1][0] != f.FCGI_GET_VALUES_RESULT:
            data = sock.recv(4096)
            assert data, answers
            answers += parser.feed(data)
    h.join()
    assert [(kind, rid) for kind, rid, _ in answers] == [
        (f.FCGI_END_REQUEST, 3), (f.FCGI_GET_VALUES_RESULT, 0)]
    assert answers[0][2] == bytes(4) + bytes((f.FCGI_OVERLOADED,)) + bytes(3)


def test_unknown_records_are_one_warning_each_word_for_word(use_backend, caplog):
    h = Harness(hello)
    with caplog.at_level(logging.WARNING, logger='flupfast'):
        with h.connect() as sock:
            sock.sendall(f.encode_record(42, 0, b'') + f.encode_record(43, 5, b'x')
                         + request_bytes('/'))
            assert read_response(sock).status == 200
        h.join()
    assert [r.getMessage() for r in caplog.records if r.name == 'flupfast'] == [
        'FastCGI: unknown management record type 42 from unix socket',
        'FastCGI: ignoring record of unknown type 43 for request 5 from unix socket']


@pytest.mark.parametrize('failure', ['timeout', 'reset'])
def test_a_failed_receive_is_logged_unless_the_peer_left(use_backend, caplog, failure):
    """A receive that fails for another reason than the web server leaving (here the socket's
    timeout) is one line with the traceback; a reset is the web server leaving: quiet."""
    h = Harness(hello)
    ours, theirs, address = tcp_pair()
    if failure == 'timeout':
        theirs.settimeout(0.01)  # the web server never sends
    conn = h.connection_class(theirs, address, h.server, None)
    with caplog.at_level(logging.DEBUG, logger='flupfast'):
        thread = threading.Thread(target=conn.run, daemon=True)
        thread.start()
        if failure == 'reset':
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
        else:
            thread.join(SOCKET_TIMEOUT)
        ours.close()
        thread.join(SOCKET_TIMEOUT)
    lines = [(r.getMessage(), bool(r.exc_info)) for r in caplog.records if r.name == 'flupfast']
    if failure == 'timeout':
        assert lines == [('FastCGI connection from %s:%s failed' % address[:2], True)]
    else:
        assert lines == []


def test_a_multiplexed_connection_at_eof_waits_for_its_running_requests(use_backend,
                                                                        monkeypatch):
    """The web server half-closes mid-body: the request's read raises ClientDisconnected, and
    what the request still sends reaches the web server before the connection closes."""
    escaped = []
    monkeypatch.setattr(threading, 'excepthook', lambda args: escaped.append(args.exc_value))
    seen = []

    def handler(request):
        try:
            request.stdin.read()
        except Exception as exc:
            seen.append(type(exc).__name__)
        request.stdout.write(b'Status: 200 OK\r\n\r\nbye')
        return f.FCGI_REQUEST_COMPLETE, 0
    h = Harness(hello, multiplexed=True)
    h.server.handler = handler
    head, _ = request_bytes('/', body=b'b' * 1000, keep_conn=True, split=True)
    with h.connect() as sock:
        sock.sendall(head + f.encode_record(f.FCGI_STDIN, 1, b'part'))
        sock.shutdown(socket.SHUT_WR)
        resp = read_response(sock)
        assert read_to_eof(sock) == b''
    h.join()
    assert seen == ['ClientDisconnected'] and escaped == []
    assert resp.body == b'bye' and resp.end == (0, f.FCGI_REQUEST_COMPLETE)


# -- record sizes ------------------------------------------------------------------------------

@pytest.mark.parametrize('maxwrite, content', [(65536, 65528), (8, 8)])
def test_stdout_records_are_as_large_as_maxwrite_allows(use_backend, maxwrite, content):
    """Records carry ``maxwrite`` less the header, in multiples of 8 (so only a stream's last
    record is padded), 8 at the least."""
    body = bytes(range(256)) * 800  # 204800 bytes

    def app(environ, start_response):
        start_response('200 OK', [('Content-Length', str(len(body)))])
        return [body]
    h = Harness(app)
    h.server.maxwrite = maxwrite
    with h.connect() as sock:
        sock.sendall(request_bytes('/'))
        data = read_to_eof(sock)
    h.join()
    sizes = [len(payload) for kind, _, payload in f.FastCGIParser().feed(data)
             if kind == f.FCGI_STDOUT]
    assert max(sizes) == content and sizes[-1] == 0
    assert sum(sizes[:-1]) > len(body) and sizes[-2] <= content


# -- the wait between KEEP_CONN requests (serving/job.py's contract) ---------------------------------

def _contract_connection(answers):
    """A connection over a socketpair whose ``on_idle`` records (job is conn, idle, parkable)
    and answers from ``answers`` (then WAIT); returns (conn, our socket, seen, busy)."""
    seen, busy = [], []
    h = Harness(hello)
    ours, theirs = socket.socketpair()
    ours.settimeout(SOCKET_TIMEOUT)
    conn = h.connection_class(theirs, None, h.server, None)
    answers = list(answers)

    def on_idle(job, parkable):
        seen.append((job is conn, job.idle, parkable))
        return answers.pop(0) if answers else WAIT
    conn.on_idle = on_idle

    def app(environ, start_response):
        busy.append(conn.idle)
        return hello(environ, start_response)
    h.server.application = app
    return conn, ours, seen, busy


def test_a_wait_between_requests_is_idle_and_parkable_only_with_nothing_buffered(use_backend):
    """The first request is not waited for idly; between KEEP_CONN requests the connection
    is idle, and parkable unless part of the next record is already read."""
    conn, sock, seen, busy = _contract_connection([])
    assert not conn.idle  # a new connection's first request is on the way: a stop waits
    thread = threading.Thread(target=lambda: busy.append(('served', conn.run())), daemon=True)
    thread.start()
    with sock:
        sock.sendall(request_bytes('/', keep_conn=True))
        assert read_response(sock).status == 200
        nxt = request_bytes('/', keep_conn=True)
        sock.sendall(nxt[:3])  # part of a record header: the parser holds it
        for _ in range(1000):  # until the connection waits again, with those 3 bytes read
            if len(seen) == 2:
                break
            thread.join(0.01)
        sock.sendall(nxt[3:])
        assert read_response(sock).status == 200
    thread.join(SOCKET_TIMEOUT)
    assert seen == [(True, True, True), (True, True, False), (True, True, True)]
    assert busy == [False, False, ('served', 2)] and not conn.idle


def test_a_parked_connection_resumes_without_asking_again(use_backend):
    conn, sock, seen, busy = _contract_connection([PARK, END])
    with sock:
        sock.sendall(request_bytes('/', keep_conn=True))
        assert conn.run() == 1 and conn.parked and not conn.idle
        assert read_response(sock).status == 200
        sock.sendall(request_bytes('/', keep_conn=True))
        assert conn.run() == 2 and not conn.parked and not conn.idle
        assert read_response(sock).status == 200
        assert read_to_eof(sock) == b''
    assert seen == [(True, True, True), (True, True, True)] and busy == [False, False]
