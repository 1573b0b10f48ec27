"""flupfast.ops without a server: the access log's format language (gunicorn's atoms), its
rotation check, the ping app, the slow log's once-per-request stack, and the gateway observer
that feeds them (a failed app logs 500, nothing is observed when off)."""
import io
import logging
import os
import threading
import time

import pytest

from flupfast import gateway, ops
from flupfast.ops.access_log import AccessLog, compile_format
from flupfast.ops.slow_log import SlowLog

ENVIRON = {'REQUEST_METHOD': 'POST', 'REQUEST_URI': '/a%20b?x=1', 'QUERY_STRING': 'x=1',
           'SCRIPT_NAME': '', 'PATH_INFO': '/a b', 'SERVER_PROTOCOL': 'HTTP/1.1',
           'REMOTE_ADDR': '10.0.0.7', 'HTTP_USER_AGENT': 'ua/1', 'HTTP_X_ID': 'abc',
           'REMOTE_USER': 'ann'}


class Responder:
    def __init__(self):
        self.out = []

    def send_head(self, status, headers, data, more):
        self.out.append((status, headers, data))

    def send_body(self, data, more):
        self.out.append(data)


def run(backend, app, observer):
    gateway.set_observer(observer)
    try:
        return backend.run_application(app, dict(ENVIRON, **{'wsgi.input': io.BytesIO()}),
                                       Responder())
    finally:
        gateway.set_observer(None)


def hello(environ, start_response):
    start_response('201 Created', [('Content-Type', 'text/plain'), ('X-Out', 'yes')])
    return [b'hello', b' world']


def line_of(backend, tmp_path, fmt, app=hello):
    log = AccessLog(str(tmp_path / 'a.log'), fmt)
    try:
        run(backend, app, log)
    except RuntimeError:
        pass
    log.close()
    return (tmp_path / 'a.log').read_text()


def test_combined_format(tmp_path, backend):
    line = line_of(backend, tmp_path, ops.DEFAULT_FORMAT)
    assert line.startswith('10.0.0.7 - ann [')
    assert line.endswith('] "POST /a%20b?x=1 HTTP/1.1" 201 11 "-" "ua/1"\n')


def test_every_atom(tmp_path, backend):
    line = line_of(backend, tmp_path, '%(m)s|%(U)s|%(q)s|%(H)s|%(s)s|%(B)s|%(b)s|%(p)s|%({x-id}i)s|'
                             '%({x-out}o)s|%({REMOTE_ADDR}e)s|%(nope)s|100%%|%(T)s|%(M)s|%(D)s|%(L)s')
    fields = line.rstrip('\n').split('|')
    assert fields[:13] == ['POST', '/a%20b', 'x=1', 'HTTP/1.1', '201', '11', '11',
                           '<%d>' % os.getpid(), 'abc', 'yes', '10.0.0.7', '-', '100%']
    assert fields[13] == '0' and int(fields[15]) >= 0 and float(fields[16]) >= 0


def test_a_failing_app_is_logged_as_its_500(tmp_path, backend):
    def broken(environ, start_response):
        raise RuntimeError('boom')
    assert line_of(backend, tmp_path, '%(s)s %(b)s', broken) == '500 -\n'


def test_empty_body_is_a_dash_in_b_and_0_in_b_upper(tmp_path, backend):
    def empty(environ, start_response):
        start_response('204 No Content', [])
        return []
    assert line_of(backend, tmp_path, '%(s)s %(b)s %(B)s', empty) == '204 - 0\n'


def test_the_format_is_compiled_once():
    line = compile_format('%(h)s "%(m)s" 100%%s %({x-id}i)s %({x-out}o)s')
    assert line({'REMOTE_ADDR': 'a', 'REQUEST_METHOD': 'GET', 'HTTP_X_ID': '7'},
                _Head(), False, 0.0) == b'a "GET" 100%s 7 yes\n'


def test_header_names_cannot_inject_code(tmp_path, backend):
    line = line_of(backend, tmp_path, "%({x'+str+'y}i)s %({a\"\\\\}o)s %({__import__}e)s")
    assert line == '- - -\n'


