"""gateway: flup's environ rules and start_response checks, without any protocol."""
import sys
import time

import pytest

from flupfast import gateway


@pytest.mark.parametrize('uri_path, script_name, expected', [
    ('/app/foo%20bar', '/app', '/foo%20bar'),          # flup: undecoded remainder
    ('/x/y', '', '/x/y'),
    ('/environ/caf%C3%A9/a%20b', '/environ/caf\xc3\xa9/a b', ''),  # nginx stock params
    ('/a%20b/c%2Fd', '/a b', '/c/d'),                   # decoded cut when only that matches
    ('/other', '/app', None),                            # mismatch: caller warns, cuts blindly
])
def test_derive_path_info(uri_path, script_name, expected):
    assert gateway.derive_path_info(uri_path, script_name) == expected


class Errors:
    def __init__(self):
        self.text = ''

    def write(self, text):
        self.text += text


def test_sanitize_fills_flups_defaults_with_warnings(backend):
    errors = Errors()
    environ = {'REQUEST_URI': '/p?q=1', 'wsgi.errors': errors}
    backend.sanitize_cgi_environ(environ, 'WSGIServer')
    assert environ['PATH_INFO'] == '/p' and environ['QUERY_STRING'] == 'q=1'
    assert environ['SCRIPT_NAME'] == '' and environ['SERVER_PORT'] == '80'
    assert errors.text.count('WSGIServer: missing FastCGI param') == 4


def test_sanitize_mismatch_warns_and_cuts_as_flup(backend):
    errors = Errors()
    environ = {'REQUEST_URI': '/other/x', 'SCRIPT_NAME': '/app', 'wsgi.errors': errors,
               'REQUEST_METHOD': 'GET', 'SERVER_NAME': 'h', 'SERVER_PORT': '1',
               'SERVER_PROTOCOL': 'HTTP/1.1'}
    backend.sanitize_cgi_environ(environ, 'S')
    assert errors.text == 'WARNING: SCRIPT_NAME does not match REQUEST_URI'
    assert environ['PATH_INFO'] == 'er/x'


class Recorder:
    def __init__(self):
        self.calls = []

    def send_head(self, status, headers, data, more):
        self.calls.append(('head', status, list(headers), bytes(data), more))

    def send_body(self, data, more):
        self.calls.append(('body', bytes(data), more))


def run(backend, app):
    recorder = Recorder()
    backend.run_application(app, {}, recorder)
    return recorder.calls


def test_content_length_only_for_one_item_results(backend):
    def one(environ, start_response):
        start_response('200 OK', [])
        return [b'abc']

    def gen(environ, start_response):
        start_response('200 OK', [])
        yield b'abc'
    assert run(backend, one) == [('head', b'200 OK', [(b'Content-Length', b'3')], b'abc', True)]
    assert run(backend, gen) == [('head', b'200 OK', [], b'abc', False)]


@pytest.mark.parametrize('size', [0, 1, 9, 10, 99, 100, 12345, 1000000, 10000001])
def test_content_length_is_the_items_length_in_decimal(size, backend):
    body = b'x' * size

    def one(environ, start_response):
        start_response('200 OK', [])
        return [body]
    [(_, _, headers, _, _)] = run(backend, one)
    assert headers == [(b'Content-Length', str(size).encode())]


def test_content_length_is_not_computed_for_a_list_of_two_items(backend):
    # flup adds Content-Length only when len(result) == 1 (fcgi_base.py:1121): a length from
    # the first item alone would announce 3 bytes of a 6-byte body (truncated behind nginx).
    def two(environ, start_response):
        start_response('200 OK', [])
        return [b'abc', b'def']

    def two_tuple(environ, start_response):
        start_response('200 OK', [])
        return (b'abc', b'def')
    for app in (two, two_tuple):
        assert run(backend, app) == [('head', b'200 OK', [], b'abc', True), ('body', b'def', True)]


@pytest.mark.parametrize('name', ['content-length', 'Content-Length', 'CONTENT-LENGTH'])
def test_apps_content_length_in_any_case_is_kept_and_not_added_twice(name, backend):
    def app(environ, start_response):
        start_response('200 OK', [(name, '3')])
        return [b'abc']
    assert run(backend, app) == [('head', b'200 OK', [(name.encode(), b'3')], b'abc', True)]


