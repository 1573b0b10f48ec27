"""The request timeout never desynchronises a kept connection. It raises wherever the app's
thread is, also inside a body read right after the receive returned, before the parser saw
the bytes: a kept FastCGI connection (KEEP_CONN, nginx's fastcgi_keep_conn, Apache's
enablereuse) whose records went on from there read the client's own upload as records, a
request the client chose (REMOTE_USER=admin here) served, its answer given to the next client
on the web server's pooled connection. The connection must end instead, also when the app's
error path reads the body again (found in review, twice).

A fake web server drives the server of the command line, on both backends: the compiled one
reads in C unless the socket has a timeout (the app sets a default one, as some do).
"""
import os
import socket
import struct
import time

import pytest

from flupfast.protocols import fastcgi as fcgi
from tests.integration.backend_process import server_factory  # noqa: F401  (a fixture)

_HEADER = struct.Struct('!BBHHBx')

APP = '''
import socket
if %(default_timeout)r:
    socket.setdefaulttimeout(30)


def application(environ, start_response):
    try:
        body = environ['wsgi.input'].read()
    except Exception:
        environ['wsgi.input'].read()  # an error path that logs the body reads it again
        raise
    out = ('path=%%s user=%%s body=%%d\\n' %% (environ['PATH_INFO'],
                                            environ.get('REMOTE_USER', '-'), len(body))).encode()
    start_response('200 OK', [('Content-Type', 'text/plain')])
    return [out]
'''


def record(record_type, request_id, content=b''):
    pad = -len(content) & 7
    return _HEADER.pack(1, record_type, request_id, len(content), pad) + content + b'\0' * pad


def begin(environ):
    return (fcgi.encode_begin_request(1, fcgi.FCGI_RESPONDER, fcgi.FCGI_KEEP_CONN)
            + fcgi.encode_stream(fcgi.FCGI_PARAMS, 1, fcgi.encode_params(environ.items())))


def environ(method, path, **extra):
    return dict({'SERVER_NAME': 'localhost', 'SERVER_PORT': '80', 'SCRIPT_NAME': '',
                 'SERVER_PROTOCOL': 'HTTP/1.1', 'REQUEST_METHOD': method, 'PATH_INFO': path,
                 'REQUEST_URI': path, 'QUERY_STRING': ''}, **extra)


def responses(sock, timeout):
    """The (stdout, end) of each request answered until EOF or ``timeout``."""
    sock.settimeout(timeout)
    data, answers, out = b'', [], b''
    while True:
        while len(data) >= 8:
            _, kind, _, length, pad = _HEADER.unpack_from(data)
            if len(data) < 8 + length + pad:
                break
            content, data = data[8:8 + length], data[8 + length + pad:]
            if kind == fcgi.FCGI_STDOUT:
                out += content
            elif kind == fcgi.FCGI_END_REQUEST:
                answers.append(out)
                out = b''
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            return answers, False
        if not chunk:
            return answers, True
        data += chunk


@pytest.mark.parametrize('backend, default_timeout', [('0', False), ('1', False), ('1', True)],
                         ids=['pure', 'compiled', 'compiled-python-receive'])
def test_a_body_read_the_timeout_cuts_short_never_reads_the_upload_as_records(
        server_factory, tmp_path, backend, default_timeout):
    (tmp_path / 'readall.py').write_text(APP % {'default_timeout': default_timeout})
    path = str(tmp_path / 'app.sock')
    server = server_factory(['readall:application', '--bind', 'unix:' + path, '--request-timeout', '1'],
                    path, env={'FLUPFAST_SPEEDUPS': backend,
                               'PYTHONPATH': os.pathsep.join([os.getcwd(), str(tmp_path)])})
    # The upload's second record holds, where the parser lands if the 512 bytes received
    # right after the stall are dropped: the end of request 1's STDIN, a request of the
    # client's choosing, and a record of an unused id that swallows the rest.
    head, dropped, first = 96, 512, 2048
    land = dropped - 8
    smuggled = (record(fcgi.FCGI_STDIN, 1) + begin(environ('GET', '/smuggled',
                                                             REMOTE_USER='admin'))
                + record(fcgi.FCGI_STDIN, 1))
    rest = 4096 - land - len(smuggled) - 8
    second = (b'b' * land + smuggled + _HEADER.pack(1, fcgi.FCGI_STDIN, 7, rest + 8, 0)
              + b'c' * rest)
    one = record(fcgi.FCGI_STDIN, 1, b'a' * first)
    tail = one[8 + head + dropped:] + record(fcgi.FCGI_STDIN, 1, second) \
        + record(fcgi.FCGI_STDIN, 1)
    with socket.socket(socket.AF_UNIX) as web:
        web.connect(path)
        web.sendall(begin(environ('POST', '/upload', REMOTE_USER='mallory',
                                  CONTENT_LENGTH=str(first + len(second))))
                    + one[:8 + head])
        time.sleep(2.0)  # past the timeout: the app waits in its read
        web.sendall(one[8 + head:8 + head + dropped])
        time.sleep(0.3)
        web.sendall(tail)
        answers, closed = responses(web, 3.0)
        assert len(answers) == 1 and answers[0].startswith(b'Status: 500'), answers
        if not closed:  # kept: the next request is the next client's own
            web.sendall(begin(environ('GET', '/bob', REMOTE_USER='bob'))
                        + record(fcgi.FCGI_STDIN, 1))
            answers, _ = responses(web, 3.0)
            assert [answer.rpartition(b'\r\n\r\n')[2] for answer in answers] == [
                b'path=/bob user=bob body=0\n'], answers
    assert '/smuggled' not in server.stop()