class _Head:
    headers = [(b'X-Out', b'yes')]


def test_a_rotated_log_is_opened_anew(tmp_path, monkeypatch, backend):
    monkeypatch.setattr('flupfast.ops.access_log.REOPEN_CHECK_INTERVAL', 0)
    path = tmp_path / 'a.log'
    log = AccessLog(str(path), '%(s)s')
    run(backend, hello, log)
    os.rename(path, tmp_path / 'a.log.1')
    run(backend, hello, log)  # logrotate moved it: this line goes to a new a.log
    log.flush()
    assert path.read_text() == '201\n'
    path.unlink()
    run(backend, hello, log)  # removed: created again
    log.close()
    assert (tmp_path / 'a.log.1').read_text() == '201\n'
    assert path.read_text() == '201\n'


def test_client_values_are_escaped_as_nginx_logs_them():
    """A newline (here in the user nginx decodes from any Authorization header) would forge
    a line, a '"' end a quoted field early (found in review): escaped as nginx's log does."""
    line = compile_format(ops.DEFAULT_FORMAT)(
        dict(ENVIRON, REMOTE_USER='x\n1.2.3.4 - admin', REQUEST_URI='/caf\xc3\xa9\\"',
             HTTP_USER_AGENT='Mozilla" 404 0 "http://evil/', HTTP_REFERER='\x1b[31m\u20ac'),
        type('R', (), {'status': None, 'sent': None}), False, 0.0)
    assert line.count(b'\n') == 1
    assert line.startswith(b'10.0.0.7 - x\\x0A1.2.3.4 - admin [')
    assert line.endswith(b'] "POST /caf\\xC3\\xA9\\x5C\\x22 HTTP/1.1" - - '
                         b'"\\x1B[31m\\xE2\\x82\\xAC" "Mozilla\\x22 404 0 \\x22http://evil/"\n')
    every = compile_format('%(m)s %(U)s %(q)s %(H)s %({x-id}i)s %({x-out}o)s %({X}e)s')
    assert every({'REQUEST_METHOD': 'G\tT', 'REQUEST_URI': '/\r?q=\x7f', 'QUERY_STRING': '\x00',
                  'SERVER_PROTOCOL': 'H"', 'HTTP_X_ID': '\n', 'X': 'a b'},
                 type('R', (), {'headers': [(b'X-Out', b'\xff')]}), False, 0.0) == (
        b'G\\x09T /\\x0D \\x00 H\\x22 \\x0A \\xFF a b\n')


def test_a_log_that_cannot_be_opened_again_keeps_the_old_file(tmp_path, monkeypatch, caplog,
                                                               backend):
    """Its directory gone (or a read-only file system): the request is answered, the line
    goes to the old file, one warning, and the next check opens the file once it can (found
    in review: the OSError failed the request, its response cut off)."""
    monkeypatch.setattr('flupfast.ops.access_log.REOPEN_CHECK_INTERVAL', 0)
    folder = tmp_path / 'logs'
    folder.mkdir()
    log = AccessLog(str(folder / 'a.log'), '%(s)s')
    os.rename(folder, tmp_path / 'rotated')
    for _ in range(2):
        run(backend, hello, log)  # answered: no error
    log.flush()
    assert (tmp_path / 'rotated' / 'a.log').read_text() == '201\n' * 2
    assert caplog.text.count('cannot open') == 1
    folder.mkdir()
    run(backend, hello, log)
    log.close()
    assert (folder / 'a.log').read_text() == '201\n'


def test_no_observer_no_cost(backend):
    calls = []

    class Spy:
        def begin(self, environ):
            calls.append('begin')

        def end(self, token, response, failed):
            calls.append('end')
    run(backend, hello, None)
    assert calls == []
    run(backend, hello, Spy())
    assert calls == ['begin', 'end']


