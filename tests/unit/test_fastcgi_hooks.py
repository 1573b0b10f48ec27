"""flup's hooks around a FastCGI request, overridden as flup users override them, on both
backends: the compiled connection loop (``run_fcgi``) runs flupfast's own connection methods,
flup's Request and the server's ``handler`` and ``_sanitizeEnv`` in C, and must hand the whole
connection to the pure loop when any of them is overridden, on the class or the instance, or
patched in later. Also: a connection leaves no reference cycle behind (the collector is not
needed to free it), whatever way its request ended.
"""
import gc
import logging
import socket
import time

import pytest

from flupfast import fastcgi_connection
from flupfast.protocols import fastcgi as f
from flupfast.server import fcgi_base
from tests.fcgi_client import read_response, request_bytes
from tests.unit.connection_harness import hello, read_to_eof
from tests.unit.hook_spies import (
    SETTINGS_SEEN_OTHERWISE, mine, mount_by_sanitize, spy_on_instance, wraps_spy)
from tests.unit.test_fastcgi_connection import Harness, environ_app, use_backend  # noqa: F401


def subclassed(**attrs):
    """A Harness whose server is a BaseFCGIServer subclass with ``attrs``."""
    server_class = type('Server', (fcgi_base.BaseFCGIServer,), attrs)

    class SubHarness(Harness):
        def __init__(self, app, **kwargs):
            Harness.__bases__[0].__init__(self, server_class(app, **kwargs))
    return SubHarness


def with_connection_class(connection_class):
    class SubHarness(Harness):
        @property
        def connection_class(self):
            return connection_class
    return SubHarness


def test_a_handler_overridden_on_the_class_is_called(use_backend):
    def handler(self, req):
        req.stdout.write(b'Status: 203 Mine\r\n\r\n' + req.params['REQUEST_URI'].encode())
        return f.FCGI_REQUEST_COMPLETE, 0
    resp = subclassed(handler=handler)(hello).request('/x')
    assert (bytes(resp.stdout), resp.end[0]) == (b"Status: 203 Mine\r\n\r\n/x", 0)


@pytest.mark.parametrize('name', ['handler', '_sanitizeEnv'])
def test_a_hook_set_on_the_instance_is_called(use_backend, name):
    h = Harness(environ_app)
    called = spy_on_instance(h.server, name)
    assert eval(h.request('/a?q=1').body)['QUERY_STRING'] == 'q=1'
    assert called == [name]


def test_an_overridden_sanitize_env_is_called(use_backend):
    def _sanitizeEnv(self, environ):
        fcgi_base.BaseFCGIServer._sanitizeEnv(self, environ)
        environ['SCRIPT_NAME'] = '/mounted'
    env = eval(subclassed(_sanitizeEnv=_sanitizeEnv)(environ_app).request('/a').body)
    assert env['SCRIPT_NAME'] == '/mounted'


def test_a_request_class_of_ones_own_runs(use_backend):
    class Request(fcgi_base.Request):
        def run(self):
            self.stdout.write(b'Status: 200 OK\r\n\r\nown request')
            self._end()
    h = subclassed(request_class=Request)(hello)
    assert h.request('/').body == b'own request'


def test_an_error_hook_of_ones_own_answers_a_raising_app(use_backend, caplog):
    def error(self, req):
        req.stdout.write(b'Status: 500 Mine\r\n\r\n' + req.params['REQUEST_METHOD'].encode()
                         + b' %d' % req.requestId)

    def app(environ, start_response):
        raise RuntimeError('boom')
    resp = subclassed(error=error)(app).request('/')
    assert bytes(resp.stdout) == b"Status: 500 Mine\r\n\r\nGET 1"
    assert b'RuntimeError: boom' in resp.stderr


@pytest.mark.parametrize('name', ['_dispatch', 'end_request', '_on_params', 'send', 'close',
                                  '_finish', '_read_events'])
def test_a_connection_method_of_ones_own_is_called(use_backend, name):
    calls = []
    stock = getattr(fastcgi_connection.FastCGIConnection, name)

    def method(self, *args):
        calls.append(name)
        return stock(self, *args)
    connection_class = type('Connection', (fcgi_base.Connection,), {name: method})
    h = with_connection_class(connection_class)(hello)
    resp = h.request('/')
    h.join()
    assert resp.body == b'Hello world!\n' and calls


