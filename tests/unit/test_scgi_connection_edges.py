"""The SCGI connection's edges that its mutation run found untested (tests/README.md): when
response bytes leave (as written, or coalesced into one send), the request line at INFO, and
the drain before a failed response's end reading the body to its last byte.
"""
import logging
import re
import socket
import threading
import warnings

import pytest

from flupfast.protocols.scgi import encode_request
from flupfast.serving.job import END, PARK, WAIT
from tests.scgi_client import parse_response, read_all, request_bytes
from tests.unit.connection_harness import SOCKET_TIMEOUT, echo, hello
from tests.unit.deadline_helpers import (  # noqa: F401 (fixture)
    LONG, expire_armed_deadlines, stuck_app)
from tests.unit.send_spy import spy_sends
from tests.unit.test_scgi_connection import Harness, use_backend  # noqa: F401 (fixture)


def test_a_list_result_leaves_in_one_send(use_backend, monkeypatch):
    """A list is complete in memory: the head and every item go out in one send (one
    ``sendmsg``), not one per item."""
    sends = spy_sends(monkeypatch)

    def app(environ, start_response):
        start_response('200 OK', [('Content-Type', 'text/plain')])
        return [b'one ', b'two ', b'three']
    h = Harness(app)
    status, _, body = h.request('/')
    h.join()
    assert (status, body) == (b'200 OK', b'one two three')
    assert len(sends) == 1 and sends[0].endswith(b'one two three'), sends


def test_a_handler_writing_to_stdout_is_sent_as_written(use_backend):
    """flup's handler API: ``request.stdout.write`` sends at once. The handler goes on only
    once the client has received its first write, which a held write never reaches."""
    seen = threading.Event()

    h = Harness(hello)

    def handler(request):
        request.stdout.write(b'Status: 200 OK\r\n\r\nfirst')
        if seen.wait(SOCKET_TIMEOUT):
            request.stdout.write(b' second')
    h.server.handler = handler
    with h.connect() as ours:
        ours.sendall(request_bytes('/'))
        received = b''
        while not received.endswith(b'first'):
            data = ours.recv(4096)  # a socket timeout: the first write was held
            assert data, received
            received += data
        seen.set()
        received += read_all(ours)
    h.join()
    assert received == b'Status: 200 OK\r\n\r\nfirst second'


def test_request_line_is_logged_at_info(use_backend, caplog):
    """The ``GET /path`` line is flup's INFO line: logged at INFO without DEBUG as well."""
    h = Harness(hello)
    with caplog.at_level(logging.INFO, logger='scgi-wsgi'):
        h.request('/app/x', script_name='/app', path_info='/x')
        h.join()
    assert [r.getMessage() for r in caplog.records if r.name == 'scgi-wsgi'] == ['GET /app/x']


def _late(environ, start_response):
    start_response('200 OK', [('Content-Type', 'text/plain')])
    yield b'first'
    raise RuntimeError('late')


def test_failed_response_waits_for_the_bodys_last_byte_over_a_unix_socket(use_backend,
                                                                           caplog):
    """The app fails after its first chunk with one body byte still to come. The drain reads
    that byte before the close: over a Unix socket a close with unread bytes makes the web
    server's read fail (ECONNRESET) instead of ending at EOF, and a close before the byte
    came makes its send fail."""
    wire = request_bytes('/', method='POST', body=b'0123456789')
    h = Harness(_late)
    with caplog.at_level(logging.CRITICAL, logger='scgi-wsgi'):
        with h.connect() as ours:
            ours.sendall(wire[:-1])
            received = b''
            while not received.endswith(b'first'):
                data = ours.recv(4096)
                assert data, received
                received += data
            ours.sendall(wire[-1:])  # BrokenPipe/ConnectionReset: closed before it came
            ours.shutdown(socket.SHUT_WR)
            received += read_all(ours)  # ConnectionResetError: closed with it unread
        h.join()
    assert received.startswith(b'Status: 200 OK\r\n') and received.endswith(b'first')


def _scgi_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == 'scgi-wsgi']