def test_ping_answers_only_its_path():
    app = ops.Ping(hello, '/ping', 'ok')
    seen = []
    assert app({'SCRIPT_NAME': '', 'PATH_INFO': '/ping'},
               lambda s, h: seen.append((s, dict(h)))) == [b'ok']
    assert seen[0][0] == '200 OK' and seen[0][1]['Content-Length'] == '2'
    assert app({'SCRIPT_NAME': '/ping', 'PATH_INFO': ''}, lambda s, h: None) == [b'ok']
    assert app({'SCRIPT_NAME': '', 'PATH_INFO': '/pingx'}, lambda s, h: None) == [b'hello',
                                                                                  b' world']


def test_slow_log_logs_a_stack_once(caplog):
    slow = SlowLog(0.2)
    release = threading.Event()
    started = threading.Event()

    def waiting_app():
        token = slow.begin({'REQUEST_METHOD': 'GET', 'REQUEST_URI': '/wait'})
        started.set()
        release.wait(10)
        slow.end(token, None, False)
    thread = threading.Thread(target=waiting_app, daemon=True)
    thread.start()
    started.wait(10)
    with caplog.at_level(logging.WARNING, logger='flupfast.slowlog'):
        slow.check(time.monotonic())            # too early: nothing
        slow.check(time.monotonic() + 1)        # slow: its stack
        slow.check(time.monotonic() + 2)        # already reported
    release.set()
    thread.join(10)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and slow.slow_requests == 1
    assert 'slow request: GET /wait running for' in messages[0]
    assert 'in waiting_app' in messages[0] and 'release.wait(10)' in messages[0]


def test_slow_log_needs_positive_seconds():
    with pytest.raises(ValueError):
        SlowLog(0)


def test_literal_braces_percent_and_constants_survive_compilation():
    line = compile_format('{%(l)s} 100%% {{x}} %(m)s')
    assert line({'REQUEST_METHOD': 'GET'}, _Head(), False, 0.0) == b'{-} 100% {{x}} GET\n'
    assert compile_format('no fields, 5%%')({}, _Head(), False, 0.0) == b'no fields, 5%\n'


def test_the_request_line_without_request_uri():
    line = compile_format('"%(r)s"')
    environ = {'REQUEST_METHOD': 'GET', 'SCRIPT_NAME': '/app', 'PATH_INFO': '/x',
               'QUERY_STRING': 'a=1', 'SERVER_PROTOCOL': 'HTTP/1.0'}
    assert line(environ, _Head(), False, 0.0) == b'"GET /app/x?a=1 HTTP/1.0"\n'
    assert line(dict(environ, REQUEST_URI=''), _Head(), False, 0.0) == b'"GET  HTTP/1.0"\n'


def test_the_time_field_follows_the_second(monkeypatch):
    monkeypatch.setenv('TZ', 'UTC')
    time.tzset()
    try:
        line = compile_format('%(t)s')
        first = line({}, _Head(), False, 1000000000.25)
        assert first == b'[09/Sep/2001:01:46:40 +0000]\n'
        assert line({}, _Head(), False, 1000000000.75) == first   # the same second: cached
        assert line({}, _Head(), False, 1000000001.0) == b'[09/Sep/2001:01:46:41 +0000]\n'
        assert line({}, _Head(), False, 999999999.5) == b'[09/Sep/2001:01:46:39 +0000]\n'
    finally:
        monkeypatch.delenv('TZ')
        time.tzset()


def test_the_status_of_a_response_seen_before_and_of_a_failure():
    line = compile_format('%(s)s')

    class Sent:
        status, headers_sent = b'404 Not Found', True
    assert line({}, Sent(), False, 0.0) == line({}, Sent(), False, 0.0) == b'404\n'
    assert line({}, Sent(), True, 0.0) == b'404\n'   # failed after the head: its status

    class Unsent:
        status, headers_sent = b'200 OK', False

    class Ok:
        status, headers_sent = b'200 OK', True
    assert line({}, Ok(), False, 0.0) == b'200\n'     # now a status seen before ...
    assert line({}, Unsent(), True, 0.0) == b'500\n'  # ... but failed before: the error page
