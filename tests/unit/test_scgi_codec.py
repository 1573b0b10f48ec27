"""The SCGI header netstring decoder, on both backends: the request as real web servers send
it, any split of it, every malformed prefix or block (an SCGIError naming what is wrong,
raised as early as the bytes allow), and the twins' agreement on arbitrary input.
"""
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flupfast.limits import MAX_SCGI_HEADER_BYTES
from flupfast.protocols.errors import SCGIError
from flupfast.protocols.scgi import encode_request

# What nginx's stock scgi_params sends for GET /app/a%20b?x=1 (ordering kept).
NGINX = [('CONTENT_LENGTH', '5'), ('SCGI', '1'), ('REQUEST_METHOD', 'POST'),
         ('REQUEST_URI', '/app/a%20b?x=1'), ('QUERY_STRING', 'x=1'),
         ('CONTENT_TYPE', 'text/plain'), ('DOCUMENT_URI', '/app/a b'),
         ('SERVER_PROTOCOL', 'HTTP/1.1'), ('REMOTE_ADDR', '127.0.0.1'),
         ('SERVER_NAME', 'localhost'), ('SERVER_PORT', '80'),
         ('HTTP_HOST', 'localhost'), ('HTTP_COOKIE', 'a=\xe9')]


def block(pairs):
    return b''.join(n.encode('latin-1') + b'\0' + v.encode('latin-1') + b'\0'
                    for n, v in pairs)


def netstring(data):
    return b'%d:%s,' % (len(data), data)


def errors(backend, data):
    with pytest.raises(SCGIError) as info:
        backend.decode_scgi_request(data)
    return str(info.value)


def test_decodes_a_real_request_and_says_where_the_body_starts(backend):
    wire = netstring(block(NGINX)) + b'hello'
    environ, length, used = backend.decode_scgi_request(wire)
    assert environ == dict(NGINX)
    assert list(environ) == [n for n, _ in NGINX]
    assert length == 5
    assert wire[used:] == b'hello'


@pytest.mark.parametrize('kind', [bytes, bytearray, memoryview])
def test_takes_any_buffer(backend, kind):
    wire = netstring(block(NGINX))
    assert backend.decode_scgi_request(kind(wire))[0] == dict(NGINX)


def test_every_prefix_is_incomplete_and_the_whole_is_complete(backend):
    wire = netstring(block(NGINX))
    for cut in range(len(wire)):
        assert backend.decode_scgi_request(wire[:cut]) is None, cut
    assert backend.decode_scgi_request(wire)[2] == len(wire)


def test_encode_request_puts_content_length_and_scgi_first(backend):
    wire = encode_request({'REQUEST_METHOD': 'GET'}, b'xy')
    environ, length, used = backend.decode_scgi_request(wire)
    assert list(environ) == ['CONTENT_LENGTH', 'SCGI', 'REQUEST_METHOD']
    assert (length, wire[used:]) == (2, b'xy')


def test_empty_values_and_large_content_length(backend):
    pairs = [('CONTENT_LENGTH', '107374182400'), ('SCGI', '1'), ('QUERY_STRING', '')]
    environ, length, _ = backend.decode_scgi_request(netstring(block(pairs)))
    assert environ['QUERY_STRING'] == '' and length == 100 << 30


# nginx before 1.23 sends one pair per header line: two Cookie lines, two X-Forwarded-For.
NGINX_REPEATS = NGINX[:-1] + [('HTTP_COOKIE', 'a=1'), ('HTTP_X_FORWARDED_FOR', '10.0.0.1'),
                              ('HTTP_COOKIE', 'b=2'), ('HTTP_X_FORWARDED_FOR', '10.0.0.2'),
                              ('CONTENT_LENGTH', '5'), ('SCGI', '1')]


def test_a_missing_scgi_header_is_accepted_as_flup(backend):
    """nginx adds SCGI=1 only through the stock scgi_params; a site's own list may lack it."""
    environ, length, _ = backend.decode_scgi_request(netstring(block(
        [('CONTENT_LENGTH', '0'), ('REQUEST_METHOD', 'GET')])))
    assert (environ, length) == ({'CONTENT_LENGTH': '0', 'REQUEST_METHOD': 'GET'}, 0)


def test_a_repeated_name_keeps_its_last_value_as_flup(backend):
    environ, length, _ = backend.decode_scgi_request(netstring(block(NGINX_REPEATS)))
    assert environ == dict(NGINX_REPEATS)  # dict(): the last pair of each name wins
    assert (environ['HTTP_COOKIE'], environ['HTTP_X_FORWARDED_FOR']) == ('b=2', '10.0.0.2')
    assert length == 5