def test_a_method_patched_into_flupfasts_class_between_requests_is_called(use_backend,
                                                                           monkeypatch):
    """flup-era sites patch the library's own classes: a patch made after requests were served
    counts from the next request on, and so does undoing it."""
    h = Harness(environ_app)
    assert eval(h.request('/a').body)['SCRIPT_NAME'] == ''
    mount_by_sanitize(monkeypatch, fcgi_base.BaseFCGIServer, '/patched')
    ended = wraps_spy(monkeypatch, fastcgi_connection.FastCGIConnection, 'end_request',
                      lambda req, *statuses: req.requestId)
    assert eval(h.request('/a').body)['SCRIPT_NAME'] == '/patched'
    assert ended == [1]
    monkeypatch.undo()
    assert eval(h.request('/a').body)['SCRIPT_NAME'] == ''
    assert ended == [1]


def test_a_handler_wrapped_with_functools_wraps_is_called(use_backend, monkeypatch):
    calls = wraps_spy(monkeypatch, fcgi_base.BaseFCGIServer, 'handler',
                      lambda req: req.params['REQUEST_URI'])
    assert Harness(hello).request('/wrapped').body == b'Hello world!\n'
    assert calls == ['/wrapped']


def test_a_request_timeout_serves_through_flups_request(use_backend, monkeypatch):
    """A connection with a timeout arms flup's watchdog in Request.run: the pure loop's."""
    runs = []
    stock = fastcgi_connection.FastCGIRequest.run

    def run(self):
        runs.append(self._timeout)
        stock(self)
    monkeypatch.setattr(fastcgi_connection.FastCGIRequest, 'run', run)
    h = Harness(hello)
    with h.connect(timeout=30) as sock:
        sock.sendall(request_bytes('/'))
        assert read_response(sock).body == b'Hello world!\n'
    assert runs == [30]


# -- no reference cycle per connection ------------------------------------------------------

def _raise_before_output(environ, start_response):
    raise RuntimeError('before')


def _raise_after_output(environ, start_response):
    start_response('200 OK', [('Content-Type', 'text/plain')])
    yield b'part'
    raise RuntimeError('after')


def _read_body(environ, start_response):
    start_response('200 OK', [('Content-Type', 'text/plain')])
    return [environ['wsgi.input'].read()]


CASES = {
    'hello': (hello, lambda: request_bytes('/')),
    'body read': (_read_body, lambda: request_bytes('/', body=b'b' * 100000, method='POST')),
    'body unread': (hello, lambda: request_bytes('/', body=b'b' * 100000, method='POST')),
    'kept, three requests': (hello, lambda: b''.join(
        request_bytes('/', keep_conn=True) for _ in range(3))),
    'error page': (_raise_before_output, lambda: request_bytes('/')),
    'truncated': (_raise_after_output, lambda: request_bytes('/')),
    'aborted': (hello, lambda: request_bytes('/', split=True)[0]
                + f.encode_record(f.FCGI_ABORT_REQUEST, 1)),
    'get values': (hello, lambda: f.encode_record(
        f.FCGI_GET_VALUES, 0, f.encode_params([('FCGI_MAX_CONNS', '')])) + request_bytes('/')),
}


@pytest.mark.parametrize('case', sorted(CASES))
def test_a_connection_leaves_no_reference_cycle(use_backend, case, caplog):
    app, data = CASES[case]
    server = fcgi_base.BaseFCGIServer(app)

    def once():
        ours, theirs = socket.socketpair()
        with ours:
            ours.sendall(data())
            ours.shutdown(socket.SHUT_WR)
            conn = server._connectionClass(theirs, None, server, None)
            conn.run()
    with caplog.at_level(logging.CRITICAL, logger='flupfast'):
        once()  # caches warmed
        gc.collect()
        gc.disable()
        try:
            for _ in range(5):
                once()
            assert gc.collect() == 0
        finally:
            gc.enable()


@pytest.mark.parametrize('hidden', ['served', 'closed', 'parked'])
def test_a_connection_class_hiding_a_state_field_is_served_as_python_sees_it(use_backend,
                                                                             hidden):
    """A class attribute named like one of ConnectionState's fields hides the compiled twin's
    field from Python (connection_state.py): the connection runs the pure loop, and what
    Python sees of it afterwards is what it served."""
    built = []

    class Connection(fcgi_base.Connection):
        def __init__(self, *args):
            super().__init__(*args)
            built.append(self)
    setattr(Connection, hidden, {'served': 0, 'closed': False, 'parked': False}[hidden])
    h = with_connection_class(Connection)(hello)
    resp = h.request('/')
    h.join()
    assert resp.body == b'Hello world!\n' and h.served == [1]
    assert [(conn.served, conn.closed, conn.parked) for conn in built] == [(1, True, False)]


