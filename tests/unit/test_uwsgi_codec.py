"""The uwsgi packet header and vars decoder, on both backends: the request as nginx's
uwsgi_params builds it, any split of it, every malformed header or vars block (a UWSGIError
naming what is wrong, raised as early as the bytes allow), every length field and cap at its
limit and one past, and the twins' agreement on arbitrary input.
"""
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flupfast.limits import MAX_PARAMS_PAIRS, MAX_UWSGI_VARS_BYTES
from flupfast.protocols.errors import ProtocolError, UWSGIError
from flupfast.protocols.uwsgi import encode_request

# What nginx's stock uwsgi_params sends for POST /app/a%20b?x=1 (ordering kept; CONTENT_LENGTH
# comes from $content_length, HTTP_* after the params).
NGINX = [('QUERY_STRING', 'x=1'), ('REQUEST_METHOD', 'POST'), ('CONTENT_TYPE', 'text/plain'),
         ('CONTENT_LENGTH', '5'), ('REQUEST_URI', '/app/a%20b?x=1'),
         ('PATH_INFO', '/app/a b'), ('DOCUMENT_ROOT', '/srv'), ('SERVER_PROTOCOL', 'HTTP/1.1'),
         ('REQUEST_SCHEME', 'http'), ('REMOTE_ADDR', '127.0.0.1'), ('REMOTE_PORT', '5555'),
         ('SERVER_PORT', '80'), ('SERVER_NAME', 'localhost'), ('HTTP_HOST', 'localhost'),
         ('HTTP_COOKIE', 'a=\xe9')]


def var(data):
    return struct.pack('<H', len(data)) + data


def vars_block(pairs):
    return b''.join(var(n.encode('latin-1')) + var(v.encode('latin-1')) for n, v in pairs)


def packet(block, modifier1=0, modifier2=0):
    return struct.pack('<BHB', modifier1, len(block), modifier2) + block


def errors(backend, data, **caps):
    with pytest.raises(UWSGIError) as info:
        backend.decode_uwsgi_request(data, **caps)
    return str(info.value)


def test_decodes_a_real_request_and_says_where_the_body_starts(backend):
    wire = packet(vars_block(NGINX)) + b'hello'
    environ, length, used = backend.decode_uwsgi_request(wire)
    assert environ == dict(NGINX)
    assert list(environ) == [n for n, _ in NGINX]
    assert length == 5
    assert wire[used:] == b'hello'


def test_the_header_is_little_endian(backend):
    block = vars_block([('A', 'x' * 300)])  # 0x0131 bytes: the two size bytes differ
    wire = b'\x00' + bytes((len(block) & 0xFF, len(block) >> 8)) + b'\x00' + block
    assert backend.decode_uwsgi_request(wire)[0] == {'A': 'x' * 300}
    assert backend.decode_uwsgi_request(wire[:-1]) is None


@pytest.mark.parametrize('kind', [bytes, bytearray, memoryview])
def test_takes_any_buffer(backend, kind):
    wire = packet(vars_block(NGINX))
    assert backend.decode_uwsgi_request(kind(wire))[0] == dict(NGINX)


def test_every_prefix_is_incomplete_and_the_whole_is_complete(backend):
    wire = packet(vars_block(NGINX))
    for cut in range(len(wire)):
        assert backend.decode_uwsgi_request(wire[:cut]) is None, cut
    assert backend.decode_uwsgi_request(wire)[2] == len(wire)
    assert backend.decode_uwsgi_request(wire + b'trailing')[2] == len(wire)


def test_encode_request_adds_content_length(backend):
    wire = encode_request({'REQUEST_METHOD': 'GET'}, b'xy')
    environ, length, used = backend.decode_uwsgi_request(wire)
    assert environ == {'REQUEST_METHOD': 'GET', 'CONTENT_LENGTH': '2'}
    assert (length, wire[used:]) == (2, b'xy')


