"""FCGI_ABORT_REQUEST (spec 5.4) on a connection over a socketpair, both backends, one request
at a time and multiplexed: mid-body the app's pending read ends and END_REQUEST goes out at
once; after the body the app runs to completion (as flup); a KEEP_CONN connection stays usable.
The modes' own processes are covered by tests/integration/test_fastcgi_abort.py.
"""
import threading

import pytest

from flupfast.protocols import fastcgi as f
from tests.fcgi_client import read_response, request_bytes
from tests.unit.test_fastcgi_connection import Harness, use_backend  # noqa: F401 (fixture)

# A failure bound only: without the fix no END_REQUEST comes until the web server closes.
ANSWER_BOUND = 5.0


def abort_record(request_id=1):
    return f.encode_record(f.FCGI_ABORT_REQUEST, request_id)


def started_upload(sock, declared=1 << 20, sent=64 << 10, request_id=1):
    """BEGIN, PARAMS (CONTENT_LENGTH ``declared``) and ``sent`` bytes of STDIN, no end."""
    head, _ = request_bytes('/', body=b'x', request_id=request_id, keep_conn=True, split=True,
                            params={'CONTENT_LENGTH': str(declared), 'REQUEST_METHOD': 'POST'})
    sock.sendall(head + f.encode_record(f.FCGI_STDIN, request_id, b'u' * 32768)
                 + f.encode_record(f.FCGI_STDIN, request_id, b'u' * (sent - 32768)))


class ReadingApp:
    """Reads the whole body; records what the read raised, or how much it got."""

    def __init__(self):
        self.reading = threading.Event()
        self.outcome = []

    def __call__(self, environ, start_response):
        self.reading.set()
        try:
            data = environ['wsgi.input'].read()
        except ConnectionError as exc:
            self.outcome.append(type(exc).__name__)
            raise
        self.outcome.append(len(data))
        start_response('200 OK', [('Content-Type', 'text/plain')])
        return [b'read %d' % len(data)]


def hello(environ, start_response):
    start_response('200 OK', [('Content-Type', 'text/plain')])
    return [b'next one']


@pytest.mark.parametrize('multiplexed', [False, True], ids=['single-request', 'multiplexed'])
def test_abort_mid_body_ends_the_read_and_answers(use_backend, multiplexed):
    app = ReadingApp()
    harness = Harness(lambda e, s: (app if e['PATH_INFO'] == '/' else hello)(e, s),
                      multiplexed=multiplexed)
    sock = harness.connect()
    started_upload(sock)
    assert app.reading.wait(ANSWER_BOUND)
    sock.sendall(abort_record())
    resp = read_response(sock, timeout=ANSWER_BOUND)
    assert resp.end == (0, f.FCGI_REQUEST_COMPLETE)
    assert app.outcome == ['ClientDisconnected']
    # The web server ignores what follows an abort; nothing of the app's 500 is sent.
    assert f.FCGI_STDOUT not in resp.records
    # KEEP_CONN: the same connection serves the next request (the same id, as nginx reuses 1).
    sock.sendall(request_bytes('/next', keep_conn=True))
    nxt = read_response(sock, timeout=ANSWER_BOUND)
    assert (nxt.status, nxt.body, nxt.end) == (200, b'next one', (0, 0))
    sock.close()
    harness.join()


@pytest.mark.parametrize('multiplexed', [False, True], ids=['single-request', 'multiplexed'])
def test_abort_mid_body_after_output_still_ends_with_end_request(use_backend, multiplexed):
    """The app wrote before reading (its response began): the abort is not a failed response
    (``truncated-response-signalled`` does not apply), END_REQUEST still ends it."""
    reading = threading.Event()

    def app(environ, start_response):
        if environ['PATH_INFO'] == '/next':
            return hello(environ, start_response)
        write = start_response('200 OK', [])
        write(b'early ')
        reading.set()
        return [environ['wsgi.input'].read()]
    harness = Harness(app, multiplexed=multiplexed)
    sock = harness.connect()
    started_upload(sock)
    assert reading.wait(ANSWER_BOUND)
    sock.sendall(abort_record())
    resp = read_response(sock, timeout=ANSWER_BOUND)
    assert resp.end == (0, f.FCGI_REQUEST_COMPLETE)
    sock.sendall(request_bytes('/next', keep_conn=True))
    assert read_response(sock, timeout=ANSWER_BOUND).body == b'next one'
    sock.close()
    harness.join()


@pytest.mark.parametrize('multiplexed', [False, True], ids=['single-request', 'multiplexed'])
def test_abort_before_params_end_answers_without_running_the_app(use_backend, multiplexed):
    ran = []

    def app(environ, start_response):
        ran.append(environ['PATH_INFO'])
        return hello(environ, start_response)
    harness = Harness(app, multiplexed=multiplexed)
    sock = harness.connect()
    sock.sendall(f.encode_begin_request(1, f.FCGI_RESPONDER, f.FCGI_KEEP_CONN)
                 + f.encode_record(f.FCGI_PARAMS, 1, f.encode_params([('PATH_INFO', '/a')]))
                 + abort_record())
    resp = read_response(sock, timeout=ANSWER_BOUND)
    assert resp.end == (0, f.FCGI_REQUEST_COMPLETE)
    sock.sendall(request_bytes('/b', keep_conn=True, params={'PATH_INFO': '/b'}))
    assert read_response(sock, timeout=ANSWER_BOUND).body == b'next one'
    assert ran == ['/b']
    sock.close()
    harness.join()


@pytest.mark.parametrize('multiplexed', [False, True], ids=['single-request', 'multiplexed'])
def test_abort_after_body_lets_the_app_finish(use_backend, multiplexed):
    """The app cannot be interrupted (flup: "the request runs to completion"): END_REQUEST
    follows its return, REQUEST_COMPLETE, and the connection stays usable."""
    running, release = threading.Event(), threading.Event()
    finished = []

    def app(environ, start_response):
        if environ['PATH_INFO'] == '/next':
            return hello(environ, start_response)
        body = environ['wsgi.input'].read()
        running.set()
        assert release.wait(ANSWER_BOUND)
        finished.append(len(body))
        start_response('200 OK', [])
        return [b'late']
    harness = Harness(app, multiplexed=multiplexed)
    sock = harness.connect()
    sock.sendall(request_bytes('/', body=b'b' * 1000, keep_conn=True))
    assert running.wait(ANSWER_BOUND)
    sock.sendall(abort_record())
    release.set()
    resp = read_response(sock, timeout=ANSWER_BOUND)
    assert resp.end == (0, f.FCGI_REQUEST_COMPLETE)
    assert finished == [1000]
    sock.sendall(request_bytes('/next', keep_conn=True))
    assert read_response(sock, timeout=ANSWER_BOUND).body == b'next one'
    sock.close()
    harness.join()