@pytest.mark.parametrize('https, scheme', [
    ('on', 'https'), ('1', 'https'), ('off', 'http'), ('ON', 'http'), ('0', 'http'),
    ('', 'http'), (None, 'http'),
])
def test_url_scheme_follows_https_as_flup_compares_it(https, scheme, backend):
    # flup: environ.get('HTTPS', 'off') in ('on', '1') (fcgi_base.py:1107), case-sensitive.
    environ = {} if https is None else {'HTTPS': https}
    backend.build_environ(environ, None, None, None, True, False, False)
    assert environ['wsgi.url_scheme'] == scheme


def test_exc_info_before_any_output_replaces_the_status_and_headers(backend):
    # PEP 3333: start_response may be called again with exc_info while nothing was sent
    # (the app caught an error after its first start_response): no "Headers already set!".
    def app(environ, start_response):
        start_response('200 OK', [('X-First', 'yes')])
        try:
            raise ValueError('late')
        except ValueError:
            start_response('500 Oops', [('X-Second', 'yes')], sys.exc_info())
        return [b'sorry']
    assert run(backend, app) == [('head', b'500 Oops', [(b'X-Second', b'yes'), (b'Content-Length', b'5')],
                         b'sorry', True)]


def test_second_start_response_without_exc_info_is_refused(backend):
    def app(environ, start_response):
        start_response('200 OK', [])
        start_response('500 Oops', [])
        return []
    with pytest.raises(AssertionError, match='Headers already set!'):
        run(backend, app)


def test_exc_info_after_headers_reraises_original(backend):
    class Boom(Exception):
        pass

    def app(environ, start_response):
        start_response('200 OK', [])
        yield b'x'
        try:
            raise Boom('late')
        except Boom as exc:
            start_response('500 Oops', [], (Boom, exc, exc.__traceback__))
    with pytest.raises(Boom, match='late'):
        run(backend, app)


@pytest.mark.parametrize('status, headers, message', [
    ('200', [], 'at least 4'), ('abc OK', [], '3-digit'), ('200OK', [], 'space after'),
    ('200 OK', (), 'must be a list'), ('200 OK', [('X', 1)], 'Value of header'),
])
def test_start_response_checks_raise_even_under_O(status, headers, message, backend):
    def app(environ, start_response):
        start_response(status, headers)
        return []
    with pytest.raises(AssertionError, match=message):
        run(backend, app)


def test_peer_gone_is_quiet_and_close_is_called(backend):
    closed = []

    class Result(list):
        def close(self):
            closed.append(True)

    class GoneResponder(Recorder):
        def send_head(self, *args):
            raise BrokenPipeError(32, 'Broken pipe')

    def app(environ, start_response):
        start_response('200 OK', [])
        return Result([b'a'])
    assert backend.run_application(app, {}, GoneResponder()) is False
    assert closed == [True]


def test_debug_page_names_the_exception():
    try:
        raise ValueError('<b>bad</b>')
    except ValueError:
        import sys
        page = gateway.error_page(True, sys.exc_info())
    assert b'ValueError' in page and b'&lt;b&gt;bad' in page and b'<b>bad' not in page
    assert gateway.error_page(False) == gateway.ERROR_BODY


# -- Exact behaviour, one test per rule (what the mutation run found unchecked) ---------------

FULL = {'REQUEST_METHOD': 'POST', 'SERVER_NAME': 'h', 'SERVER_PORT': '8080',
        'SERVER_PROTOCOL': 'HTTP/1.1'}
DEFAULTS = {'REQUEST_METHOD': 'GET', 'SERVER_NAME': 'localhost', 'SERVER_PORT': '80',
            'SERVER_PROTOCOL': 'HTTP/1.0'}


@pytest.mark.parametrize('path_info', ['/given', None])
@pytest.mark.parametrize('missing', sorted(DEFAULTS))
def test_sanitize_each_missing_variable_gets_flups_default_and_warning(missing, path_info, backend):
    errors = Errors()
    environ = dict(FULL, QUERY_STRING='', REQUEST_URI='/other?q=1', **{'wsgi.errors': errors})
    if path_info is not None:
        environ['PATH_INFO'] = path_info
    del environ[missing]
    backend.sanitize_cgi_environ(environ, 'Srv')
    assert environ[missing] == DEFAULTS[missing]
    assert errors.text == 'Srv: missing FastCGI param %s required by WSGI!\n' % missing
    # PATH_INFO given is kept; absent, it comes from REQUEST_URI. The query fills in either way.
    assert environ['PATH_INFO'] == (path_info or '/other')
    assert environ['QUERY_STRING'] == 'q=1' and environ['SCRIPT_NAME'] == ''


