"""``python -m flupfast.client``, the health-check client, against real backends: flupfast and
real flup 1.0.3, over FastCGI, SCGI, uwsgi (flupfast only) and AJP13, on TCP and Unix
sockets. Its exit status is what a Docker HEALTHCHECK reads: 0 for an answer below 500, 1 for a 5xx or an unreachable
backend, 2 for a usage mistake.
"""
import hashlib
import json
import os
import subprocess
import sys

import pytest

from tests.integration.backend_process import ROOT, free_port
from tests.integration.backend_process import server_factory  # noqa: F401  (a fixture)

LAUNCHER = os.path.join(ROOT, 'tests', 'integration', 'flup_launcher.py')
PROBE = 'tests.apps.probe:app'


def client(*args, stdin=None):
    return subprocess.run([sys.executable, '-m', 'flupfast.client', *args], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), input=stdin,
                          capture_output=True, timeout=60)


def split(stdout):
    head, _, body = stdout.partition(b'\r\n\r\n')
    lines = head.decode('latin-1').split('\r\n')
    return lines[0], dict(line.split(': ', 1) for line in lines[1:]), body


@pytest.fixture(params=['flupfast', 'flup'])
def package(request):
    return request.param


@pytest.fixture
def backend(server_factory, package, tmp_path):
    def start(protocol, unix=True):
        if unix:
            path = str(tmp_path / ('%s.sock' % protocol))
            bind, address = 'unix:' + path, path
        else:
            port = free_port()
            bind, address = '127.0.0.1:%d' % port, ('127.0.0.1', port)
        if package == 'flup':
            if protocol == 'uwsgi':
                pytest.skip('flup has no uwsgi server')
            if protocol == 'ajp' and unix:
                pytest.skip('flup 1.0.3 binds AJP13 on IPv4 only')
            command = [sys.executable, LAUNCHER, '--protocol', protocol, '--mode', 'thread',
                       '--bind', bind, PROBE]
            server_factory([], address, command=command)
        else:
            server_factory([PROBE, '--protocol', protocol, '--bind', bind,
                            '--log-level', 'warning'], address)
        return bind
    return start


@pytest.mark.parametrize('protocol', ['fcgi', 'scgi', 'uwsgi', 'ajp'])
@pytest.mark.parametrize('unix', [True, False], ids=['unix', 'tcp'])
def test_get_prints_the_answer_and_exits_0(backend, protocol, unix):
    bind = backend(protocol, unix)
    proc = client(protocol, bind, '/')
    assert proc.returncode == 0, proc.stderr
    status, headers, body = split(proc.stdout)
    assert status == 'Status: 200 OK' and body == b'Hello world!\n'
    assert headers['content-type'] == 'text/plain'


@pytest.mark.parametrize('protocol', ['fcgi', 'scgi', 'uwsgi', 'ajp'])
def test_post_body_query_and_headers_reach_the_app(backend, protocol, tmp_path):
    bind = backend(protocol, unix=False)
    body = bytes(range(256)) * 400  # 100 KiB: several AJP body packets, several FastCGI records
    data = tmp_path / 'body.bin'
    data.write_bytes(body)
    # limit=: flup's SCGI wsgi.input hangs when read past CONTENT_LENGTH (scgi-bounded-input)
    proc = client(protocol, bind, '/upload?limit=%d' % len(body), '-d', '@%s' % data,
                  '-H', 'Content-Type: application/octet-stream')
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(split(proc.stdout)[2])
    assert answer['length'] == len(body) and answer['sha256'] == hashlib.sha256(body).hexdigest()
    proc = client(protocol, bind, '/environ?a=1&b=2', '-H', 'X-Probe: yes', '--host', 'example')
    environ = json.loads(split(proc.stdout)[2])
    assert environ['QUERY_STRING'] == 'a=1&b=2'
    assert environ['HTTP_X_PROBE'] == 'yes' and environ['HTTP_HOST'] == 'example'
    assert environ['REQUEST_METHOD'] == 'GET'


@pytest.mark.parametrize('protocol', ['fcgi', 'scgi', 'uwsgi', 'ajp'])
def test_a_5xx_answer_exits_1(backend, package, protocol):
    if (package, protocol) == ('flup', 'ajp'):
        pytest.skip('flup answers an AJP13 app error with status 200 (ajp-500-status)')
    bind = backend(protocol, unix=False)
    proc = client(protocol, bind, '/error')
    assert proc.returncode == 1
    assert split(proc.stdout)[0] == 'Status: 500 Internal Server Error'
    proc = client(protocol, bind, '/no-such-route', '-s')
    assert (proc.returncode, proc.stdout) == (0, b'')  # a 404 is an answer: the app is up


