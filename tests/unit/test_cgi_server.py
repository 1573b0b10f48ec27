"""flupfast.server.cgi.WSGIServer run as a real CGI process: the request in the environment
and on stdin, the response read from stdout, on both backends (the body is read through the
InputStream twin). flup's own runs on neither: it writes str to sys.stdout
(known_differences 'cgi-server-bytes').
"""
import hashlib
import json
import os
import subprocess
import sys

import pytest

from tests.apps import probe

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = ('from tests.apps.probe import app\n'
          'from flupfast.server.cgi import WSGIServer\n'
          'print("printed before run() goes first")\n'
          'WSGIServer(app).run()\n')

BASE_ENV = {'GATEWAY_INTERFACE': 'CGI/1.1', 'REQUEST_METHOD': 'GET', 'SCRIPT_NAME': '/cgi',
            'SERVER_NAME': 'localhost', 'SERVER_PORT': '80', 'SERVER_PROTOCOL': 'HTTP/1.1',
            'REMOTE_ADDR': '127.0.0.1', 'QUERY_STRING': ''}


def run_cgi(backend, path_info, stdin=b'', env=None, script=SCRIPT):
    """(status int, [(name, value)], body bytes, stderr text, returncode)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(('HTTP', 'CONTENT_'))}
    full.update(BASE_ENV, PATH_INFO=path_info, PYTHONPATH=ROOT,
                FLUPFAST_SPEEDUPS='0' if backend.name == 'py' else '1')
    full.update(env or {})
    proc = subprocess.run([sys.executable, '-c', script], input=stdin, env=full, cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    out = proc.stdout
    first, _, out = out.partition(b'\n')
    assert first == b'printed before run() goes first', proc.stdout[:200]
    head, sep, body = out.partition(b'\r\n\r\n')
    assert sep, (proc.stdout[:300], proc.stderr[-2000:])
    lines = head.split(b'\r\n')
    assert lines[0].startswith(b'Status: '), lines
    headers = [tuple(line.decode('latin-1').split(': ', 1)) for line in lines[1:]]
    return int(lines[0][8:11]), headers, body, proc.stderr.decode('utf-8', 'replace'), \
        proc.returncode


def test_hello(backend):
    status, headers, body, _, rc = run_cgi(backend, '/')
    assert (status, body, rc) == (200, probe.HELLO, 0)
    # flup's rule: one-item result -> Content-Length added after the app's headers.
    assert headers == [('Content-Type', 'text/plain'), ('Content-Length', str(len(body)))]


def test_environ_flags(backend):
    status, _, body, _, _ = run_cgi(backend, '/environ', env={'HTTPS': 'on'})
    view = json.loads(body)
    assert status == 200
    assert (view['wsgi.multithread'], view['wsgi.multiprocess'], view['wsgi.run_once']) == \
        (False, True, True)
    assert view['wsgi.url_scheme'] == 'https' and view['wsgi.version'] == [1, 0]
    assert view['SCRIPT_NAME'] == '/cgi' and view['PATH_INFO'] == '/environ'
    assert view['wsgi.input.type'] == 'InputStream'


def test_environ_values_are_latin1_bytes_as_str(backend):
    """PEP 3333: a UTF-8 PATH_INFO reaches the app as one latin-1 character per byte, as over
    FastCGI (flup hands on os.environ's locale-decoded text)."""
    view = json.loads(run_cgi(backend, '/environ/caf\u00e9', env={'QUERY_STRING': 'q=\u00fc'})[2])
    assert view['PATH_INFO'] == '/environ/caf\u00c3\u00a9'
    assert view['QUERY_STRING'] == 'q=\u00c3\u00bc'


@pytest.mark.parametrize('mode', ['read', 'read65536', 'readline', 'iter'])
def test_binary_upload_bounded_by_content_length(backend, mode):
    body = bytes(range(256)) * 4096 + b'\r\n\x00\n' * 1000  # 1 MiB and then some, binary
    status, _, out, _, _ = run_cgi(
        backend, '/upload', stdin=body + b'TRAILING BYTES PAST CONTENT_LENGTH',
        env={'REQUEST_METHOD': 'POST', 'QUERY_STRING': 'mode=' + mode,
             'CONTENT_LENGTH': str(len(body))})
    result = json.loads(out)
    assert status == 200
    assert (result['length'], result['sha256']) == (len(body), hashlib.sha256(body).hexdigest())


def test_short_stdin_ends_the_body(backend):
    """stdin closed before CONTENT_LENGTH: the app sees the bytes that came, no hang."""
    status, _, out, _, _ = run_cgi(backend, '/upload', stdin=b'only this',
                                   env={'REQUEST_METHOD': 'POST', 'CONTENT_LENGTH': '1000',
                                        'QUERY_STRING': 'mode=read'})
    assert status == 200 and json.loads(out)['length'] == len(b'only this')


def test_streamed_bytes_and_write_and_str(backend):
    status, headers, body, _, _ = run_cgi(backend, '/stream',
                                          env={'QUERY_STRING': 'chunks=5&size=70000'})
    assert status == 200
    assert hashlib.sha256(body).hexdigest() == dict(headers)['X-Sha256']
    assert 'Content-Length' not in dict(headers)  # a generator: no length is invented
    assert run_cgi(backend, '/write')[2] == b''.join(probe.WRITE_CHUNKS)
    assert run_cgi(backend, '/str')[2] == probe.STR_BODY.encode('latin-1')


# A FastCGI script run as plain CGI (fd 0 a pipe, not a socket): flup's CGI fallback.
FCGI_FALLBACK = SCRIPT.replace('flupfast.server.cgi', 'flupfast.server.fcgi')


@pytest.mark.parametrize('script', [SCRIPT, FCGI_FALLBACK], ids=['cgi', 'fcgi-fallback'])
def test_app_error_answers_500_and_logs(backend, script):
    status, headers, body, stderr, rc = run_cgi(backend, '/error', script=script)
    assert status == 500 and rc == 0
    assert dict(headers)['Content-Type'] == 'text/html'
    assert b'Unhandled Exception' in body
    assert 'RuntimeError: probe: error before start_response' in stderr


@pytest.mark.parametrize('script', [SCRIPT, FCGI_FALLBACK], ids=['cgi', 'fcgi-fallback'])
def test_error_after_first_chunk_truncates(backend, script):
    """The FastCGI fallback's request asks its connection whether a send was cut short and
    how to end a response begun (found in review: it had none, an AttributeError, no output
    and exit status 1)."""
    status, _, body, stderr, rc = run_cgi(backend, '/error-after', script=script)
    assert (status, body, rc) == (200, probe.ERROR_AFTER_FIRST, 0)
    assert 'error after the first chunk' in stderr


@pytest.mark.parametrize('script', [SCRIPT, FCGI_FALLBACK], ids=['cgi', 'fcgi-fallback'])
def test_a_request_with_fd_0_closed_has_an_empty_body(backend, script):
    """Python then has no sys.stdin (found in review: an AttributeError before the app)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(('HTTP', 'CONTENT_'))}
    full.update(BASE_ENV, PATH_INFO='/upload', PYTHONPATH=ROOT,
                FLUPFAST_SPEEDUPS='0' if backend.name == 'py' else '1')
    proc = subprocess.run(['/bin/sh', '-c', 'exec "$0" -c "$1" 0<&-', sys.executable, script],
                          env=full, cwd=ROOT, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.partition(b'\r\n\r\n')[2])['length'] == 0