@pytest.mark.parametrize('query, uri, expected', [
    ('', '/p?q=1', 'q=1'), ('a=b', '/p?q=1', 'a=b'), ('', '/p', ''), ('', None, ''),
    (None, '/p?q=1', 'q=1'), (None, '/p', ''), (None, None, ''),
])
def test_sanitize_query_string_comes_from_request_uri_only_when_empty(query, uri, expected, backend):
    # With every variable present (what nginx and Apache send) and with QUERY_STRING absent.
    errors = Errors()
    environ = dict(FULL, PATH_INFO='/p', **{'wsgi.errors': errors})
    if query is not None:
        environ['QUERY_STRING'] = query
    if uri is not None:
        environ['REQUEST_URI'] = uri
    backend.sanitize_cgi_environ(environ, 'S')
    assert environ['QUERY_STRING'] == expected
    assert environ['PATH_INFO'] == '/p' and errors.text == ''
    assert {k: environ[k] for k in FULL} == FULL


def test_sanitize_without_path_info_or_request_uri_gives_empty_path_info(backend):
    environ = dict(FULL, **{'wsgi.errors': Errors()})
    backend.sanitize_cgi_environ(environ, 'S')
    assert (environ['PATH_INFO'], environ['QUERY_STRING'], environ['SCRIPT_NAME']) == ('', '', '')


def test_sanitize_keeps_script_name_and_derives_path_info_after_it(backend):
    environ = dict(FULL, SCRIPT_NAME='/app', REQUEST_URI='/app/a%20b?x', QUERY_STRING='',
                   **{'wsgi.errors': Errors()})
    backend.sanitize_cgi_environ(environ, 'S')
    assert (environ['SCRIPT_NAME'], environ['PATH_INFO'], environ['QUERY_STRING']) == \
        ('/app', '/a%20b', 'x')


@pytest.mark.parametrize('environ', [
    dict(FULL, PATH_INFO='/p', QUERY_STRING='', REQUEST_URI='/p?a?b'),
    dict(FULL, PATH_INFO='/p', QUERY_STRING='', REQUEST_URI='/p?'),
    dict(FULL, PATH_INFO='/p', QUERY_STRING='x', REQUEST_URI='/p?y'),
    dict(FULL, PATH_INFO='', QUERY_STRING='', REQUEST_URI='/p?y'),
    dict(FULL, PATH_INFO='/p', QUERY_STRING=''),
    {'PATH_INFO': '/p', 'QUERY_STRING': '', 'REQUEST_URI': '/p?q'},
])
@pytest.mark.parametrize('mapping', [dict, type('Environ', (dict,), {})])
def test_sanitize_twins_leave_the_same_environ_and_warnings(environ, mapping, backend):
    """The compiled twin does what nginx and Apache send itself and hands the rest (and any
    mapping but a dict) to the pure one: either way the same environ and warnings."""
    results = []
    for sanitize in (gateway.sanitize_cgi_environ, backend.sanitize_cgi_environ):
        errors = Errors()
        env = mapping(environ, **{'wsgi.errors': errors})
        assert sanitize(env, 'S') is None
        del env['wsgi.errors']
        results.append((dict(env), errors.text))
    assert results[0] == results[1]


def test_derive_path_info_decodes_as_latin1():
    assert gateway.derive_path_info('/a%E9/b%C3%A9', '/a\xe9') == '/b\xc3\xa9'


@pytest.fixture
def no_status_cache():
    """Statuses already seen skip their checks: start each test with none seen. Emptied in
    place, not replaced: the compiled Response holds the module's dict."""
    cache = gateway._checked_statuses
    saved = dict(cache)
    cache.clear()
    yield cache
    cache.clear()
    cache.update(saved)


