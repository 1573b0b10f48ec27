"""The SCGI front ends as real processes (``python -m flupfast --protocol scgi`` and scripts
using ``flupfast.server.scgi*``), driven by raw SCGI requests: every mode serves and stops on
SIGTERM, the fork pool serves requests side by side, the fork ``timeout`` ends a hung app,
allowedServers refuses with flup's warning, IPv6 binds, and bad input on one connection does
not disturb the others.
"""
import hashlib
import socket
import textwrap
import threading
import time

import pytest

from tests.integration.backend_process import free_port
from tests.integration.backend_process import server_factory  # noqa: F401  (a fixture)
from tests.scgi_client import parse_response, read_all, request_bytes


def ask(address, data, timeout=20):
    family = socket.AF_UNIX if isinstance(address, str) else (
        socket.AF_INET6 if ':' in address[0] else socket.AF_INET)
    with socket.socket(family) as sock:
        sock.settimeout(timeout)
        sock.connect(address)
        sender = threading.Thread(target=sock.sendall, args=(data,))
        sender.start()
        try:
            return read_all(sock)
        finally:
            sender.join(timeout)


def get(address, uri='/', **kw):
    return parse_response(ask(address, request_bytes(uri, **kw)))


@pytest.mark.parametrize('mode', ['thread', 'fork', 'single'])
def test_every_mode_serves_uploads_and_stops_on_sigterm(server_factory, tmp_path, mode):
    path = str(tmp_path / 'scgi.sock')
    server = server_factory(['--protocol', 'scgi', '--mode', mode, '--bind', 'unix:' + path,
                             'tests.apps.probe:app'], path)
    status, _, body = get(path, '/')
    assert (status, body) == (b'200 OK', b'Hello world!\n')
    data = bytes(range(256)) * 40960  # 10 MiB
    status, _, body = get(path, '/upload?mode=readline', method='POST', body=data)
    assert status == b'200 OK', body
    assert hashlib.sha256(data).hexdigest() in body.decode()
    started = time.monotonic()
    log = server.stop()
    assert time.monotonic() - started < 5
    assert 'WSGIServer starting up' in log and 'WSGIServer shutting down' in log
    assert 'Traceback' not in log


def test_fork_pool_serves_slow_requests_side_by_side(server_factory, tmp_path):
    path = str(tmp_path / 'scgi.sock')
    server_factory(['--protocol', 'scgi', '--mode', 'fork', '--bind', 'unix:' + path,
                    '--max-spare', '2', '--max-children', '8', 'tests.apps.probe:app'], path)
    meeting = tmp_path / 'barrier'
    meeting.mkdir()
    results = []

    def one():
        results.append(get(path, '/barrier?dir=%s&n=6' % meeting)[2])
    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # Each request waits in the app until all six are in it at once: served one at a time
    # (or two by two, flup's maxSpare) none could meet the others.
    assert results == [b'met 6\n'] * 6


SCRIPT = textwrap.dedent('''
    import time
    from flupfast.server import {module}
    def app(environ, start_response):
        if environ['PATH_INFO'] == '/hang':
            time.sleep(30)
        start_response('200 OK', [('Content-Type', 'text/plain')])
        return [b'ok']
    {module}.WSGIServer(app, bindAddress={bind!r}, **{kwargs!r}).run()
''')


def test_fork_timeout_ends_a_hung_app_with_flups_message(server_factory, tmp_path):
    path = str(tmp_path / 'scgi.sock')
    server = server_factory([], path, script=SCRIPT.format(
        module='scgi_fork', bind=path, kwargs={'timeout': 1}))
    started = time.monotonic()
    status, _, _ = get(path, '/hang')
    assert status == b'500 Internal Server Error'
    assert time.monotonic() - started < 10
    assert get(path, '/')[2] == b'ok'
    log = server.stop()
    assert 'Timeout Exceeded' in log and 'TimeoutException' in log


def test_allowed_servers_refuses_others_with_flups_warning(server_factory):
    addr = ('127.0.0.1', free_port())
    server = server_factory(['--protocol', 'scgi', '--bind', '127.0.0.1:%d' % addr[1],
                             '--allowed-servers', '10.9.9.9'], addr)
    try:
        answer = ask(addr, request_bytes('/'))
    except ConnectionResetError:
        answer = b''  # closed with our request unread: a reset, as with flup
    assert answer == b''  # no response
    log = server.stop()
    assert 'Server connection from 127.0.0.1 disallowed' in log


def test_ipv6_bind(server_factory):
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(('::1', 0))
    except OSError:
        pytest.skip('no IPv6 loopback')
    addr = ('::1', free_port())
    server_factory(['--protocol', 'scgi', '--bind', '[::1]:%d' % addr[1]], addr)
    assert get(addr, '/')[0] == b'200 OK'


def test_bad_input_is_one_log_line_and_others_are_served(server_factory, tmp_path):
    path = str(tmp_path / 'scgi.sock')
    server = server_factory(['--protocol', 'scgi', '--bind', 'unix:' + path,
                             'tests.apps.probe:app'], path)
    assert ask(path, b'GET / HTTP/1.1\r\nHost: x\r\n\r\n') == b''
    assert ask(path, b'0005:hello,') == b''
    assert get(path, '/')[2] == b'Hello world!\n'
    log = server.stop()
    assert log.count('Protocol error') == 2
    assert 'Traceback' not in log


def test_bind_failure_is_logged_and_exits_1(server_factory):
    addr = ('127.0.0.1', free_port())
    server_factory(['--protocol', 'scgi', '--bind', '127.0.0.1:%d' % addr[1]], addr)
    import subprocess
    import sys
    from tests.integration.backend_process import ROOT
    proc = subprocess.run([sys.executable, '-m', 'flupfast', '--protocol', 'scgi', '--bind',
                           '127.0.0.1:%d' % addr[1]], cwd=ROOT, capture_output=True,
                          timeout=30)
    assert proc.returncode == 1
    # The command line words it as for every protocol (the library logs flup's words and
    # returns False: scgi-ajp-bind-failure).
    assert ('flupfast: cannot listen on 127.0.0.1:%d: Address already in use' % addr[1]
            in proc.stderr.decode())
    assert 'Traceback' not in proc.stderr.decode()