def test_encode_request_refuses_what_the_wire_cannot_say():
    message = 'a uwsgi var or vars block is longer than 65,535 bytes'
    with pytest.raises(ValueError) as info:
        encode_request({'A': 'x' * 65536})
    assert str(info.value) == message
    with pytest.raises(ValueError) as info:
        encode_request({'A%d' % i: 'x' * 30000 for i in range(3)})
    assert str(info.value) == message


def test_encode_request_takes_bytes_and_no_body_by_default(backend):
    """Names and values as bytes go out as they are; without a body, CONTENT_LENGTH is 0."""
    wire = encode_request([(b'REQUEST_METHOD', b'GET'), (b'HTTP_X', b'\xe9\x00')])
    environ, length, used = backend.decode_uwsgi_request(wire)
    assert environ == {'REQUEST_METHOD': 'GET', 'HTTP_X': '\xe9\x00', 'CONTENT_LENGTH': '0'}
    assert (length, wire[used:]) == (0, b'')
    assert (wire[0], wire[3]) == (0, 0)   # modifier1 0 (WSGI) and modifier2 0 by default


@pytest.mark.parametrize('value', ['X5', '5X', '-5', '+5', ' 5', '5 ', '0x5', '5.0'])
def test_a_content_length_not_all_digits_is_invalid(backend, value):
    wire = packet(vars_block([('CONTENT_LENGTH', value)]))
    assert errors(backend, wire) == 'invalid CONTENT_LENGTH %r' % value


@pytest.mark.parametrize('value', ['', None])
def test_an_empty_or_absent_content_length_is_no_body(backend, value):
    """uwsgi_params sends $content_length, empty for a GET; the app sees it as sent."""
    pairs = [('REQUEST_METHOD', 'GET')] + ([] if value is None else [('CONTENT_LENGTH', value)])
    environ, length, _ = backend.decode_uwsgi_request(packet(vars_block(pairs)))
    assert (environ, length) == (dict(pairs), 0)


def test_an_empty_vars_block_and_modifier2_are_accepted(backend):
    assert backend.decode_uwsgi_request(packet(b'', modifier2=7)) == ({}, 0, 4)


def test_empty_values_and_large_content_length(backend):
    pairs = [('CONTENT_LENGTH', '107374182400'), ('QUERY_STRING', '')]
    environ, length, _ = backend.decode_uwsgi_request(packet(vars_block(pairs)))
    assert environ['QUERY_STRING'] == '' and length == 100 << 30


# nginx before 1.23 sends one var per header line: two Cookie lines, two X-Forwarded-For.
NGINX_REPEATS = NGINX + [('HTTP_COOKIE', 'a=1'), ('HTTP_X_FORWARDED_FOR', '10.0.0.1'),
                         ('HTTP_COOKIE', 'b=2'), ('HTTP_X_FORWARDED_FOR', '10.0.0.2'),
                         ('CONTENT_LENGTH', '5')]


def test_a_repeated_name_keeps_its_last_value_as_scgi(backend):
    environ, length, _ = backend.decode_uwsgi_request(packet(vars_block(NGINX_REPEATS)))
    assert environ == dict(NGINX_REPEATS)
    assert (environ['HTTP_COOKIE'], environ['HTTP_X_FORWARDED_FOR']) == ('b=2', '10.0.0.2')
    assert length == 5


@pytest.mark.parametrize('modifier1', [1, 5, 9, 17, 71, 255])
def test_an_unserved_modifier1_fails_on_the_first_byte(backend, modifier1):
    message = 'modifier1 %d is not served (only 0, a WSGI request)' % modifier1
    assert errors(backend, bytes((modifier1,))) == message
    assert errors(backend, packet(vars_block(NGINX), modifier1=modifier1)) == message


def test_http_sent_to_the_uwsgi_port_fails_on_its_first_byte(backend):
    assert 'modifier1 71 is not served' in errors(backend, b'G')


def test_the_errors_are_protocol_errors():
    assert issubclass(UWSGIError, ProtocolError)