@pytest.mark.parametrize('status, message', [
    ('200', 'Status must be at least 4 characters'), (b'20 ', 'Status must be at least 4 characters'),
    ('abc OK', 'Status must begin with 3-digit code'), ('000 Zero', 'Status must begin with 3-digit code'),
    ('200OK', 'Status must have a space after code'), ('200!OK', 'Status must have a space after code'),
    (b'2000 OK', 'Status must have a space after code'), (200, 'Status must be a string'),
    (bytearray(b'200 OK'), 'Status must be a string'),
])
def test_status_checks_and_their_exact_messages(no_status_cache, status, message):
    with pytest.raises(AssertionError) as info:
        gateway._check_status(status)
    assert str(info.value) == message


@pytest.mark.parametrize('status, expected', [
    ('200 ', b'200 '), ('200 OK', b'200 OK'), (b'404 Not Found', b'404 Not Found'),
    ('599 \xe9', b'599 \xe9'), ('001 Low', b'001 Low'),
])
def test_valid_statuses_come_back_as_latin1_bytes(no_status_cache, status, expected):
    assert gateway._check_status(status) == expected


def test_str_statuses_are_cached_and_the_cache_is_bounded(no_status_cache, backend):
    gateway._check_status('299 Cached')
    gateway._check_status(b'298 Bytes')
    assert no_status_cache == {'299 Cached': b'299 Cached'}
    for code in range(100, 100 + 2 * gateway._CHECKED_STATUSES_MAX):
        gateway._check_status('%d X' % code)
    assert len(no_status_cache) == gateway._CHECKED_STATUSES_MAX
    # A cached status skips the checks: start_response uses the cached bytes.
    no_status_cache['299 Cached'] = b'299 From the cache'

    def app(environ, start_response):
        start_response('299 Cached', [])
        return [b'']
    assert run(backend, app)[0][1] == b'299 From the cache'


def test_write_sends_at_once_and_accepts_str_as_latin1(backend):
    def app(environ, start_response):
        write = start_response('200 OK', [('X-A', '\xe9')])
        write(b'a')
        write('\xe9')
        return []
    assert run(backend, app) == [('head', b'200 OK', [(b'X-A', b'\xe9')], b'a', False),
                        ('body', b'\xe9', False)]


@pytest.mark.parametrize('data', [bytearray(b'x'), memoryview(b'x'), 1])
def test_write_refuses_what_is_not_bytes_or_str(data, backend):
    def app(environ, start_response):
        start_response('200 OK', [])(data)
        return []
    with pytest.raises(AssertionError, match='^write\\(\\) argument must be bytes$'):
        run(backend, app)


def test_write_before_start_response_is_refused(backend):
    response = backend.Response(Recorder())
    with pytest.raises(AssertionError, match=r'^write\(\) before start_response\(\)$'):
        response.write(b'x')
    with pytest.raises(AssertionError, match=r'^write\(\) before start_response\(\)$'):
        response.send_file(object())


class FileResponder(Recorder):
    def __init__(self, accept=True):
        super().__init__()
        self.accept = accept

    def can_send_file(self, filelike):
        return self.accept

    def send_file(self, filelike):
        data = filelike.read()
        self.calls.append(('file', data))
        return len(data)


def test_send_file_sends_the_headers_once_then_the_file(backend):
    import io
    responder = FileResponder()
    response = backend.Response(responder)
    response.start_response('200 OK', [('A', 'b')])
    assert response.send_file(io.BytesIO(b'one')) is True
    assert response.headers_sent is True
    assert response.send_file(io.BytesIO(b'two')) is True
    assert responder.calls == [('head', b'200 OK', [(b'A', b'b')], b'', False),
                               ('file', b'one'), ('file', b'two')]


def test_send_file_declined_sends_nothing(backend):
    import io
    responder = FileResponder(accept=False)
    response = backend.Response(responder)
    response.start_response('200 OK', [])
    assert response.send_file(io.BytesIO(b'one')) is False
    assert responder.calls == [] and response.headers_sent is False


