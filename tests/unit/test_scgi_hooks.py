"""flup's hooks around an SCGI or uwsgi request, overridden as flup users override them, on
both backends and both protocols: the compiled request path (``serve_scgi``) runs flupfast's
own request, handler, ``_environ_for`` and ``_sanitizeEnv`` in C, and must hand over to any
override, on the class or on the instance, exactly where the pure path calls it. Also the
``_sanitizeEnv`` cases the compiled path leaves to the method, reached through a request.
"""
import logging

import pytest

from flupfast import scgi_connection
from flupfast.server import _scgi_ajp_base, scgi_base
from tests.unit.connection_harness import echo, hello
from tests.unit.hook_spies import (
    SETTINGS_SEEN_OTHERWISE, mine, mount_by_sanitize, spy_on_instance, wraps_spy)
from tests.unit.scgi_harness import environ_app, protocol_fixture

harness = protocol_fixture()


def subclassed(harness, **attrs):
    """The harness with its server class subclassed with ``attrs``."""
    server_class = type('Server', (harness.server_class,), attrs)
    return type('Harness', (harness,), {'server_class': server_class})


def test_an_overridden_sanitize_env_is_called(harness):
    """With PATH_INFO sent: the request the compiled path would sanitize itself."""
    calls = []

    def _sanitizeEnv(self, environ):
        calls.append(environ['REQUEST_URI'])
        harness.server_class._sanitizeEnv(self, environ)
        environ['SCRIPT_NAME'] = '/mounted'
    h = subclassed(harness, _sanitizeEnv=_sanitizeEnv)(environ_app)
    env = eval(h.request('/a/b?x=1', path_info='/a/b')[2])
    assert calls == ['/a/b?x=1']
    assert (env['SCRIPT_NAME'], env['QUERY_STRING']) == ('/mounted', 'x=1')


def test_an_overridden_environ_for_is_called(harness):
    def _environ_for(self, environ, stdin):
        environ = harness.server_class._environ_for(self, environ, stdin)
        environ['wsgi.url_scheme'] = 'https'
        return environ
    h = subclassed(harness, _environ_for=_environ_for)(environ_app)
    assert eval(h.request('/')[2])['wsgi.url_scheme'] == 'https'


def test_a_handler_overridden_on_the_class_is_called(harness):
    def handler(self, request):
        request.stdout.write(request.status_prefix + b'203 Mine\r\n\r\n'
                             + request.environ['REQUEST_URI'].encode())
    h = subclassed(harness, handler=handler)(hello)
    assert h.request('/x')[::2] == (b'203 Mine', b'/x')


@pytest.mark.parametrize('name', ['_sanitizeEnv', '_environ_for'])
def test_a_hook_set_on_the_instance_is_called(harness, name):
    h = harness(environ_app)
    called = spy_on_instance(h.server, name)
    assert eval(h.request('/a', path_info='/a')[2])['PATH_INFO'] == '/a'
    assert called == [name]


def test_a_request_class_of_ones_own_runs(harness):
    class Request(scgi_base.Request):
        def run(self):
            self.stdout.write(self.status_prefix + b'200 OK\r\n\r\nown request')
    h = subclassed(harness, requestClass=Request)(hello)
    assert h.request('/')[::2] == (b'200 OK', b'own request')


def test_an_error_hook_of_ones_own_answers_a_raising_app(harness, caplog):
    def error(self, request):
        request.stdout.write(request.status_prefix + b'500 Mine\r\n\r\n'
                             + request.environ['REQUEST_METHOD'].encode())

    def app(environ, start_response):
        raise RuntimeError('boom')
    h = subclassed(harness, error=error)(app)
    with caplog.at_level(logging.ERROR, logger=harness.logger):
        assert h.request('/')[::2] == (b'500 Mine', b'GET')
    assert 'Exception caught from handler' in caplog.text and 'boom' in caplog.text


def test_a_connection_class_of_ones_own_reads_the_head_and_starts_the_response(harness):
    heads = []

    class Connection(harness.connection_class):
        def _read_header(self):
            head = super()._read_header()
            heads.append(head[0]['REQUEST_URI'])
            return head

        def status_prefix(self, environ):
            return b'HTTP/1.1 '
    h = type('Harness', (harness,), {'connection_class': Connection,
                                     'head': b'HTTP/1.1 '})(hello)
    raw = h.raw(h.request_bytes('/seen'), shut=False)
    assert raw.startswith(b'HTTP/1.1 200 OK\r\n') and raw.endswith(b'Hello world!\n')
    assert heads == ['/seen']


def test_a_configured_script_name_applies_to_a_request(harness):
    h = harness(environ_app, scriptName='/app')
    with pytest.warns(DeprecationWarning, match='Configured SCRIPT_NAME is deprecated'):
        env = eval(h.request('/app/x?q=1', script_name='', path_info='/app/x')[2])
    assert (env['SCRIPT_NAME'], env['PATH_INFO'], env['QUERY_STRING']) == \
        ('/app', '/x', 'q=1')