@pytest.mark.parametrize('block, message', [
    (b'\x01', 'vars block ends inside a key size'),
    (b'\x01\x00A', 'vars block ends inside the value size of \'A\''),
    (b'\x01\x00A\x01', 'vars block ends inside the value size of \'A\''),
    (b'\x00\x00\x01\x00x', 'empty var name'),
    (b'\x02\x00A', 'key of 2 bytes runs past the vars block'),
    (b'\x01\x00A\x02\x00x', 'value of 2 bytes runs past the vars block'),
    (vars_block([('CONTENT_LENGTH', '-1')]), "invalid CONTENT_LENGTH '-1'"),
    (vars_block([('CONTENT_LENGTH', ' 5')]), "invalid CONTENT_LENGTH ' 5'"),
    (vars_block([('CONTENT_LENGTH', '5x')]), "invalid CONTENT_LENGTH '5x'"),
    (vars_block([('CONTENT_LENGTH', '\xb2')]), "invalid CONTENT_LENGTH '\xb2'"),
    (vars_block([('CONTENT_LENGTH', '1' * 20)]), 'CONTENT_LENGTH of 20 digits is too large'),
    (vars_block([('CONTENT_LENGTH', '0'), ('CONTENT_LENGTH', '5')]),
     "conflicting CONTENT_LENGTH '5' after '0'"),
    (vars_block([('CONTENT_LENGTH', '0'), ('A', ''), ('CONTENT_LENGTH', '')]),
     "conflicting CONTENT_LENGTH '' after '0'"),
])
def test_a_malformed_vars_block_is_an_error_with_its_message(backend, block, message):
    assert errors(backend, packet(block)) == message


# Boundaries, as fixed inputs: a pure-only machine (no compiled twin to compare with) still
# catches a length read one byte short of the block's end or a cap off by one.

def test_the_vars_complete_at_their_last_byte_and_not_one_before(backend):
    wire = packet(vars_block([('A', 'xyz')]))
    assert backend.decode_uwsgi_request(wire[:-1]) is None
    assert backend.decode_uwsgi_request(wire)[2] == len(wire)
    assert backend.decode_uwsgi_request(wire[:3]) is None  # inside the header
    assert backend.decode_uwsgi_request(wire[:4]) is None  # the header alone


@pytest.mark.parametrize('key, value', [(1, 0), (1, 3), (40, 0), (7, 300)])
def test_each_length_field_at_the_block_end_and_one_past(backend, key, value):
    pair = var(b'K' * key) + var(b'v' * value)
    assert backend.decode_uwsgi_request(packet(pair))[0] == {'K' * key: 'v' * value}
    # The value's length one past the block's end.
    longer = var(b'K' * key) + struct.pack('<H', value + 1) + b'v' * value
    assert errors(backend, packet(longer)) == \
        'value of %d bytes runs past the vars block' % (value + 1)
    # A key's length reaching the block's end (swallowing the value size), and one past.
    rest = b'K' * key + struct.pack('<H', 0)
    assert errors(backend, packet(struct.pack('<H', key + 2) + rest)) == \
        'vars block ends inside the value size of %r' % (rest.decode('latin-1'))
    assert errors(backend, packet(struct.pack('<H', key + 3) + rest)) == \
        'key of %d bytes runs past the vars block' % (key + 3)
    # The key's length reaching the block's end exactly: the value size is missing.
    assert errors(backend, packet(var(b'K' * key))) == \
        "vars block ends inside the value size of %r" % ('K' * key)


def test_the_vars_cap_at_the_cap_and_one_past(backend):
    head = vars_block([('CONTENT_LENGTH', '0')])
    filler = MAX_UWSGI_VARS_BYTES - len(head) - len(b'\x01\x00F\x00\x00')
    at_cap = head + var(b'F') + var(b'f' * filler)
    assert len(at_cap) == MAX_UWSGI_VARS_BYTES == 0xFFFF  # the wire's largest datasize
    environ, _, used = backend.decode_uwsgi_request(packet(at_cap) + b'body')
    assert len(environ['F']) == filler and used == 4 + MAX_UWSGI_VARS_BYTES
    # A smaller cap: at it and one past.
    small = vars_block([('A', 'bcd')])
    assert backend.decode_uwsgi_request(packet(small), max_vars=len(small))[2] == 4 + len(small)
    assert errors(backend, packet(small)[:4], max_vars=len(small) - 1) == \
        'uwsgi vars block of %d bytes exceeds the %d-byte cap' % (len(small), len(small) - 1)