def test_file_wrapper_reads_in_its_block_size_and_closes_the_file():
    import io

    class File(io.BytesIO):
        sizes = []

        def read(self, size=-1):
            self.sizes.append(size)
            return super().read(size)
    f = File(b'abcdefg')
    wrapper = gateway.FileWrapper(f, 3)
    assert list(wrapper) == [b'abc', b'def', b'g']
    assert File.sizes == [3, 3, 3, 3]
    wrapper.close()
    assert f.closed
    assert list(gateway.FileWrapper(io.BytesIO(b'x' * 9000))) == [b'x' * 8192, b'x' * 808]

    class NoClose:
        def read(self, size):
            return b''
    assert not hasattr(gateway.FileWrapper(NoClose()), 'close')


def test_file_wrapper_result_goes_through_send_file(backend):
    import io
    responder = FileResponder()

    def app(environ, start_response):
        start_response('200 OK', [])
        return gateway.FileWrapper(io.BytesIO(b'payload'))
    assert backend.run_application(app, {}, responder) is True
    assert responder.calls == [('head', b'200 OK', [], b'', False), ('file', b'payload')]


def test_a_file_sent_by_the_responder_counts_its_bytes(backend):
    """What the access log's %(b)s shows (found in review: a file_wrapper over SCGI or
    uwsgi, any download, was logged with '-' bytes)."""
    import io
    seen = []

    class Observer:
        def begin(self, environ):
            return None

        def end(self, token, response, failed):
            seen.append(response.sent)

    def app(environ, start_response):
        start_response('200 OK', [])
        return gateway.FileWrapper(io.BytesIO(b'payload'))
    gateway.set_observer(Observer())
    try:
        backend.run_application(app, {}, FileResponder())
    finally:
        gateway.set_observer(None)
    assert seen == [7]


def test_debug_page_inside_except_uses_the_current_exception():
    try:
        raise KeyError('current')
    except KeyError:
        page = gateway.error_page(True)
    assert b'KeyError' in page and b'current' in page


def test_debug_page_shows_each_frame_its_source_and_its_locals():
    import html
    import traceback

    class BadRepr:
        def __repr__(self):
            raise RuntimeError('no repr')

    def inner(long_local, bad, exact, just_over):
        raise ValueError('<x> & y')
    try:
        inner('L' * 600, BadRepr(), 'M' * 498, 'N' * 499)  # reprs of 602, 500, 501 characters
    except ValueError:
        info = sys.exc_info()
    page = gateway.render_traceback_html(info).decode('latin-1')
    title = 'ValueError: &lt;x&gt; &amp; y'
    assert page.startswith('<!DOCTYPE html>\n<html><head><title>%s</title></head><body>\n'
                           '<h1>%s</h1>\n<p>Python %s</p>\n<h3>'
                           % (title, title, sys.version.split()[0]))
    lineno = [line for frame, line in traceback.walk_tb(info[2])
              if frame.f_code.co_name == 'inner'][0]
    block = ('<h3>%s, line %d, in inner</h3>\n'
             "<pre>raise ValueError(&#x27;&lt;x&gt; &amp; y&#x27;)</pre>\n"
             '<table>\n'
             '<tr><td>bad</td><td><code>&lt;unrepresentable: RuntimeError&gt;</code></td></tr>\n'
             '<tr><td>exact</td><td><code>&#x27;%s&#x27;</code></td></tr>\n'
             '<tr><td>just_over</td><td><code>&#x27;%s...</code></td></tr>\n'
             '<tr><td>long_local</td><td><code>&#x27;%s...</code></td></tr>\n'
             '</table>\n' % (__file__, lineno, 'M' * 498, 'N' * 499, 'L' * 499))
    assert block in page
    assert page.endswith('</table>\n<pre>%s</pre>\n</body></html>\n'
                         % html.escape(''.join(traceback.format_exception(*info))))


def test_build_environ_sets_every_wsgi_key_and_overrides_win(backend):
    stdin, stderr = object(), object()
    environ = {'HTTPS': 'on', 'A': 'request'}
    assert backend.build_environ(environ, {'A': 'override', 'B': 'added'}, stdin, stderr,
                                 True, False, True) is environ
    assert environ == {'HTTPS': 'on', 'A': 'override', 'B': 'added', 'wsgi.version': (1, 0),
                       'wsgi.input': stdin, 'wsgi.errors': stderr, 'wsgi.multithread': True,
                       'wsgi.multiprocess': False, 'wsgi.run_once': True,
                       'wsgi.url_scheme': 'https'}
    environ = {}
    backend.build_environ(environ, None, stdin, stderr, multithread=False, multiprocess=True,
                          run_once=False)
    assert (environ['wsgi.multithread'], environ['wsgi.multiprocess'],
            environ['wsgi.run_once'], environ['wsgi.url_scheme']) == (False, True, False, 'http')


