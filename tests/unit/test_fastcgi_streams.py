"""A FastCGI request's streams are built by its connection and share only ``RequestIO`` with
it: nothing leads from a stream back to its request, so a served request, its streams and a
closed connection are freed by reference counting alone (the cyclic collector off), on both
backends; an input stream kept past its request reads nothing more."""
import gc
import socket
import weakref

import pytest

from flupfast.server import fcgi_base
from tests.fcgi_client import read_response, request_bytes
from tests.unit.connection_harness import FASTCGI_TWINS, ConnectionHarness, backend_fixture, echo

use_backend = backend_fixture(*FASTCGI_TWINS)


class Harness(ConnectionHarness):
    unix_address = None

    def __init__(self, app, **kwargs):
        super().__init__(fcgi_base.BaseFCGIServer(app, **kwargs))
        self.requests = []
        outer = self

        class Request(fcgi_base.Request):
            def __init__(self, *args):
                super().__init__(*args)
                outer.requests.append(weakref.ref(self))
        self.server.request_class = Request

    @property
    def connection_class(self):
        return self.server._connectionClass


@pytest.fixture
def no_cyclic_gc():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize('keep_conn', [False, True])
def test_requests_freed_without_the_cyclic_collector(use_backend, no_cyclic_gc, keep_conn):
    harness = Harness(echo)
    with harness.connect() as sock:
        for n in range(3):
            sock.sendall(request_bytes('/', body=b'x' * (1000 * n), keep_conn=keep_conn))
            resp = read_response(sock)
            assert resp.body.endswith(b' %d' % (1000 * n))
            if not keep_conn:
                break
    harness.join()
    assert harness.requests
    assert [ref() for ref in harness.requests] == [None] * len(harness.requests)


def test_the_connection_builds_the_streams(use_backend):
    harness = Harness(echo)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        conn = harness.connection_class(theirs, None, harness.server, None)
        req = fcgi_base.Request(conn, None, None)
        assert (req.stdin, req.stdout, req.stderr) == (None, None, None)
        req.requestId = 3
        req.role = fcgi_base.FCGI_RESPONDER
        conn.open_streams(req)
        assert req.stdout._io is req.stderr._io is req._io
        assert req._io.request_id == 3
        # Nothing a stream holds is the request.
        for stream in (req.stdin, req.stdout, req.stderr):
            assert req not in gc.get_referents(stream)
            for referent in gc.get_referents(stream):
                assert req not in gc.get_referents(referent)


def test_input_stream_kept_past_its_request_reads_nothing(use_backend):
    """An app that keeps wsgi.input and reads it after its response must not take the next
    request's records off the connection (KEEP_CONN)."""
    kept = []

    def app(environ, start_response):
        kept.append(environ['wsgi.input'])
        if len(kept) == 2:
            assert kept[0].read() == b''  # the first request's stream, its request ended
        start_response('200 OK', [])
        return [environ['wsgi.input'].read()]
    harness = Harness(app)
    with harness.connect() as sock:
        sock.sendall(request_bytes('/', body=b'first', keep_conn=True))
        assert read_response(sock).body == b'first'
        sock.sendall(request_bytes('/', body=b'second', keep_conn=True))
        assert read_response(sock).body == b'second'
    harness.join()


def test_input_stream_kept_past_a_closed_connection_reads_nothing(use_backend):
    """The app returned without reading a body whose end had not come; the connection closed.
    The stream read afterwards ends (as flup's), it does not touch the closed socket."""
    kept = []

    def app(environ, start_response):
        kept.append(environ['wsgi.input'])
        start_response('200 OK', [])
        return [b'done']
    harness = Harness(app)
    with harness.connect() as sock:
        data = request_bytes('/', body=b'body')
        sock.sendall(data[:-8])  # without the empty STDIN record that ends the body
        assert read_response(sock).body == b'done'
    harness.join()
    assert kept[0].read() == b''


@pytest.mark.parametrize('name', ['_FcgiStdout', '_FcgiStderr'])
def test_a_compiled_chain_stream_made_from_python_raises(name):
    """The compiled chain's streams are types an app can reach (``type(environ['wsgi.errors'])``)
    and call: one made from Python belongs to no request, and says so (found in review: its
    flush read the missing request's place and crashed the process)."""
    from tests.conftest import COMPILED
    if COMPILED is None:
        pytest.skip('flupfast._speedups is not built')
    from flupfast import _speedups
    stream = getattr(_speedups, name)()
    if name == '_FcgiStdout':
        with pytest.raises(ValueError, match='no FastCGI request'):
            stream.write(b'x')
    else:
        stream.write(b'x')  # stderr holds its bytes until flushed
    for call in (stream.flush, stream.close, lambda: stream.write_parts([b'x'])):
        with pytest.raises(ValueError, match='no FastCGI request'):
            call()