def test_pair_count_cap_at_the_cap_and_one_past(backend):
    pairs = [('H%d' % i, '') for i in range(MAX_PARAMS_PAIRS)]
    environ, _, _ = backend.decode_uwsgi_request(packet(vars_block(pairs)))
    assert len(environ) == MAX_PARAMS_PAIRS
    pairs.append(('ONE_MORE', ''))
    assert errors(backend, packet(vars_block(pairs))) == 'more than %d vars' % MAX_PARAMS_PAIRS
    assert errors(backend, packet(vars_block(pairs[:3])), max_pairs=2) == 'more than 2 vars'
    assert len(backend.decode_uwsgi_request(packet(vars_block(pairs[:2])), max_pairs=2)[0]) == 2


def test_repeats_count_against_the_pair_cap(backend):
    wire = packet(vars_block([('A', '1')] * 3))
    assert backend.decode_uwsgi_request(wire, max_pairs=3)[0] == {'A': '1'}
    assert errors(backend, wire, max_pairs=2) == 'more than 2 vars'


@pytest.mark.parametrize('value, expected', [
    ('9223372036854775807', (1 << 63) - 1), ('0009223372036854775807', (1 << 63) - 1),
    ('9223372036854775808', None), ('10000000000000000000', None), ('0' * 30, 0),
    ('9' * 4301, None),
    # the compiled twin counts up to 18 digits itself: at and around that edge
    ('0', 0), ('000012', 12), ('999999999999999999', 999999999999999999),
    ('0999999999999999999', 999999999999999999), ('1000000000000000000', 10 ** 18),
])
def test_content_length_at_its_cap_and_one_past(backend, value, expected):
    wire = packet(vars_block([('CONTENT_LENGTH', value)]))
    if expected is None:
        assert 'too large' in errors(backend, wire)
    else:
        assert backend.decode_uwsgi_request(wire)[1] == expected


def _outcome(decode, data, *caps):
    try:
        return 'ok', decode(data, *caps)
    except UWSGIError as exc:
        return 'error', str(exc)


names = st.sampled_from(['CONTENT_LENGTH', 'REQUEST_METHOD', 'A', 'PATH_INFO', '', 'x\xe9'])
values = st.sampled_from(['0', '1', '12', '', '-1', 'a b', '\xff', '1' * 20])


@settings(max_examples=400, deadline=None)
@given(pairs=st.lists(st.tuples(names, values), max_size=6), noise=st.binary(max_size=4),
       cut=st.integers(min_value=0, max_value=200), modifier1=st.sampled_from([0, 0, 0, 1]),
       caps=st.sampled_from([(), (20, 2), (0, 0)]))
def test_the_twins_agree_on_structured_requests(pairs, noise, cut, modifier1, caps):
    from tests.conftest import COMPILED, PURE
    if COMPILED is None:
        pytest.skip('compiled backend not built')
    wire = packet(vars_block(pairs) + noise, modifier1) + b'body'
    for data in (wire, wire[:cut]):
        assert _outcome(PURE.decode_uwsgi_request, data, *caps) == \
            _outcome(COMPILED.decode_uwsgi_request, data, *caps)


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=64))
def test_the_twins_agree_on_any_bytes(data):
    from tests.conftest import COMPILED, PURE
    if COMPILED is None:
        pytest.skip('compiled backend not built')
    for wire in (data, packet(data), b'\x00' + data):
        assert _outcome(PURE.decode_uwsgi_request, wire) == \
            _outcome(COMPILED.decode_uwsgi_request, wire)
