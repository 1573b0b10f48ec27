"""gateway: the status and headers an app hands to start_response are checked before a byte
is sent (known_differences 'response-head-checked'): control characters, non-token names,
malformed statuses are the app's error; HTAB and obs-text stay legal; the caches stay small.
"""
import os
import subprocess
import sys

import pytest

from flupfast import gateway

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Recorder:
    def __init__(self):
        self.calls = []

    def send_head(self, status, headers, data, more):
        self.calls.append(('head', status, list(headers), bytes(data)))

    def send_body(self, data, more):
        self.calls.append(('body', bytes(data)))


def answer(backend, status, headers, exc_info=None):
    """What the responder got for an app calling start_response(status, headers)."""
    recorder = Recorder()

    def app(environ, start_response):
        if exc_info:
            start_response(status, headers, exc_info)
        else:
            start_response(status, headers)
        return [b'body']
    backend.run_application(app, {}, recorder)
    return recorder.calls


SPLIT = '/x\r\nSet-Cookie: admin=1'


@pytest.mark.parametrize('value', [
    SPLIT, '/x\nSet-Cookie: admin=1', '/x\rSet-Cookie: admin=1', 'a\x00b', 'a\x01', 'a\x1f',
    'a\x7f', SPLIT.encode('latin-1'), b'a\x00b', b'\x0b'])
def test_a_control_character_in_a_value_is_the_apps_error(value, backend):
    with pytest.raises(gateway.ResponseHeadError) as info:
        answer(backend, '302 Found', [('Content-Type', 'text/plain'), ('Location', value)])
    message = str(info.value)
    assert "b'Location'" in message and 'control character' in message
    assert 'admin' not in message and '/x' not in message  # the value is never shown


@pytest.mark.parametrize('name', ['Bad Name', 'X:Y', 'X\r\nSet-Cookie', '', 'Caf\xe9', '(x)',
                                  'a/b', 'x\x00', b'Bad Name', b'X\nY'])
def test_a_name_that_is_not_a_token_is_the_apps_error(name, backend):
    with pytest.raises(gateway.ResponseHeadError, match='is not an HTTP token'):
        answer(backend, '200 OK', [(name, 'v')])


def test_the_error_shows_a_long_name_cut_and_escaped(backend):
    with pytest.raises(gateway.ResponseHeadError) as info:
        answer(backend, '200 OK', [('X\r\n' + 'y' * 10000, 'v')])
    assert len(str(info.value)) < 200 and '\r' not in str(info.value)


@pytest.mark.parametrize('value, wire', [
    ('a\tb', b'a\tb'),                        # HTAB is legal inside a value (RFC 9110 5.5)
    ('caf\xe9 \xa0\x85\xff', b'caf\xe9 \xa0\x85\xff'),  # obs-text: latin-1, as flup sends it
    (b'\x80\xff', b'\x80\xff'),
    ('', b''),
    ("!#$%&'*+-.^_`|~ \"(),/:;<=>?@[\\]{}", b"!#$%&'*+-.^_`|~ \"(),/:;<=>?@[\\]{}"),
])
def test_htab_obs_text_and_punctuation_in_a_value_are_sent(value, wire, backend):
    [head] = answer(backend, '200 OK', [("X-Tok!#$%&'*+-.^_`|~09az", value)])
    assert head[2][0] == (b"X-Tok!#$%&'*+-.^_`|~09az", wire)


@pytest.mark.parametrize('status', ['200 OK\r\nSet-Cookie: a=1', '200 OK\n', '200 O\x00K',
                                    '+20 OK', ' 20 OK', '2_0 OK', b'200 OK\r\n'])
def test_a_malformed_status_is_the_apps_error(status, backend):
    with pytest.raises(gateway.ResponseHeadError, match='3 digits, a space'):
        answer(backend, status, [])


@pytest.mark.parametrize('status', ['200 ', '200 OK\tfine', '599 caf\xe9', b'404 Not Found'])
def test_a_status_with_an_empty_or_latin1_reason_is_sent(status, backend):
    [head] = answer(backend, status, [])
    assert head[1] == (status if type(status) is bytes else status.encode('latin-1'))