@pytest.mark.parametrize('protocol', ['fcgi', 'scgi', 'uwsgi', 'ajp'])
def test_nobody_listening_is_one_line_and_exit_1(protocol, tmp_path):
    proc = client(protocol, 'unix:%s' % (tmp_path / 'none.sock'), '/')
    assert proc.returncode == 1
    lines = proc.stderr.decode().strip().splitlines()
    assert lines == ['flupfast.client: %s %s: No such file or directory'
                     % (protocol, tmp_path / 'none.sock')]


def test_a_backend_speaking_another_protocol_is_one_line_and_exit_1(backend):
    bind = backend('scgi', unix=False)
    proc = client('fcgi', bind, '/')
    assert proc.returncode == 1
    line = proc.stderr.decode().strip()
    assert line.startswith('flupfast.client: fcgi 127.0.0.1:') and '\n' not in line


@pytest.mark.parametrize('args, words', [
    (['http', '127.0.0.1:1'], "invalid choice: 'http'"),
    (['fcgi', 'nowhere'], "expected host:port, [v6]:port or unix:/path, not 'nowhere'"),
    (['fcgi', '127.0.0.1:1', '/', '-H', 'NoColon'], "expected 'Name: value', not 'NoColon'"),
    (['scgi', '127.0.0.1:1', '--secret', 'x'], '--secret applies to ajp only'),
    (['fcgi', '127.0.0.1:1', '--timeout', '-1'], "expected seconds > 0, not '-1'"),
    (['fcgi', '127.0.0.1:1', '--timeout', '0'], "expected seconds > 0, not '0'"),
])
def test_usage_mistakes_are_one_line_and_exit_2(args, words):
    proc = client(*args)
    assert proc.returncode == 2
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr


def test_text_beyond_latin_1_goes_as_its_utf_8_bytes(server_factory, tmp_path):
    """A path, host or header value beyond latin-1 reaches the app as a web server passes it:
    its UTF-8 bytes as latin-1 code points (found in review: a traceback)."""
    path = str(tmp_path / 'app.sock')
    server_factory([PROBE, '--bind', 'unix:' + path, '--log-level', 'warning'], path)
    proc = client('fcgi', 'unix:' + path, '/environ/\u20ac', '--host', 'b\u00fccher.example',
                  '-H', 'X-Name: \u20ac')
    assert proc.returncode == 0, proc.stderr
    environ = json.loads(split(proc.stdout)[2])
    assert environ['REQUEST_URI'] == '/environ/\u20ac'.encode('utf-8').decode('latin-1')
    assert environ['HTTP_HOST'] == 'b\u00fccher.example'.encode('utf-8').decode('latin-1')
    assert environ['HTTP_X_NAME'] == '\u20ac'.encode('utf-8').decode('latin-1')


def test_a_status_without_a_code_is_one_line_and_exit_1(tmp_path):
    """A backend that answers 'Status: OK' answers nonsense: one line (found in review: a
    ValueError traceback)."""
    import socket
    import threading
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / 'odd.sock'))
    listener.listen()

    def answer_oddly():
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b'Status: OK\r\nContent-Type: text/plain\r\n\r\nhello')
    server = threading.Thread(target=answer_oddly)
    server.start()
    try:
        proc = client('scgi', 'unix:%s' % (tmp_path / 'odd.sock'), '/')
    finally:
        server.join(10)
        listener.close()
    assert proc.returncode == 1
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and 'a status without a code' in lines[0], proc.stderr


def test_a_reader_that_goes_away_does_not_fail_the_check(server_factory, tmp_path):
    """`| head -c 20`: the printing stops, the exit status still tells the answer (found in
    review: the client blamed the backend for its own closed stdout)."""
    path = str(tmp_path / 'app.sock')
    server_factory([PROBE, '--bind', 'unix:' + path, '--log-level', 'warning'], path)
    reader, writer = os.pipe()
    proc = subprocess.Popen([sys.executable, '-m', 'flupfast.client', 'fcgi', 'unix:' + path,
                             '/download?size=4000000'], cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=ROOT), stdout=writer,
                            stderr=subprocess.PIPE)
    os.close(writer)
    assert len(os.read(reader, 20)) > 0
    os.close(reader)
    _, stderr = proc.communicate(timeout=60)
    assert (proc.returncode, stderr) == (0, b'')