def test_request_uri_splits_at_its_first_question_mark():
    assert gateway.split_request_uri({'REQUEST_URI': '/a?b?c'}) == ['/a', 'b?c']
    assert gateway.split_request_uri({'REQUEST_URI': '/a'}) == ['/a']
    assert gateway.split_request_uri({}) is None


def test_exc_info_reraise_keeps_the_original_traceback(backend):
    import traceback

    def raiser():
        raise LookupError('deep')

    def app(environ, start_response):
        start_response('200 OK', [])
        yield b'x'
        try:
            raiser()
        except LookupError:
            start_response('500 Oops', [], sys.exc_info())
    with pytest.raises(LookupError) as info:
        run(backend, app)
    assert 'raiser' in [frame.f_code.co_name for frame, _ in traceback.walk_tb(info.tb)]


def test_second_start_response_message_is_flups(backend):
    def app(environ, start_response):
        start_response('200 OK', [])
        start_response('200 OK', [])
    with pytest.raises(AssertionError) as info:
        run(backend, app)
    assert str(info.value) == 'Headers already set!'


@pytest.mark.parametrize('headers, message', [
    ([(1, 'x')], 'Header name "1" must be bytes'),
    ([(bytearray(b'N'), 'x')], 'Header name "bytearray(b\'N\')" must be bytes'),
    ([('X', 1)], 'Value of header "b\'X\'" must be bytes'),
    ([(b'X', None)], 'Value of header "b\'X\'" must be bytes'),
])
def test_header_types_are_checked_with_flups_messages(headers, message, backend):
    def app(environ, start_response):
        start_response('200 OK', headers)
        return []
    with pytest.raises(AssertionError) as info:
        run(backend, app)
    assert str(info.value) == message


class _SafeString(str):
    """A str subclass, as template engines mark safe strings."""


@pytest.mark.parametrize('pair', [('X-T', _SafeString('v')), (_SafeString('X-T'), 'v')])
def test_a_str_subclass_in_a_header_is_checked_whatever_came_before(pair, backend):
    """The checked pairs remembered are looked up only for a tuple of two exact str: a pair
    of str subclasses equal to a remembered one is refused as it is the first time (found in
    review: it passed once the plain pair had been seen)."""
    def app(environ, start_response):
        start_response('200 OK', [pair])
        return []

    def plain(environ, start_response):
        start_response('200 OK', [('X-T', 'v')])
        return []
    with pytest.raises(AssertionError, match='must be bytes'):
        run(backend, app)
    run(backend, plain)  # ('X-T', 'v') remembered
    with pytest.raises(AssertionError, match='must be bytes'):
        run(backend, app)


def test_bytes_and_str_headers_become_latin1_bytes(backend):
    def app(environ, start_response):
        start_response('200 OK', [(b'B', b'v'), ('S', '\xe9'), (b'M', '\xff'), ('N', b'w')])
        return [b'ab']
    assert run(backend, app)[0][2] == [(b'B', b'v'), (b'S', b'\xe9'), (b'M', b'\xff'), (b'N', b'w'),
                              (b'Content-Length', b'2')]


@pytest.mark.parametrize('result, calls', [
    (lambda: [], [('head', b'200 OK', [], b'', True)]),
    (lambda: [b''], [('head', b'200 OK', [(b'Content-Length', b'0')], b'', True)]),
    (lambda: (b'one',), [('head', b'200 OK', [(b'Content-Length', b'3')], b'one', True)]),
    (lambda: iter([]), [('head', b'200 OK', [], b'', False)]),
    (lambda: iter([b'', b'a', b'', b'b']),
     [('head', b'200 OK', [], b'a', False), ('body', b'b', False)]),
], ids=['empty-list', 'one-empty-item', 'one-item-tuple', 'empty-iterator', 'iterator'])
def test_result_shapes_and_what_goes_on_the_wire(result, calls, backend):
    def app(environ, start_response):
        start_response('200 OK', [])
        return result()
    recorder = Recorder()
    assert backend.run_application(app, {}, recorder) is True
    assert recorder.calls == calls