@pytest.mark.parametrize('data, message', [
    (b'GET / HTTP/1.1\r\n', 'expected digits then ":"'),   # HTTP sent to the SCGI port
    (b'G', 'expected digits then ":"'),                    # ... known from its first byte
    (b'12a:', 'expected digits then ":"'),
    (b'-1:', 'expected digits then ":"'),
    (b':,', 'empty'),
    (b'01', 'leading zero'),                                # known before the ':'
    (b'007:abcdefg,', 'leading zero'),
    (b'12345678', 'more than 7 digits'),
    (b'9999999:', 'exceeds the 1048576-byte cap'),
    (b'3:abc;', 'not terminated by ","'),
    (b'0:,', 'missing CONTENT_LENGTH'),
])
def test_a_malformed_netstring_is_an_error_as_early_as_possible(backend, data, message):
    assert message in errors(backend, data)


def test_caps_as_large_as_an_index_holds(backend):
    """A cap may be as large as sys.maxsize: a length of more digits than an index holds is
    over it, and any number of headers is under it (found in review: the compiled codec's
    length overflowed into a read far outside the data, and twice the pair cap wrapped)."""
    huge = sys.maxsize
    with pytest.raises(SCGIError, match='exceeds the %d-byte cap' % huge):
        backend.decode_scgi_request(b'9999999999999999999:' + b'x' * 40, max_header=huge)
    with pytest.raises(SCGIError, match='exceeds'):
        backend.decode_scgi_request(b'%d:' % (huge + 1), max_header=huge)
    wire = netstring(block([('CONTENT_LENGTH', '0'), ('SCGI', '1')]))
    assert backend.decode_scgi_request(wire, max_pairs=huge)[:2] == (
        {'CONTENT_LENGTH': '0', 'SCGI': '1'}, 0)


def test_the_cap_is_the_limit(backend):
    assert len(str(MAX_SCGI_HEADER_BYTES)) == 7
    wire = b'%d:' % MAX_SCGI_HEADER_BYTES
    assert backend.decode_scgi_request(wire) is None  # at the cap: wait for the block
    assert 'exceeds' in errors(backend, b'%d:' % (MAX_SCGI_HEADER_BYTES + 1))


@pytest.mark.parametrize('raw, message', [
    (b'CONTENT_LENGTH\x000\x00SCGI\x001', 'does not end with NUL'),
    (b'CONTENT_LENGTH\x000\x00SCGI\x00', 'name without a value'),
    (b'CONTENT_LENGTH\x000\x00\x00x\x00SCGI\x001\x00', 'empty header name'),
    (b'SCGI\x001\x00CONTENT_LENGTH\x000\x00', 'CONTENT_LENGTH is not the first header'),
    (b'SCGI\x001\x00', 'missing CONTENT_LENGTH'),
    (b'CONTENT_LENGTH\x00\x00SCGI\x001\x00', "invalid CONTENT_LENGTH ''"),
    (b'CONTENT_LENGTH\x00-1\x00SCGI\x001\x00', "invalid CONTENT_LENGTH '-1'"),
    (b'CONTENT_LENGTH\x00 5\x00SCGI\x001\x00', "invalid CONTENT_LENGTH ' 5'"),
    (b'CONTENT_LENGTH\x005x\x00SCGI\x001\x00', "invalid CONTENT_LENGTH '5x'"),
    (b'CONTENT_LENGTH\x000\x00SCGI\x002\x00', "unsupported SCGI version '2'"),
    (b'CONTENT_LENGTH\x000\x00CONTENT_LENGTH\x005\x00SCGI\x001\x00',
     "conflicting CONTENT_LENGTH '5' after '0'"),
    (b'CONTENT_LENGTH\x000\x00SCGI\x001\x00CONTENT_LENGTH\x00\x00',
     "conflicting CONTENT_LENGTH '' after '0'"),
])
def test_a_malformed_header_block_is_an_error(backend, raw, message):
    assert message in errors(backend, netstring(raw))


def test_too_many_headers(backend):
    pairs = [('CONTENT_LENGTH', '0'), ('SCGI', '1')] + [('H%d' % i, '') for i in range(10)]
    wire = netstring(block(pairs))
    assert len(backend.decode_scgi_request(wire)[0]) == 12
    with pytest.raises(SCGIError, match='more than 11 headers'):
        backend.decode_scgi_request(wire, max_pairs=11)


def test_a_smaller_cap(backend):
    wire = netstring(block(NGINX))
    with pytest.raises(SCGIError, match='exceeds the 100-byte cap'):
        backend.decode_scgi_request(wire, max_header=100)


# Boundaries, as fixed inputs: a pure-only machine (no compiled twin to compare with) still
# catches a length read one byte short of the buffer's end or a cap off by one.

def test_the_netstring_completes_at_its_comma_and_not_one_byte_before(backend):
    for body in (b'', b'x'):
        wire = netstring(block([('CONTENT_LENGTH', '1'), ('SCGI', '1')]))
        assert backend.decode_scgi_request(wire[:-1]) is None
        assert backend.decode_scgi_request(wire + body)[2] == len(wire)
        assert 'not terminated' in errors(backend, wire[:-1] + b';' + body)


