"""gateway: flup's environ rules and start_response checks, without any protocol."""
import sys

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


def test_sanitize_fills_flups_defaults_with_warnings():
    errors = Errors()
    environ = {'REQUEST_URI': '/p?q=1', 'wsgi.errors': errors}
    gateway.sanitize_cgi_environ(environ, 'WSGIServer')
    assert environ['PATH_INFO'] == '/p' and environ['QUERY_STRING'] == 'q=1'
    assert environ['SCRIPT_NAME'] == '' and environ['SERVER_PORT'] == '80'
    assert errors.text.count('WSGIServer: missing FastCGI param') == 4


def test_sanitize_mismatch_warns_and_cuts_as_flup():
    errors = Errors()
    environ = {'REQUEST_URI': '/other/x', 'SCRIPT_NAME': '/app', 'wsgi.errors': errors,
               'REQUEST_METHOD': 'GET', 'SERVER_NAME': 'h', 'SERVER_PORT': '1',
               'SERVER_PROTOCOL': 'HTTP/1.1'}
    gateway.sanitize_cgi_environ(environ, 'S')
    assert errors.text == 'WARNING: SCRIPT_NAME does not match REQUEST_URI'
    assert environ['PATH_INFO'] == 'er/x'


class Recorder:
    def __init__(self):
        self.calls = []

    def send_head(self, status, headers, data, more):
        self.calls.append(('head', status, list(headers), bytes(data), more))

    def send_body(self, data, more):
        self.calls.append(('body', bytes(data), more))


def run(app):
    recorder = Recorder()
    gateway.run_application(app, {}, recorder)
    return recorder.calls


def test_content_length_only_for_one_item_results():
    def one(environ, start_response):
        start_response('200 OK', [])
        return [b'abc']

    def gen(environ, start_response):
        start_response('200 OK', [])
        yield b'abc'
    assert run(one) == [('head', b'200 OK', [(b'Content-Length', b'3')], b'abc', True)]
    assert run(gen) == [('head', b'200 OK', [], b'abc', False)]


def test_content_length_is_not_computed_for_a_list_of_two_items():
    # flup adds Content-Length only when len(result) == 1 (fcgi_base.py:1121): a length from
    # the first item alone would announce 3 bytes of a 6-byte body (truncated behind nginx).
    def two(environ, start_response):
        start_response('200 OK', [])
        return [b'abc', b'def']

    def two_tuple(environ, start_response):
        start_response('200 OK', [])
        return (b'abc', b'def')
    for app in (two, two_tuple):
        assert run(app) == [('head', b'200 OK', [], b'abc', True), ('body', b'def', True)]


@pytest.mark.parametrize('name', ['content-length', 'Content-Length', 'CONTENT-LENGTH'])
def test_apps_content_length_in_any_case_is_kept_and_not_added_twice(name):
    def app(environ, start_response):
        start_response('200 OK', [(name, '3')])
        return [b'abc']
    assert run(app) == [('head', b'200 OK', [(name.encode(), b'3')], b'abc', True)]


@pytest.mark.parametrize('https, scheme', [
    ('on', 'https'), ('1', 'https'), ('off', 'http'), ('ON', 'http'), ('0', 'http'),
    ('', 'http'), (None, 'http'),
])
def test_url_scheme_follows_https_as_flup_compares_it(https, scheme):
    # flup: environ.get('HTTPS', 'off') in ('on', '1') (fcgi_base.py:1107), case-sensitive.
    environ = {} if https is None else {'HTTPS': https}
    gateway.build_environ(environ, None, None, None, True, False, False)
    assert environ['wsgi.url_scheme'] == scheme


def test_exc_info_before_any_output_replaces_the_status_and_headers():
    # PEP 3333: start_response may be called again with exc_info while nothing was sent
    # (the app caught an error after its first start_response): no "Headers already set!".
    def app(environ, start_response):
        start_response('200 OK', [('X-First', 'yes')])
        try:
            raise ValueError('late')
        except ValueError:
            start_response('500 Oops', [('X-Second', 'yes')], sys.exc_info())
        return [b'sorry']
    assert run(app) == [('head', b'500 Oops', [(b'X-Second', b'yes'), (b'Content-Length', b'5')],
                         b'sorry', True)]


def test_second_start_response_without_exc_info_is_refused():
    def app(environ, start_response):
        start_response('200 OK', [])
        start_response('500 Oops', [])
        return []
    with pytest.raises(AssertionError, match='Headers already set!'):
        run(app)


def test_exc_info_after_headers_reraises_original():
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
        run(app)


@pytest.mark.parametrize('status, headers, message', [
    ('200', [], 'at least 4'), ('abc OK', [], '3-digit'), ('200OK', [], 'space after'),
    ('200 OK', (), 'must be a list'), ('200 OK', [('X', 1)], 'Value of header'),
])
def test_start_response_checks_raise_even_under_O(status, headers, message):
    def app(environ, start_response):
        start_response(status, headers)
        return []
    with pytest.raises(AssertionError, match=message):
        run(app)


def test_peer_gone_is_quiet_and_close_is_called():
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
    assert gateway.run_application(app, {}, GoneResponder()) is False
    assert closed == [True]


def test_debug_page_names_the_exception():
    try:
        raise ValueError('<b>bad</b>')
    except ValueError:
        import sys
        page = gateway.error_page(True, sys.exc_info())
    assert b'ValueError' in page and b'&lt;b&gt;bad' in page and b'<b>bad' not in page
    assert gateway.error_page(False) == gateway.ERROR_BODY