def test_request_lines_without_script_name_and_path_info(use_backend, caplog):
    """nginx's stock scgi_params sends neither SCRIPT_NAME nor PATH_INFO: the request line,
    logged before the handler derives them, shows an empty path, as flup's does."""
    pairs = [('CONTENT_LENGTH', '0'), ('SCGI', '1'), ('REQUEST_METHOD', 'GET'),
             ('REQUEST_URI', '/x?q'), ('QUERY_STRING', 'q'), ('SERVER_NAME', 'localhost'),
             ('SERVER_PORT', '80')]
    h = Harness(hello)
    with caplog.at_level(logging.DEBUG, logger='scgi-wsgi'):
        assert parse_response(h.raw(encode_request(pairs, b''), shut=False))[2] == \
            b'Hello world!\n'
        h.join()
    lines = _scgi_lines(caplog)
    assert lines[0] == 'GET ', lines
    # The done line comes after the handler, which derived PATH_INFO from REQUEST_URI.
    assert re.fullmatch(r'GET /x done \(\d+\.\d{3} secs\)', lines[-1]), lines


def test_log_lines_when_the_handler_leaves_the_path_unset(use_backend, caplog):
    """``WSGI_SCRIPT_NAME=None`` (cgi2scgi's way) leaves SCRIPT_NAME and PATH_INFO as they
    came: absent here, every log line shows an empty path, the client-gone warning too."""
    pairs = [('CONTENT_LENGTH', '1000'), ('SCGI', '1'), ('REQUEST_METHOD', 'POST'),
             ('SERVER_NAME', 'localhost'), ('SERVER_PORT', '80'),
             ('WSGI_SCRIPT_NAME', 'None')]
    h = Harness(echo)
    with caplog.at_level(logging.DEBUG, logger='scgi-wsgi'), \
            warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)  # WSGI_SCRIPT_NAME is
        assert h.raw(encode_request(pairs, b'x' * 100), shut=True) == b''
        h.join()
    lines = _scgi_lines(caplog)
    assert lines[0] == 'POST '
    assert lines[1].startswith('POST : ') and 'still to come' in lines[1], lines
    assert re.fullmatch(r'POST  done \(\d+\.\d{3} secs\)', lines[2]), lines


def test_a_handler_whose_web_server_left_is_one_debug_line(use_backend, caplog):
    """flup's handler API writing after the web server closed: EPIPE is the web server going
    away, a DEBUG line naming the error; no traceback, no error page."""
    closed = threading.Event()
    h = Harness(hello)

    def handler(request):
        assert closed.wait(SOCKET_TIMEOUT)
        request.stdout.write(b'Status: 200 OK\r\n\r\nlate')
    h.server.handler = handler
    with caplog.at_level(logging.DEBUG, logger='scgi-wsgi'):
        with h.connect() as ours:
            ours.sendall(request_bytes('/'))
        closed.set()
        h.join()
    lines = [(r.levelno, r.getMessage(), r.exc_info) for r in caplog.records
             if r.name == 'scgi-wsgi']
    assert (logging.DEBUG, 'the web server went away: [Errno 32] Broken pipe', None) in lines
    assert [line for line in lines if line[0] >= logging.WARNING] == []


def test_a_request_past_its_timeout_is_reported_and_answered_500(use_backend, caplog):
    """The fork servers' per-request ``timeout`` (flup's): "Timeout Exceeded" on the
    ``scgi-wsgi`` logger and TimeoutException inside the app, which then gets the 500 page.
    The app loops until the exception comes (the test's own bound only ends a hang)."""
    started = threading.Event()
    h = Harness(stuck_app(started))
    ours, theirs = socket.socketpair()
    ours.settimeout(SOCKET_TIMEOUT)
    conn = h.connection_class(theirs, '', h.server, LONG)
    with caplog.at_level(logging.ERROR, logger='scgi-wsgi'):
        thread = threading.Thread(target=conn.run, daemon=True)
        thread.start()
        with ours:
            ours.sendall(request_bytes('/'))
            assert started.wait(SOCKET_TIMEOUT)
            expire_armed_deadlines()
            status, _, _ = parse_response(read_all(ours))
        thread.join(SOCKET_TIMEOUT)
    assert status == b'500 Internal Server Error'
    lines = _scgi_lines(caplog)
    assert lines[0] == 'Timeout Exceeded' and 'in stuck' in lines[1], lines
    assert 'Exception caught from handler' in lines