def test_one_item_object_with_len_gets_a_content_length(backend):
    class One:
        def __len__(self):
            return 1

        def __iter__(self):
            return iter([b'xyz'])

    def app(environ, start_response):
        start_response('200 OK', [])
        return One()
    assert run(backend, app) == [('head', b'200 OK', [(b'Content-Length', b'3')], b'xyz', False)]


def test_app_lock_is_held_around_the_app_and_released_after_an_error(backend):
    import threading
    lock = threading.Lock()
    seen = []

    def app(environ, start_response):
        seen.append(lock.locked())
        raise ValueError('x')
    with pytest.raises(ValueError):
        backend.run_application(app, {}, Recorder(), lock)
    assert seen == [True] and not lock.locked()


@pytest.mark.parametrize('headers', [(), None, {'A': 'b'}])
def test_headers_must_be_a_list_message_in_full(headers, backend):
    response = backend.Response(Recorder())
    with pytest.raises(AssertionError) as info:
        response.start_response('200 OK', headers)
    assert str(info.value) == 'Headers must be a list'


def _hello(environ, start_response):
    start_response('200 OK', [])
    return [b'hello']


def test_the_app_lock_is_released_when_the_timeout_lands_right_after_it_is_taken(backend):
    """The request timeout raises in the request's thread as soon as a call returns: one
    that waited for the app lock (multithreaded=False) raised right after acquire(), before
    the try that releases it, and every later request waited for good (found in review)."""
    import threading
    from flupfast.deadline import RequestTerminated, _raise_in_thread
    lock = threading.Lock()
    lock.acquire()  # another request holds the app
    outcome = []

    def request():
        try:
            backend.run_application(_hello, {}, Recorder(), app_lock=lock)
            outcome.append('served')
        except RequestTerminated:
            outcome.append('ended')
    waiter = threading.Thread(target=request)
    waiter.start()
    deadline = time.monotonic() + 5
    while not lock.locked() or waiter.ident is None:
        time.sleep(0.001)
    time.sleep(0.1)  # it waits in acquire()
    _raise_in_thread(waiter.ident, RequestTerminated)  # its deadline passed while it waited
    lock.release()
    waiter.join(5)
    assert time.monotonic() < deadline + 5
    assert outcome in (['ended'], ['served'])
    assert not lock.locked()  # the next request is served


def test_every_observer_ends_when_the_timeout_lands_as_the_request_ends(backend):
    """A send that outlives the request timeout completes in C; the timeout's exception then
    lands at the first Python call, the observers' end: the access log lost the line, the
    status page and the timeout's own table kept the request (found in review). The end is
    called once more, each observer ending once, and the exception goes on. It lands at the
    end's first line (nothing done yet), or inside the timeout's own end once that has done
    its part (Interruption.end, where a fire that won the race is delivered)."""
    from flupfast.deadline import RequestTerminated
    from flupfast.ops import Observers
    ended = []

    class Observer:
        def __init__(self, name, raises_when_done=False):
            self.name, self.raises = name, raises_when_done

        def begin(self, environ):
            return self.name

        def end(self, token, response, failed):
            ended.append(token)
            if self.raises:
                self.raises = False
                raise RequestTerminated()

    class CutAtEntry:
        """The exception at the first line of the wrapped observer's end, once."""
        def __init__(self, observer):
            self.observer, self.cut = observer, True

        def begin(self, environ):
            return self.observer.begin(environ)

        def end(self, token, response, failed):
            if self.cut:
                self.cut = False
                raise RequestTerminated()
            self.observer.end(token, response, failed)

    cases = [
        (CutAtEntry(Observers([Observer('timeout'), Observer('access')])), ['timeout', 'access']),
        (Observers([Observer('timeout', True), Observer('status'), Observer('access')]),
         ['timeout', 'status', 'access']),
        (CutAtEntry(Observer('alone')), ['alone']),
    ]
    for observer, expected in cases:
        del ended[:]
        gateway.set_observer(observer)
        try:
            with pytest.raises(RequestTerminated):
                backend.run_application(_hello, {}, Recorder())
        finally:
            gateway.set_observer(None)
        assert ended == expected
