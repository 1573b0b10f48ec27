"""PartsWriter, the response streams' base (output.py and its compiled twin): the head it
builds is build_cgi_head's, byte for byte, whatever the parts; a small first body chunk
leaves joined to it, a big one beside it; write() encodes str as the stream's protocol does."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flupfast.output import CGI_STATUS_PREFIX, JOIN_HEAD_LIMIT, build_cgi_head


def writer(backend, **attributes):
    """A stream of ``backend``'s PartsWriter that records what it is asked to write."""
    class Recording(backend.PartsWriter):
        def __init__(self):
            self.parts = []

        def write_parts(self, parts, hold=False):
            self.parts.append((tuple(bytes(part) for part in parts), hold))
    for name, value in attributes.items():
        setattr(Recording, name, value)
    return Recording()


HEADERS = [(b'Content-Type', b'text/plain'), (b'Content-Length', b'2')]


def test_a_small_body_leaves_joined_to_the_head(backend):
    stream = writer(backend)
    stream.send_head(b'200 OK', HEADERS, b'ok', True)
    assert stream.parts == [((build_cgi_head(b'200 OK', HEADERS) + b'ok',), True)]
    assert stream.parts[0][0][0] == (b'Status: 200 OK\r\nContent-Type: text/plain\r\n'
                                     b'Content-Length: 2\r\n\r\nok')


def test_a_big_body_leaves_beside_the_head_uncopied(backend):
    stream = writer(backend)
    body = b'x' * (JOIN_HEAD_LIMIT + 1)
    stream.send_head(b'200 OK', [], body, False)
    assert stream.parts == [((b'Status: 200 OK\r\n\r\n', body), False)]
    stream = writer(backend)
    stream.send_head(b'200 OK', [], body[:-1], False)  # at the limit: still joined
    assert stream.parts == [((b'Status: 200 OK\r\n\r\n' + body[:-1],), False)]


def test_the_status_prefix_of_the_class_or_the_instance_starts_the_head(backend):
    stream = writer(backend)
    stream.status_prefix = b'HTTP/1.1 '  # uwsgi's stream: set per request
    stream.send_head(b'404 Not Found', [(b'A', b'b')], b'', False)
    assert stream.parts == [((b'HTTP/1.1 404 Not Found\r\nA: b\r\n\r\n',), False)]
    assert writer(backend).status_prefix == CGI_STATUS_PREFIX


@pytest.mark.parametrize('status, headers, data', [
    (bytearray(b'200 OK'), HEADERS, b'ok'),              # a part that is not bytes
    (b'200 OK', ((b'A', b'1'), (b'B', b'2')), b'ok'),    # a tuple of headers
    (b'200 OK', [[b'A', b'1']], b'ok'),                  # a header that is a list
    (b'200 OK', [(b'A', memoryview(b'1'))], b'ok'),
    (b'200 OK', [(b'A', b'1')], bytearray(b'body')),
    (b'200 OK', [(b'A', b'1')], b'x' * (JOIN_HEAD_LIMIT + 5)),
])
def test_any_parts_give_build_cgi_heads_bytes(backend, status, headers, data):
    stream = writer(backend)
    stream.send_head(status, headers, data, False)
    head = build_cgi_head(status, headers)
    expected = (head + data,) if len(data) <= JOIN_HEAD_LIMIT else (head, bytes(data))
    assert stream.parts == [(expected, False)]


def test_a_header_that_is_not_a_pair_fails_as_build_cgi_head_does(backend):
    with pytest.raises(ValueError):
        build_cgi_head(b'200 OK', [(b'A', b'1', b'2')])
    with pytest.raises(ValueError):
        writer(backend).send_head(b'200 OK', [(b'A', b'1', b'2')], b'', False)


_token = st.binary(min_size=1, max_size=12)


def _backends():
    from tests.conftest import COMPILED, PURE, compiled_required
    if COMPILED is None and compiled_required():
        pytest.fail('the compiled backend is required but does not import')
    return [PURE] + ([COMPILED] if COMPILED is not None else [])


@given(status=st.binary(max_size=20), data=st.binary(max_size=40),
       headers=st.lists(st.tuples(_token, st.binary(max_size=30)), max_size=8),
       prefix=st.sampled_from([CGI_STATUS_PREFIX, b'HTTP/1.0 ', b'HTTP/1.1 ']))
def test_the_head_is_build_cgi_heads_for_any_bytes(status, data, headers, prefix):
    for backend in _backends():
        stream = writer(backend, status_prefix=prefix)
        stream.send_head(status, headers, data, True)
        assert stream.parts == [((build_cgi_head(status, headers, prefix) + data,), True)]


def test_write_encodes_str_as_the_stream_says_and_send_body_passes_through(backend):
    stream = writer(backend)
    stream.write('caf\xe9')
    stream.writelines([b'a', 'b'])
    stream.send_body(b'body', True)
    assert stream.parts == [((b'caf\xe9',), False), ((b'a',), False), ((b'b',), False),
                            ((b'body',), True)]
    utf8 = writer(backend, STR_ENCODING='utf-8')  # FastCGI's stream, as flup's
    utf8.write('caf\xe9')
    assert utf8.parts == [(('caf\xe9'.encode('utf-8'),), False)]
    assert utf8.can_send_file(None) is False