def test_script_name_none_leaves_the_path_as_sent(harness):
    """scriptName=None (cgi2scgi): only an empty QUERY_STRING is filled in."""
    h = harness(environ_app, scriptName=None)
    env = eval(h.request('/a?q=2', path_info='', extra=[('QUERY_STRING', '')])[2])
    assert (env['SCRIPT_NAME'], env['PATH_INFO'], env['QUERY_STRING']) == ('', '', 'q=2')


def test_the_wsgi_script_name_variable_applies_to_a_request(harness):
    h = harness(environ_app)
    with pytest.warns(DeprecationWarning, match='WSGI_SCRIPT_NAME'):
        env = eval(h.request('/a/b', script_name='/a/b', path_info='',
                             extra=[('WSGI_SCRIPT_NAME', '/a')])[2])
    assert (env['SCRIPT_NAME'], env['PATH_INFO']) == ('/a', '/b')


def test_an_empty_path_info_is_derived_from_the_request_uri(harness):
    h = harness(environ_app)
    env = eval(h.request('/x/y%20z?k=v', path_info='', extra=[('QUERY_STRING', '')])[2])
    assert (env['SCRIPT_NAME'], env['PATH_INFO'], env['QUERY_STRING']) == \
        ('', '/x/y%20z', 'k=v')


def test_a_query_string_sent_is_kept(harness):
    h = harness(environ_app)
    env = eval(h.request('/x?from=uri', extra=[('QUERY_STRING', 'sent=1')])[2])
    assert env['QUERY_STRING'] == 'sent=1'


def test_a_connection_class_of_ones_own_serves_receives_finishes_and_closes(harness):
    """The connection loop's own methods, overridden: each is called (the compiled loop runs
    flupfast's in C only while they are in force)."""
    calls = []

    class Connection(harness.connection_class):
        def _serve(self):
            calls.append('_serve')
            super()._serve()

        def recv_some(self, limit=0):
            calls.append('recv_some')
            return super().recv_some(limit)

        def _finish(self):
            calls.append('_finish')
            super()._finish()

        def close(self):
            calls.append('close')
            super().close()
    body = b'x' * (1 << 20)
    h = type('Harness', (harness,), {'connection_class': Connection})(echo)
    status, _, answer = h.request('/', method='POST', body=body)
    h.join()
    assert (status, answer.split()[1]) == (b'200 OK', b'%d' % len(body))
    assert calls[0] == '_serve' and 'recv_some' in calls and calls[-2:] == ['_finish', 'close']


def test_a_method_patched_into_flupfasts_class_between_requests_is_called(harness,
                                                                           monkeypatch):
    """flup-era sites patch the library's own classes: a patch made after requests were
    served (and the compiled path knew the classes) counts from the next request on, and
    so does undoing it."""
    h = harness(environ_app)
    assert eval(h.request('/a', path_info='/a')[2])['SCRIPT_NAME'] == ''
    mount_by_sanitize(monkeypatch, scgi_base.BaseSCGIServer, '/patched')
    finished = wraps_spy(monkeypatch, scgi_connection.SCGIConnection, '_finish', lambda: True)
    assert eval(h.request('/a', path_info='/a')[2])['SCRIPT_NAME'] == '/patched'
    h.join()
    assert finished == [True]
    monkeypatch.undo()
    assert eval(h.request('/a', path_info='/a')[2])['SCRIPT_NAME'] == ''
    h.join()
    assert finished == [True]


def test_a_connection_class_receiving_and_sending_its_own_way_gets_every_call(harness):
    """``recv_some`` and ``send`` overridden: a GET's head is received, and its answer sent,
    through them."""
    calls = []

    class Connection(harness.connection_class):
        def recv_some(self, limit=0):
            calls.append('recv_some')
            return super().recv_some(limit)

        def send(self, buffers, hold=False):
            calls.append('send')
            super().send(buffers, hold)
    h = type('Harness', (harness,), {'connection_class': Connection})(hello)
    assert h.request('/')[::2] == (b'200 OK', b'Hello world!\n')
    h.join()
    assert calls[0] == 'recv_some' and 'send' in calls


def test_a_hook_wrapped_with_functools_wraps_is_called(harness, monkeypatch):
    """A wrapper keeps the original's name and attributes (functools.wraps, APM agents): it
    is still an override."""
    calls = wraps_spy(monkeypatch, scgi_base.BaseSCGIServer, 'handler',
                      lambda request: request.environ['REQUEST_URI'])
    h = harness(hello)
    assert h.request('/wrapped')[::2] == (b'200 OK', b'Hello world!\n')
    assert calls == ['/wrapped']


def test_scgis_environ_for_patched_is_called_for_uwsgi_too(harness, monkeypatch):
    """uwsgi's _environ_for extends SCGI's with super(): a patch of the base's counts."""
    calls = []
    stock = _scgi_ajp_base.SCGIAJPServerBase._environ_for

    def _environ_for(self, environ, stdin):
        calls.append(1)
        return stock(self, environ, stdin)
    monkeypatch.setattr(_scgi_ajp_base.SCGIAJPServerBase, '_environ_for', _environ_for)
    h = harness(environ_app)
    assert eval(h.request('/', path_info='/')[2])['PATH_INFO'] == '/'
    assert calls == [1]


