"""The FastCGI front ends as real processes (``python -m flupfast`` and scripts using
``flupfast.server.fcgi*``), driven by our FastCGI client: FCGI_WEB_SERVER_ADDRS, the fork
servers' ``timeout``, the CLI, flup's constructor contract, and "bad input on one connection
does not disturb the others".
"""
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from flupfast.__main__ import parse_bind
from flupfast.protocols import fastcgi as f
from tests.fcgi_client import read_response, request_bytes, roundtrip
from tests.integration.backend_process import ROOT, Server, free_port
from tests.integration.backend_process import server_factory  # noqa: F401  (a fixture)

SCRIPT = textwrap.dedent('''
    import sys, time
    from flupfast.server import {module}
    def app(environ, start_response):
        if environ['PATH_INFO'] == '/sleep':
            time.sleep(3)
        start_response('200 OK', [('Content-Type', 'text/plain')])
        return [b'pid %d' % __import__('os').getpid()]
    ret = {module}.WSGIServer(app, bindAddress={bind!r}, **{kwargs!r}).run()
    print('run returned', ret, file=sys.stderr)
''')


@pytest.mark.parametrize('module', ['fcgi', 'fcgi_fork', 'fcgi_single'])
def test_web_server_addrs_refuses_other_peers(server_factory, module):
    port = free_port()
    addr = ('127.0.0.1', port)
    server = server_factory([], addr, script=SCRIPT.format(module=module, bind=addr, kwargs={}),
                            env={'FCGI_WEB_SERVER_ADDRS': '10.9.9.9, 127.0.0.2'})
    with socket.create_connection(addr, timeout=10) as sock:
        sock.sendall(request_bytes('/'))
        try:
            assert sock.recv(100) == b''  # closed without an answer, as flup
        except ConnectionResetError:
            pass  # closed before reading our request: the kernel answers RST
    server.stop()
    port = free_port()
    addr = ('127.0.0.1', port)
    server_factory([], addr, script=SCRIPT.format(module=module, bind=addr, kwargs={}),
                   env={'FCGI_WEB_SERVER_ADDRS': '10.9.9.9,127.0.0.1'})
    assert roundtrip(addr, '/').status == 200


def test_fork_timeout_gives_500_and_timeout_exceeded(server_factory, tmp_path):
    path = str(tmp_path / 'fork.sock')
    server_factory([], path, script=SCRIPT.format(module='fcgi_fork', bind=path,
                                                  kwargs={'timeout': 1, 'maxSpare': 1}))
    resp = roundtrip(path, '/sleep')
    assert resp.status == 500
    assert b'Timeout Exceeded' in resp.stderr
    assert roundtrip(path, '/').status == 200  # the child goes on serving


@pytest.mark.parametrize('mode', ['thread', 'fork', 'single'])
def test_cli_demo_serves_and_stops_on_sigterm(server_factory, tmp_path, mode):
    path = str(tmp_path / 'demo.sock')
    server = server_factory(['--mode', mode, '--bind', 'unix:' + path], path)
    resp = roundtrip(path, '/environ')
    assert resp.status == 200 and b'wsgi.multiprocess' in resp.body
    assert b'Hello from flupfast' in roundtrip(path, '/').body
    started = time.monotonic()
    log = server.stop()
    assert time.monotonic() - started < 3, log
    assert server.proc.returncode == 0, log


def test_single_mode_stops_while_a_kept_connection_idles(server_factory, tmp_path):
    # nginx's upstream keepalive holds the single slot open between requests; SIGTERM must
    # still stop the server within the bound (flup waits until the web server lets go).
    path = str(tmp_path / 'single.sock')
    server = server_factory(['--mode', 'single', '--bind', 'unix:' + path], path)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)
        sock.sendall(request_bytes('/', keep_conn=True))
        assert read_response(sock).status == 200
        started = time.monotonic()
        log = server.stop()
        assert time.monotonic() - started < 3, log
        assert server.proc.returncode == 0, log


def test_cli_serves_an_app_by_name_over_tcp(server_factory):
    addr = ('127.0.0.1', free_port())
    server_factory(['tests.apps.probe:app', '--bind', '127.0.0.1:%d' % addr[1]], addr)
    assert roundtrip(addr, '/').body == b'Hello world!\n'


def test_bad_connection_does_not_disturb_others(server_factory, tmp_path):
    path = str(tmp_path / 'mixed.sock')
    server_factory(['--mode', 'thread', '--bind', 'unix:' + path], path)
    bad = []
    for junk in (b'\x07' * 64, request_bytes('/')[:20], f.encode_begin_request(1) * 2):
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(path)
        sock.sendall(junk)
        bad.append(sock)
    for _ in range(20):
        assert roundtrip(path, '/').status == 200
    for sock in bad:
        sock.close()
    assert roundtrip(path, '/').status == 200


def test_sighup_makes_run_return_true(tmp_path):
    path = str(tmp_path / 'hup.sock')
    server = Server([], path, script=SCRIPT.format(module='fcgi', bind=path, kwargs={}))
    server.proc.send_signal(signal.SIGHUP)
    assert server.proc.wait(10) == 0
    assert 'run returned True' in server.proc.stderr.read().decode()


@pytest.mark.parametrize('text, expected', [
    ('unix:/run/a.sock', '/run/a.sock'), ('/tmp/b.sock', '/tmp/b.sock'),
    ('127.0.0.1:9000', ('127.0.0.1', 9000)), (':9000', ('', 9000)),
    ('[::1]:9000', ('::1', 9000, 0, 0)),
])
def test_parse_bind(text, expected):
    assert parse_bind(text) == expected


def test_flup_constructor_contract():
    from flupfast.server import fcgi, fcgi_fork, fcgi_single
    with pytest.raises(TypeError):
        fcgi.WSGIServer(None, bindAddress=('127.0.0.1', 0), noSuchOption=1)
    with pytest.raises(ValueError, match='minSpare must be at least 1!'):
        fcgi_fork.WSGIServer(None, minSpare=0)
    # fcgi_single ignores unknown keywords, as flup's does.
    fcgi_single.WSGIServer(None, timeout=5, maxThreads=3)
    assert fcgi_fork.WSGIServer(None, multithreaded=True).multithreaded is False


def test_cli_reports_a_busy_address_clearly(server_factory):
    addr = ('127.0.0.1', free_port())
    server_factory(['--bind', '127.0.0.1:%d' % addr[1]], addr)
    second = subprocess.run([sys.executable, '-m', 'flupfast', '--bind', '127.0.0.1:%d' % addr[1]],
                            cwd=ROOT, capture_output=True, timeout=60)
    assert second.returncode == 1
    assert b'cannot listen on' in second.stderr and b'Traceback' not in second.stderr
