"""The uwsgi connection over socketpairs, on both backends: what only uwsgi does. What it shares
with SCGI (one connection, two codecs: the body stream, file_wrapper, PATH_INFO rules, the 500
page, bad input) runs once per protocol in test_scgi_connection.py; here: the status line
repeats the request's SERVER_PROTOCOL, wsgi.url_scheme follows uWSGI, an empty CONTENT_LENGTH,
the overload answer speaks HTTP, and the front ends take SCGI's keywords.
"""
import socket

import pytest

from flupfast.server import uwsgi_base
from tests.unit.connection_harness import backend_fixture, hello
from tests.unit.scgi_harness import UWSGIHarness as Harness
from tests.unit.scgi_harness import environ_app
from tests.uwsgi_client import parse_response, read_all, request_bytes

use_backend = backend_fixture(*Harness.twins)


@pytest.mark.parametrize('protocol, line', [
    ('HTTP/1.0', b'HTTP/1.0 200 OK'), ('HTTP/2.0', b'HTTP/2.0 200 OK'),
    (None, b'HTTP/1.0 200 OK'),                        # uWSGI's default
    ('HTTP/1.1\r\nX-Injected: 1', b'HTTP/1.0 200 OK'),  # never echoed
    ('INCLUDED', b'HTTP/1.0 200 OK'), ('HTTP/1.10', b'HTTP/1.0 200 OK'),
])
def test_the_status_line_repeats_server_protocol(use_backend, protocol, line):
    raw = Harness(hello).raw(request_bytes('/', protocol=protocol), shut=False)
    assert raw.split(b'\r\n', 1)[0] == line
    assert raw.count(b'\r\n') == 4  # the status line, 2 headers, the blank line: no injection


@pytest.mark.parametrize('extra, scheme', [
    ([], 'http'),
    ([('HTTPS', 'on')], 'https'), ([('HTTPS', 'ON')], 'https'), ([('HTTPS', '1')], 'https'),
    ([('HTTPS', 'off')], 'http'), ([('HTTPS', '')], 'http'),
    ([('REQUEST_SCHEME', 'https')], 'https'), ([('REQUEST_SCHEME', 'http')], 'http'),
    ([('REQUEST_SCHEME', 'gopher')], 'http'),
    ([('UWSGI_SCHEME', 'https')], 'https'),
    ([('UWSGI_SCHEME', 'http'), ('HTTPS', 'on')], 'http'),     # uWSGI's override first
    ([('UWSGI_SCHEME', 'gopher'), ('HTTPS', 'ON')], 'https'),  # an odd one is passed over
    ([('UWSGI_SCHEME', 'HTTPS')], 'https'), ([('REQUEST_SCHEME', 'HTTPS')], 'https'),
    ([('HTTPS', 'off'), ('REQUEST_SCHEME', 'https')], 'http'),  # then HTTPS
    ([('HTTPS', ''), ('REQUEST_SCHEME', 'https')], 'https'),  # nginx: HTTPS if_not_empty
])
def test_url_scheme_by_uwsgis_rule(use_backend, extra, scheme):
    assert eval(Harness(environ_app).request('/', extra=extra)[2])['wsgi.url_scheme'] == scheme


def test_an_empty_content_length_is_no_body_and_seen_as_sent(use_backend):
    """nginx's uwsgi_params sends $content_length, empty for a GET."""
    env = eval(Harness(environ_app).request('/', content_length='')[2])
    assert env['CONTENT_LENGTH'] == ''


def test_the_overload_answer_is_http(use_backend):
    h = Harness(hello)
    ours, theirs = socket.socketpair()
    with ours:
        ours.settimeout(10)
        ours.sendall(request_bytes('/', protocol='HTTP/1.1'))
        ours.shutdown(socket.SHUT_WR)
        h.connection_class(theirs, '', h.server, None).refuse_overloaded()
        status, headers, body = parse_response(read_all(ours))
    assert status == b'503 Service Unavailable' and (b'Retry-After', b'1') in headers


def test_the_front_ends_take_the_scgi_keywords():
    import inspect
    from flupfast.server import scgi, scgi_fork, scgi_single, uwsgi, uwsgi_fork, uwsgi_single
    for ours, theirs in ((uwsgi, scgi), (uwsgi_fork, scgi_fork), (uwsgi_single, scgi_single)):
        assert inspect.signature(ours.WSGIServer.__init__) == \
            inspect.signature(theirs.WSGIServer.__init__)
        server = ours.WSGIServer(hello, bindAddress=('127.0.0.1', 0))
        assert server.logger.name == 'uwsgi-wsgi'
        assert server._jobClass is uwsgi_base.Connection, ours