@pytest.mark.parametrize('hidden', ['_parser', 'max_content', 'timeout'])
def test_a_connection_class_hiding_a_fastcgi_state_field_is_served_as_python_sees_it(
        use_backend, hidden):
    """Likewise for FastCGIState's fields (connection_state.py): __init__'s writes go to the
    instance's dict, past the compiled twin's field, which the pure loop does not read."""
    built = []

    class Connection(fcgi_base.Connection):
        def __init__(self, *args):
            super().__init__(*args)
            built.append(self)
    setattr(Connection, hidden, {'_parser': None, 'max_content': 8, 'timeout': 0}[hidden])
    h = with_connection_class(Connection)(hello)
    resp = h.request('/')
    h.join()
    assert resp.body == b'Hello world!\n' and h.served == [1]
    assert hidden in vars(built[0]) and built[0].closed


@pytest.mark.parametrize('how', sorted(SETTINGS_SEEN_OTHERWISE))
def test_the_servers_app_is_the_one_python_reads(use_backend, how):
    """The server's settings and app as Python reads them (test_scgi_hooks.py's cases)."""
    h = subclassed(**SETTINGS_SEEN_OTHERWISE[how])(hello)
    assert h.server.__dict__['application'] is hello
    assert h.request('/').body == b'mine'
    h.join()


def test_a_setting_changed_on_the_instance_applies_at_the_next_request(use_backend):
    h = Harness(hello)
    assert h.request('/').body == b'Hello world!\n'
    h.server.application = environ_app
    assert h.request('/a').body.startswith(b'{')
    h.server.roles = ()  # no role: FCGI_UNKNOWN_ROLE
    assert h.request('/').end == (0, f.FCGI_UNKNOWN_ROLE)
    h.join()


def _kept_pair(h, between):
    """Two requests on one kept connection, ``between(server)`` run between them."""
    sock = h.connect()
    sock.sendall(request_bytes('/', keep_conn=True))
    first = read_response(sock).body
    between(h.server)
    sock.sendall(request_bytes('/'))
    second = read_response(sock).body
    sock.close()
    h.join()
    return first, second


def _replace_dict(server):
    server.__dict__ = dict(server.__dict__, application=mine)


def _add_property(server):
    type(server).application = property(lambda self: mine)


def _swap_class(server):
    server.__class__ = type('Mine', (type(server),), {'application': property(
        lambda self: mine)})


@pytest.mark.parametrize('between', [_replace_dict, _add_property, _swap_class])
def test_a_server_changed_between_two_requests_of_a_kept_connection(use_backend, between):
    """The server's settings are read at every request, as Python reads them then: its dict
    replaced, a property added to its class, or its class changed while a connection is
    kept (found in review: the chain had kept the dict and the class's verdict)."""
    h = Harness(hello)
    h.server.__class__ = type('Server', (type(h.server),), {})  # ours to change
    assert _kept_pair(h, between) == (b'Hello world!\n', b'mine')


def _answer_mine(self, req):
    req.stdout.write(b'Status: 200 OK\r\n\r\nmine')
    return f.FCGI_REQUEST_COMPLETE, 0


def _handler_on_instance(server):
    server.handler = _answer_mine.__get__(server)


def _handler_on_class(server):
    type(server).handler = _answer_mine  # as an agent that wraps it once the site runs


class _MineRequest(fcgi_base.Request):
    def run(self):
        self.stdout.write(b'Status: 200 OK\r\n\r\nmine')
        self._end()


def _request_class_on_instance(server):
    server.request_class = _MineRequest


def _class_with_a_handler(server):
    server.__class__ = type('Mine', (type(server),), {'handler': _answer_mine})


@pytest.mark.parametrize('between', [_handler_on_instance, _handler_on_class,
                                     _request_class_on_instance, _class_with_a_handler])
def test_a_hook_changed_between_two_requests_of_a_kept_connection(use_backend, between):
    """Python asks for the server's handler and request class at every request, so a kept
    connection's next request is served by the ones set meanwhile, and so is the one after
    (found in review: the compiled chain had checked the hooks once per connection)."""
    h = Harness(hello)
    h.server.__class__ = type('Server', (type(h.server),), {})  # ours to change
    with h.connect() as sock:
        sock.sendall(request_bytes('/', keep_conn=True))
        assert read_response(sock).body == b'Hello world!\n'
        between(h.server)
        sock.sendall(request_bytes('/', keep_conn=True) + request_bytes('/'))
        assert read_response(sock).body == b'mine'
        assert read_response(sock).body == b'mine'
        assert read_to_eof(sock) == b''
    h.join()