@pytest.mark.parametrize('hidden', ['logger', 'closed', '_body', 'served'])
def test_a_connection_class_hiding_a_state_field_is_served_as_python_sees_it(harness, hidden,
                                                                             caplog):
    """A class attribute named like one of ConnectionState's fields (connection_state.py)
    hides the compiled twin's field from Python, which then reads and writes the instance's
    dict: such a class is served by the pure path, and what Python sees of the connection
    afterwards is what it served."""
    defaults = {'logger': logging.getLogger('flupfast-test-hidden'), 'closed': False,
                '_body': None, 'served': 0}
    built = []

    class Connection(harness.connection_class):
        def __init__(self, *args):
            super().__init__(*args)
            built.append(self)
    setattr(Connection, hidden, defaults[hidden])

    def failing(environ, start_response):
        raise RuntimeError('the app failed')
    h = type('Harness', (harness,), {'connection_class': Connection})(echo)
    status, _, answer = h.request('/', method='POST', body=b'abc')
    h.join()
    assert (status, answer.split()[1]) == (b'200 OK', b'3') and h.served == [1]
    h = type('Harness', (harness,), {'connection_class': Connection})(failing)
    with caplog.at_level(logging.ERROR):
        status, _, _ = h.request('/')
    h.join()
    assert status == b'500 Internal Server Error' and h.served == [1]
    assert [(conn.served, conn.closed, conn._body) for conn in built] == [(1, True, None)] * 2
    logged = [record.name for record in caplog.records if 'Exception' in record.getMessage()]
    assert logged == [harness.logger]  # the instance's, which LoggedConnection set


@pytest.mark.parametrize('how', sorted(SETTINGS_SEEN_OTHERWISE))
def test_the_servers_app_is_the_one_python_reads(harness, how):
    h = subclassed(harness, **SETTINGS_SEEN_OTHERWISE[how])(hello)
    assert h.server.__dict__['application'] is hello
    assert h.request('/')[2] == b'mine'
    h.server.__dict__['application'] = echo  # still not what Python reads
    assert h.request('/')[2] == b'mine'


def test_a_setting_changed_on_the_instance_applies_at_the_next_request(harness):
    h = harness(hello)
    assert h.request('/')[2] == b'Hello world!\n'
    h.server.application = mine
    assert h.request('/')[2] == b'mine'


def test_the_request_line_follows_the_loggers_level_and_disabled_flag(harness, caplog):
    """The compiled path answers isEnabledFor from the logger's own cache and flag: a level
    or flag changed between requests applies at the next one."""
    logger = logging.getLogger(harness.logger)
    h = harness(hello)
    seen = []
    for level, disabled in ((logging.INFO, False), (logging.INFO, True),
                            (logging.WARNING, False), (logging.INFO, False)):
        caplog.clear()
        caplog.set_level(level, logger=harness.logger)
        logger.disabled = disabled
        try:
            assert h.request('/line')[2] == b'Hello world!\n'
        finally:
            logger.disabled = False
        seen.append(any(r.getMessage().startswith('GET ') for r in caplog.records))
    assert seen == [True, False, False, True]


def test_a_logger_flag_that_runs_code_is_asked_as_python_asks_it(harness, caplog):
    """A ``disabled`` that is not a bool is asked through isEnabledFor, whose truth test may
    run code, here replacing the logger's cache (found in review: the compiled check used the
    cache it had looked up before, after it had been freed)."""
    logger = logging.getLogger(harness.logger)
    caplog.set_level(logging.INFO, logger=harness.logger)
    h = harness(hello)
    h.request('/warm')  # the logger's cache now answers INFO
    kept = []

    class Flag:
        def __bool__(self):
            logger._cache = {}
            kept.append({logging.INFO: False})  # may take the freed cache's memory
            return False
    logger.disabled = Flag()
    try:
        caplog.clear()
        assert h.request('/line')[2] == b'Hello world!\n'
    finally:
        logger.disabled = False
    assert any(r.getMessage().startswith('GET ') for r in caplog.records)


def test_methods_set_on_the_connection_instance_are_called(harness):
    """A subclass's __init__ may wrap ``self.send`` and ``self.recv_some``: Python calls the
    instance's (found in review: the compiled path checked the class only)."""
    calls = []

    class Connection(harness.connection_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            inner_send, inner_recv = self.send, self.recv_some

            def send(buffers, hold=False):
                calls.append('send')
                return inner_send(buffers, hold)

            def recv_some(limit=0):
                calls.append('recv')
                return inner_recv(limit)
            self.send, self.recv_some = send, recv_some

    h = type('Harness', (harness,), {'connection_class': Connection})(echo)
    assert h.request('/', body=b'abc')[2].endswith(b' 3')  # echo: the body's hash, length
    h.join()
    assert 'send' in calls and 'recv' in calls
