"""A reload keeps the threaded mode's idle kept connections (FastCGI KEEP_CONN, AJP13) and the
next serve() on the same listening socket takes them up (serving/handover.py, parking.py):
the web server's connections see no close. Also the exec side: kept connections pass on fds
from 4 under FLUPFAST_KEPT_FDS, for this PID only. Both backends.
"""
import os
import socket
import threading

import pytest

from flupfast.serving import handover, parking
from flupfast.serving.threaded import ThreadedMode
from flupfast.server import ajp_base, fcgi_base
from tests import ajp_client, fcgi_client
from tests.unit.connection_harness import FASTCGI_TWINS, use_twins
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(not parking.supported(), reason="no epoll")
WAIT = 30.0  # generous bound for wait_until on a loaded 2-core machine


def app(environ, start_response):
    start_response('200 OK', [('Content-Type', 'text/plain')])
    return [b'hello ' + environ['PATH_INFO'].encode()]


def fcgi_ask(sock, uri):
    sock.sendall(fcgi_client.request_bytes(uri, keep_conn=True))
    return fcgi_client.read_response(sock, 1, timeout=30).body


def ajp_ask(sock, uri):
    sock.sendall(ajp_client.request_bytes(uri=uri))
    data = b''
    while True:
        chunk = sock.recv(65536)
        assert chunk, 'closed'
        data += chunk
        packets, _ = ajp_client.read_container_packets(data)
        if packets and packets[-1][0] == 'end':
            return ajp_client.Response(packets).body


PROTOCOLS = {
    'fcgi': (lambda: fcgi_base.BaseFCGIServer(app), fcgi_ask),
    'ajp': (lambda: ajp_base.BaseAJPServer(app), ajp_ask),
}


@pytest.mark.parametrize('protocol', sorted(PROTOCOLS))
def test_a_reload_keeps_idle_kept_connections_for_the_next_run(backend, monkeypatch, tmp_path,
                                                                protocol):
    use_twins(monkeypatch, backend, FASTCGI_TWINS + ('AJPParser',))
    make_server, ask = PROTOCOLS[protocol]
    server = make_server()
    job_class = server._connectionClass if protocol == 'fcgi' else ajp_base.Connection
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / 'p.sock'))
    listener.listen(16)
    socks = []
    try:
        for generation in range(2):
            mode = ThreadedMode(job_class, (server, None), min_spare=1, max_spare=4)
            thread = threading.Thread(target=mode.serve, args=(listener, 0.05), daemon=True)
            thread.start()
            wait_until(lambda: mode.parked.open, WAIT)
            if not socks:
                for _ in range(3):
                    sock = socket.socket(socket.AF_UNIX)
                    sock.settimeout(30)
                    sock.connect(listener.getsockname())
                    socks.append(sock)
            for i, sock in enumerate(socks):
                assert ask(sock, '/%d-%d' % (generation, i)) == b'hello /%d-%d' % (generation, i)
            wait_until(lambda: len(mode.parked._parked) == 3, WAIT)
            mode.stop(reload=True)
            thread.join(10)
            mode.shutdown(5)
            # Still open: nothing was sent to the web server, no EOF.
            for sock in socks:
                sock.setblocking(False)
                with pytest.raises(BlockingIOError):
                    sock.recv(1)
                sock.settimeout(30)
        assert len(handover.take_connections(listener.getsockname())) == 3
    finally:
        for sock in socks:
            sock.close()
        listener.close()


def test_a_stop_still_closes_them(backend, tmp_path):
    server = fcgi_base.BaseFCGIServer(app)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / 'p.sock'))
    listener.listen(16)
    mode = ThreadedMode(server._connectionClass, (server, None), min_spare=1, max_spare=2)
    thread = threading.Thread(target=mode.serve, args=(listener, 0.05), daemon=True)
    thread.start()
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(30)
    try:
        sock.connect(listener.getsockname())
        assert fcgi_ask(sock, '/') == b'hello /'
        wait_until(lambda: len(mode.parked._parked) == 1, WAIT)
        mode.stop()
        thread.join(10)
        mode.shutdown(5)
        assert sock.recv(10) == b''
        assert handover.take_connections(listener.getsockname()) == []
    finally:
        sock.close()
        listener.close()


def test_kept_connections_cross_an_exec_on_fds_from_4_for_this_pid_only():
    a, b = socket.socketpair()
    try:
        environ = handover.pass_connections([a], {'PATH': '/bin'})
        (fd,) = map(int, environ[handover.KEPT_FDS].split(','))
        assert fd >= handover.FIRST_KEPT_FD and os.get_inheritable(fd)
        assert environ[handover.KEPT_PID] == str(os.getpid())
        other = dict(environ, **{handover.KEPT_PID: '1'})
        assert handover.inherited_connections(other) == [] and handover.KEPT_FDS not in other
        (kept,) = handover.inherited_connections(environ)
        assert not os.get_inheritable(kept.fileno()) and handover.KEPT_FDS not in environ
        b.sendall(b'x')
        assert kept.recv(1) == b'x'
        kept.close()
    finally:
        a.close()
        b.close()