def test_flups_own_checks_keep_flups_messages(backend):
    for status, headers, message in [('200', [], 'at least 4'), ('abc OK', [], '3-digit'),
                                     ('200OK', [], 'space after'),
                                     ('200 OK', [('X', 1)], 'Value of header')]:
        with pytest.raises(AssertionError, match=message) as info:
            answer(backend, status, headers)
        assert type(info.value) is AssertionError


def test_the_error_is_an_assertion_error_raised_before_anything_is_sent(backend):
    assert issubclass(gateway.ResponseHeadError, AssertionError)
    recorder = Recorder()
    caught = []

    def app(environ, start_response):
        try:
            start_response('302 Found', [('Location', SPLIT)])
        except AssertionError as exc:
            caught.append(exc)
        start_response('200 OK', [('Content-Type', 'text/plain')])  # may try again
        return [b'ok']
    backend.run_application(app, {}, recorder)
    assert len(caught) == 1
    assert recorder.calls == [('head', b'200 OK', [(b'Content-Type', b'text/plain'),
                                                   (b'Content-Length', b'2')], b'ok')]


def test_headers_given_with_exc_info_are_checked_too(backend):
    try:
        raise ValueError('app failed')
    except ValueError:
        import sys
        exc_info = sys.exc_info()
    with pytest.raises(gateway.ResponseHeadError):
        answer(backend, '500 Oops', [('Location', SPLIT)], exc_info)


def test_pairs_as_lists_and_repeated_lists_answer_the_same(backend):
    headers = [['Content-Type', 'text/plain'], ('X-A', 'b')]
    first = answer(backend, '200 OK', headers)
    assert first == answer(backend, '200 OK', headers) == answer(backend, '200 OK', [tuple(p) for p in headers])
    with pytest.raises(gateway.ResponseHeadError):
        answer(backend, '200 OK', [['Location', SPLIT]])


def test_a_refused_pair_is_refused_every_time(backend):
    for _ in range(3):
        with pytest.raises(gateway.ResponseHeadError):
            answer(backend, '302 Found', [('Location', SPLIT)])
    assert ('Location', SPLIT) not in gateway._checked_pairs


def test_the_caches_stay_bounded(backend):
    for i in range(3 * gateway._CHECKED_PAIRS_MAX):
        answer(backend, '200 OK', [('Set-Cookie', 'sid=%d' % i), ('X-Name-%d' % i, 'v')])
    assert len(gateway._checked_pairs) <= gateway._CHECKED_PAIRS_MAX
    assert len(gateway._token_names) <= gateway._TOKEN_NAMES_MAX
    big = ('X-Big', 'v' * (1 << 20))
    [head] = answer(backend, '200 OK', [big])
    assert head[2][0] == (b'X-Big', b'v' * (1 << 20))
    assert big not in gateway._checked_pairs  # a 1 MiB value is checked, never kept


def test_bytes_headers_warn_of_nothing_under_python_bb(backend):
    """The pair cache holds str pairs; bytes pairs hash alike, and comparing them with str
    raises under ``python -bb``: there the lookup takes only (str, str) tuples."""
    code = '\n'.join([
        'from flupfast import _impl',
        'assert _impl.BACKEND == %r' % ('python' if backend.name == 'py' else 'cython'),
        'class R:',
        '    def send_head(self, *a): pass',
        '    def send_body(self, *a): pass',
        'for headers in ([("Content-Type", "text/plain")], [(b"Content-Type", b"text/plain")],',
        '                [("Content-Type", b"text/plain")], [["X", "y"]]):',
        '    def app(environ, start_response, headers=headers):',
        '        start_response("200 OK", headers)',
        '        return [b"x"]',
        '    _impl.run_application(app, {}, R())',
        'print("ok")'])
    env = dict(os.environ, FLUPFAST_SPEEDUPS='0' if backend.name == 'py' else '1')
    done = subprocess.run([sys.executable, '-bb', '-c', code], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, env=env)
    assert (done.returncode, done.stdout) == (0, 'ok\n'), done.stderr
