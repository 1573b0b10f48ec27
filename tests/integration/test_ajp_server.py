"""The AJP13 front ends as real processes (``python -m flupfast --protocol ajp``), driven by
the test web server of tests/ajp_client.py over TCP: every mode serves persistent connections
and stops on SIGTERM even with an idle connection open, the fork pool serves connections side
by side, allowedServers refuses with flup's warning, IPv6 binds, bad input is one log line.
"""
import hashlib
import socket
import threading
import time

import pytest

from tests.ajp_client import WebServer, request_bytes
from tests.integration.backend_process import free_port
from tests.integration.backend_process import server_factory  # noqa: F401  (a fixture)


def start(server_factory, mode='thread', extra=()):
    addr = ('127.0.0.1', free_port())
    server = server_factory(['--protocol', 'ajp', '--mode', mode, '--bind',
                             '127.0.0.1:%d' % addr[1]] + list(extra) + ['tests.apps.probe:app'],
                            addr)
    return server, addr


@pytest.mark.parametrize('mode', ['thread', 'fork', 'single'])
def test_every_mode_serves_a_persistent_connection_and_stops(server_factory, mode):
    server, addr = start(server_factory, mode)
    web = WebServer(addr)
    for _ in range(3):
        r = web.exchange(request_bytes('GET', '/'))
        assert (r.status, r.body, r.reuse) == (200, b'Hello world!\n', True)
    body = bytes(range(256)) * 20480  # 5 MiB
    r = web.exchange(request_bytes('POST', '/upload', body=body,
                                   attributes=[('query_string', 'mode=read65536')]),
                     body[8186:])
    assert hashlib.sha256(body).hexdigest() in r.body.decode()
    started = time.monotonic()
    log = server.stop()  # the connection is still open and idle
    assert time.monotonic() - started < 8
    web.close()
    assert 'WSGIServer starting up' in log and 'Traceback' not in log


def test_fork_children_serve_connections_side_by_side(server_factory, tmp_path):
    _, addr = start(server_factory, 'fork', ['--max-spare', '2', '--max-children', '8'])
    meeting = tmp_path / 'barrier'
    meeting.mkdir()
    results = []

    def one():
        web = WebServer(addr)
        results.append(web.exchange(request_bytes(
            'GET', '/barrier', attributes=[('query_string', 'dir=%s&n=6' % meeting)])).body)
        web.close()
    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # Each request waits in the app until all six are in it at once (see the SCGI twin).
    assert results == [b'met 6\n'] * 6


def test_allowed_servers_refuses_with_flups_warning(server_factory):
    server, addr = start(server_factory, extra=['--allowed-servers', '10.9.9.9'])
    web = WebServer(addr)
    try:
        answer = web.exchange(request_bytes('GET', '/'))
    except ConnectionResetError:
        answer = None
    assert answer is None
    assert 'Server connection from 127.0.0.1 disallowed' in server.stop()


def test_ipv6_bind(server_factory):
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(('::1', 0))
    except OSError:
        pytest.skip('no IPv6 loopback')
    addr = ('::1', free_port())
    server_factory(['--protocol', 'ajp', '--bind', '[::1]:%d' % addr[1]], addr)
    assert WebServer(addr).exchange(request_bytes('GET', '/')).status == 200


def test_http_to_the_ajp_port_is_one_log_line(server_factory):
    server, addr = start(server_factory)
    with socket.create_connection(addr, timeout=10) as sock:
        sock.sendall(b'GET / HTTP/1.1\r\nHost: x\r\n\r\n')
        assert sock.recv(100) == b''
    assert WebServer(addr).exchange(request_bytes('GET', '/')).status == 200
    log = server.stop()
    assert log.count("Protocol error 'bad AJP packet magic 0x4745") == 1
    assert 'Traceback' not in log