@pytest.mark.parametrize('data, message', [
    (b'01', "invalid netstring length b'01': leading zero"),
    (b'9999999:', 'SCGI header block of 9999999 bytes exceeds the 1048576-byte cap'),
    (b'3:abc;', 'netstring not terminated by ","'),
    (netstring(block([('CONTENT_LENGTH', '0'), ('SCGI', '2')])), "unsupported SCGI version '2'"),
    (netstring(block([('CONTENT_LENGTH', '1' * 20), ('SCGI', '1')])),
     'CONTENT_LENGTH of 20 digits is too large'),
])
def test_error_messages_in_full(backend, data, message):
    assert errors(backend, data) == message


def test_pair_count_error_message_in_full(backend):
    wire = netstring(block([('CONTENT_LENGTH', '0'), ('SCGI', '1'), ('A', '')]))
    with pytest.raises(SCGIError) as info:
        backend.decode_scgi_request(wire, max_pairs=2)
    assert str(info.value) == 'more than 2 headers'


def test_pair_count_cap_at_the_cap_and_one_past(backend):
    from flupfast.limits import MAX_PARAMS_PAIRS
    pairs = [('CONTENT_LENGTH', '0'), ('SCGI', '1')]
    pairs += [('H%d' % i, '') for i in range(MAX_PARAMS_PAIRS - 2)]
    environ, _, _ = backend.decode_scgi_request(netstring(block(pairs)))
    assert len(environ) == MAX_PARAMS_PAIRS
    pairs.append(('ONE_MORE', ''))
    assert 'more than %d headers' % MAX_PARAMS_PAIRS in errors(backend, netstring(block(pairs)))


def test_header_block_cap_at_the_cap_and_one_past(backend):
    head = block([('CONTENT_LENGTH', '0'), ('SCGI', '1')])
    filler = MAX_SCGI_HEADER_BYTES - len(head) - len(b'F\0\0')
    at_cap = head + b'F\0' + b'f' * filler + b'\0'
    assert len(at_cap) == MAX_SCGI_HEADER_BYTES
    environ, _, used = backend.decode_scgi_request(netstring(at_cap) + b'body')
    assert len(environ['F']) == filler and used == len(netstring(at_cap))
    past = head + b'F\0' + b'f' * (filler + 1) + b'\0'
    assert 'exceeds the %d-byte cap' % MAX_SCGI_HEADER_BYTES in errors(backend, netstring(past))


@pytest.mark.parametrize('value, expected', [
    ('9223372036854775807', (1 << 63) - 1), ('0009223372036854775807', (1 << 63) - 1),
    ('9223372036854775808', None), ('10000000000000000000', None), ('0' * 30, 0),
    # the compiled twin counts up to 18 digits itself: at and around that edge
    ('0', 0), ('000012', 12), ('999999999999999999', 999999999999999999),
    ('0999999999999999999', 999999999999999999), ('1000000000000000000', 10 ** 18),
])
def test_content_length_at_its_cap_and_one_past(backend, value, expected):
    wire = netstring(block([('CONTENT_LENGTH', value), ('SCGI', '1')]))
    if expected is None:
        assert 'too large' in errors(backend, wire)
    else:
        assert backend.decode_scgi_request(wire)[1] == expected


def _outcome(decode, data):
    try:
        return 'ok', decode(data)
    except SCGIError as exc:
        return 'error', str(exc)


names = st.sampled_from(['CONTENT_LENGTH', 'SCGI', 'A', 'PATH_INFO', '', 'x\xe9'])
values = st.sampled_from(['0', '1', '12', '', '-1', 'a b', '\xff'])


@settings(max_examples=400, deadline=None)
@given(pairs=st.lists(st.tuples(names, values), max_size=6), noise=st.binary(max_size=4),
       cut=st.integers(min_value=0, max_value=200))
def test_the_twins_agree_on_structured_requests(pairs, noise, cut):
    from tests.conftest import COMPILED, PURE
    if COMPILED is None:
        pytest.skip('compiled backend not built')
    wire = netstring(block(pairs) + noise) + b'body'
    for data in (wire, wire[:cut]):
        assert _outcome(PURE.decode_scgi_request, data) == \
            _outcome(COMPILED.decode_scgi_request, data)


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=64))
def test_the_twins_agree_on_any_bytes(data):
    from tests.conftest import COMPILED, PURE
    if COMPILED is None:
        pytest.skip('compiled backend not built')
    for wire in (data, netstring(data), b'%d:' % len(data) + data):
        assert _outcome(PURE.decode_scgi_request, wire) == \
            _outcome(COMPILED.decode_scgi_request, wire)