def test_a_drain_kept_past_the_end_of_its_connection_reads_nothing(use_backend):
    """A connection class may keep the drain ``end_abruptly`` is given and call it later: by
    then the request has ended and there is nothing to read (found in review: the compiled
    drain read the ended request's place)."""
    kept = []

    class Connection(fcgi_base.Connection):
        def end_abruptly(self, unix_signal=b'', drain=None):
            kept.append(drain)
            super().end_abruptly(unix_signal, None)

    def app(environ, start_response):
        start_response('200 OK', [('Content-Type', 'text/plain')])
        yield b'part'
        raise RuntimeError('after the response began')

    h = with_connection_class(Connection)(app)
    with h.connect() as sock:
        sock.sendall(request_bytes('/', body=b'x' * 100))
        read_to_eof(sock)
    h.join()
    assert len(kept) == 1 and kept[0] is not None
    assert kept[0](time.monotonic() + 0.1) is None


class _ListEventsParser:
    """A parser of one's own (here wrapping flupfast's, its events as lists)."""

    def __init__(self):
        self._inner = fastcgi_connection._impl.FastCGIParser()

    @property
    def pending(self):
        return self._inner.pending

    def feed(self, data):
        return [list(event) for event in self._inner.feed(data)]


def test_a_parser_of_ones_own_is_used(use_backend):
    """A connection class whose __init__ installs its own parser is served through it (found
    in review: the compiled chain took its events for tuples and crashed on lists)."""
    fed = []

    class Connection(fastcgi_connection.FastCGIConnection):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._parser = _ListEventsParser()
            fed.append(self._parser)

    h = with_connection_class(Connection)(hello)
    assert h.request('/').body == b'Hello world!\n'
    h.join()
    assert len(fed) == 1


def test_a_method_set_on_the_connection_instance_is_called(use_backend):
    """A subclass's __init__ may wrap ``self.send``: Python calls the instance's (found in
    review: the compiled chain checked the class only)."""
    sent = []

    class Connection(fcgi_base.Connection):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            inner = self.send

            def send(buffers, hold=False):
                sent.append(len(buffers))
                return inner(buffers, hold)
            self.send = send

    h = with_connection_class(Connection)(hello)
    assert h.request('/').body == b'Hello world!\n'
    h.join()
    assert sent


def test_a_connection_made_multiplexed_after_its_init_takes_a_send_lock(use_backend):
    """Only a multiplexed connection's threads send at once, so only it has a send lock: one
    made multiplexed after __init__ gets it before its first request thread starts."""
    built = []

    class Connection(fcgi_base.Connection):
        def __init__(self, *args):
            super().__init__(*args)
            assert self._send_lock is None
            self.multiplexed = True
            built.append(self)
    h = with_connection_class(Connection)(hello)
    assert h.request('/').body == b'Hello world!\n'
    h.join()
    assert type(built[0]._send_lock) is type(__import__('threading').Lock())


@pytest.mark.parametrize('request_id', [1, 64, 65, 300, 0xFFFF])
def test_the_usual_end_names_the_request(use_backend, request_id):
    """The prebuilt end of a request (empty STDOUT, then END_REQUEST; cached for ids up to
    64, built for the rest) carries its own request id."""
    harness = Harness(hello)
    for _ in range(2):  # the second time from the cache, where the id has one
        with harness.connect() as sock:
            sock.sendall(request_bytes('/', request_id=request_id))
            data = read_to_eof(sock)
        assert data.endswith(f.encode_record(f.FCGI_STDOUT, request_id)
                             + f.encode_end_request(request_id, 0, f.FCGI_REQUEST_COMPLETE))
    harness.join()


def test_a_patched_completed_records_is_called(use_backend, monkeypatch):
    harness = Harness(hello)
    assert harness.request('/').end == (0, f.FCGI_REQUEST_COMPLETE)
    original = fastcgi_connection._completed_records
    called = []

    def spy(request_id):
        called.append(request_id)
        return original(request_id)
    monkeypatch.setattr(fastcgi_connection, '_completed_records', spy)
    # Id 1 again, whose end bytes the first request left in the cache.
    assert harness.request('/').end == (0, f.FCGI_REQUEST_COMPLETE)
    assert called == [1]
    harness.join()