def _idle_spy(answer, seen):
    def on_idle(job, parkable):
        seen.append((job, job.idle, parkable))
        return answer
    return on_idle


def test_waiting_for_the_request_is_idle_and_asks_the_mode_once(use_backend):
    """Before its one request an SCGI connection is ``idle`` (a stop may end the wait) and
    asks ``on_idle(job, parkable=False)``: its head may arrive in parts, so it never parks.
    Once the head is read it is busy."""
    seen, busy = [], []

    def app(environ, start_response):
        busy.append(conn.idle)
        return hello(environ, start_response)
    h = Harness(app)
    ours, theirs = socket.socketpair()
    ours.settimeout(SOCKET_TIMEOUT)
    conn = h.connection_class(theirs, '', h.server, None)
    conn.on_idle = _idle_spy(WAIT, seen)
    with ours:
        ours.sendall(request_bytes('/'))
        assert conn.run() == 1
        assert parse_response(read_all(ours))[2] == b'Hello world!\n'
    assert seen == [(conn, True, False)] and busy == [False] and not conn.idle


@pytest.mark.parametrize('answer', [END, PARK])
def test_a_mode_ending_the_wait_closes_quietly(use_backend, caplog, answer):
    """A stop before any request byte came: nothing is read, nothing logged, the socket
    closed."""
    seen = []
    h = Harness(hello)
    ours, theirs = socket.socketpair()
    ours.settimeout(SOCKET_TIMEOUT)
    conn = h.connection_class(theirs, '', h.server, None)
    conn.on_idle = _idle_spy(answer, seen)
    with caplog.at_level(logging.DEBUG, logger='scgi-wsgi'), ours:
        assert conn.run() == 0
        assert read_all(ours) == b''
    assert len(seen) == 1 and not conn.idle
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_request_received_whole_is_closed_not_lingered(use_backend):
    """Nothing of the body is still on the way: a plain close, so the web server's next
    send fails at once instead of being read and dropped for LINGER_SECONDS."""
    h = Harness(hello)
    with h.connect() as ours:
        ours.sendall(request_bytes('/', method='POST', body=b'whole'))
        # EOF came with the close: a lingering close would half-close first and go on reading.
        assert parse_response(read_all(ours))[2] == b'Hello world!\n'
        with pytest.raises(OSError):  # EPIPE: the server's end is closed
            ours.sendall(b'late')
    h.join()


def test_a_body_byte_still_on_the_way_is_read_after_the_response(use_backend):
    """The app never read the body and its last byte is still to come: the connection
    half-closes and reads it (lingering close), so the web server's send of it succeeds and
    the response is not lost to a reset."""
    wire = request_bytes('/', method='POST', body=b'0123456789')
    h = Harness(hello)
    with h.connect() as ours:
        ours.sendall(wire[:-1])
        assert parse_response(read_all(ours))[2] == b'Hello world!\n'  # EOF: half-closed
        ours.sendall(wire[-1:])  # EPIPE if the server closed instead
        ours.shutdown(socket.SHUT_WR)
        h.join()


def test_a_tcp_connection_is_logged_starting_and_shutting_down(use_backend, caplog):
    """flup's DEBUG lines name the web server's address over TCP."""
    h = Harness(hello)
    with caplog.at_level(logging.DEBUG, logger='scgi-wsgi'):
        with h.connect(tcp=True) as ours:
            address = '%s:%d' % ours.getsockname()
            ours.sendall(request_bytes('/'))
            read_all(ours)
        h.join()
    lines = _scgi_lines(caplog)
    assert lines[0] == 'Connection starting up (%s)' % address
    assert lines[-1] == 'Connection shutting down (%s)' % address



def test_a_served_connection_is_freed_by_reference_counting(use_backend):
    """Its body source refers back to the connection: the connection drops it when it ends,
    or every SCGI connection would wait for the garbage collector (~400 of 500 did)."""
    import gc
    import weakref

    h = Harness(hello)
    ours, peer = socket.socketpair()
    peer.sendall(request_bytes('/'))
    gc.disable()
    try:
        conn = Harness.connection_class(ours, '', h.server, None)
        assert conn.run() == 1
        gone = weakref.ref(conn)
        del conn
        assert gone() is None
    finally:
        gc.enable()
        ours.close()
        peer.close()
