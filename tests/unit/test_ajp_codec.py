"""AJP13 codec on both backends: packets fed whole, one byte at a time, split at every place
and with trailing bytes; FORWARD_REQUEST decoded as flup builds its environ (and where we
deliberately differ); every malformed input an AJPError with a message naming the fault; the
container encoders byte for byte against flup's own."""
import struct
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flup.server import ajp_base as flup_ajp
from flupfast.limits import AJP_DEFAULT_MAX_DATA, AJP_MAX_PACKET
from flupfast.protocols import ajp
from flupfast.protocols.errors import AJPError, ProtocolError
from tests import ajp_client as client


def decode(backend, **kwargs):
    return backend.decode_forward_request(client.forward_request(**kwargs))


def environ_of(backend, **kwargs):
    return decode(backend, **kwargs)[0]


# -- Tables and constants ---------------------------------------------------------------------

@pytest.mark.parametrize('name', [
    'SERVER_PREFIX', 'CONTAINER_PREFIX', 'PKTTYPE_FWD_REQ', 'PKTTYPE_SHUTDOWN', 'PKTTYPE_PING',
    'PKTTYPE_CPING', 'PKTTYPE_SEND_BODY', 'PKTTYPE_SEND_HEADERS', 'PKTTYPE_END_RESPONSE',
    'PKTTYPE_GET_BODY', 'PKTTYPE_CPONG', 'methodTable', 'requestHeaderTable', 'attributeTable',
    'responseHeaderTable'])
def test_flup_names_and_tables_are_flups(name):
    value = getattr(ajp, name)
    assert value == getattr(flup_ajp, name)
    assert type(value) is type(getattr(flup_ajp, name))


def test_spec_tables_cover_every_code():
    assert len(ajp.METHOD_NAMES) == 28 and ajp.METHOD_NAMES[27] == 'MKACTIVITY'
    assert ajp.METHOD_NAMES[26] == 'BASELINE-CONTROL'  # the HTTP verb, not flup's spelling
    assert len(ajp.REQUEST_HEADER_KEYS) == 15 and ajp.REQUEST_HEADER_KEYS[14] == 'HTTP_USER_AGENT'
    assert (ajp.ATTR_SECRET, ajp.ATTR_STORED_METHOD, ajp.ATTR_ARE_DONE) == (0x0C, 0x0D, 0xFF)
    assert ajp.CPONG_PACKET == b'AB\x00\x01\x09'


# -- AJPParser --------------------------------------------------------------------------------

PAYLOADS = [client.forward_request(headers=[('Host', 'h'), ('X-A', 'b')]), b'\x0a', b'',
            b'\x00\x03abc']
WIRE = b''.join(client.packet(p) for p in PAYLOADS)


def feed_whole(parser, data):
    return parser.feed(data)


def feed_bytewise(parser, data):
    packets = []
    for i in range(len(data)):
        packets += parser.feed(data[i:i + 1])
    return packets


def feed_with_trailing(parser, data):
    # The start of a next packet behind the data stays pending and yields nothing.
    packets = parser.feed(data + client.packet(b'\x02xyz')[:6])
    assert parser.pending == 6
    return packets


def feed_views_of_a_reused_buffer(parser, data):
    # As recv_into does: each piece is a view of one buffer, overwritten after the feed.
    buf = bytearray(7)
    packets = []
    for i in range(0, len(data), 7):
        piece = data[i:i + 7]
        buf[:len(piece)] = piece
        packets += parser.feed(memoryview(buf)[:len(piece)])
        buf[:] = b'\xee' * 7
    return packets


@pytest.mark.parametrize('feed', [feed_whole, feed_bytewise, feed_with_trailing,
                                  feed_views_of_a_reused_buffer])
def test_packets_out_of_any_feeding(backend, feed):
    parser = backend.AJPParser()
    packets = feed(parser, WIRE)
    assert packets == PAYLOADS
    assert all(type(p) is bytes for p in packets)


def test_split_at_every_position(backend):
    for cut in range(len(WIRE) + 1):
        parser = backend.AJPParser()
        packets = parser.feed(WIRE[:cut])
        assert parser.pending == cut - sum(4 + len(p) for p in packets)
        packets += parser.feed(bytearray(WIRE[cut:]))
        assert packets == PAYLOADS, cut
        assert parser.pending == 0


def test_max_packet_boundary(backend):
    largest = client.packet(b'\x02' + b'x' * (AJP_MAX_PACKET - 5))
    assert len(largest) == AJP_MAX_PACKET == 65536
    assert backend.AJPParser().feed(largest) == [largest[4:]]
    parser = backend.AJPParser()
    # One byte more is refused from its header alone, before any payload is buffered.
    with pytest.raises(AJPError, match=r'AJP packet of 65537 bytes exceeds max_packet=65536'):
        parser.feed(struct.pack('>2sH', ajp.SERVER_PREFIX, AJP_MAX_PACKET - 3))


@pytest.mark.parametrize('max_packet', [8192, 100])
def test_configured_max_packet(backend, max_packet):
    parser = backend.AJPParser(max_packet)
    assert parser.max_packet == max_packet
    assert parser.feed(client.packet(b'y' * (max_packet - 4))) == [b'y' * (max_packet - 4)]
    with pytest.raises(AJPError, match='exceeds max_packet=%d' % max_packet):
        feed_bytewise(parser, client.packet(b'y' * (max_packet - 3)))


def test_max_packet_must_hold_a_packet(backend):
    with pytest.raises(ValueError, match='at least 5'):
        backend.AJPParser(4)


@pytest.mark.parametrize('data, message', [
    (b'GET / HTTP/1.1\r\n\r\n', r'bad AJP packet magic 0x4745 \(expected 0x1234\); is an HTTP '
                                r'client talking to the AJP port\?'),
    (b'AB\x00\x01\x09', r'bad AJP packet magic 0x4142 \(expected 0x1234\); is an HTTP'),
    (b'\x16\x03\x01\x02\x00', r'^bad AJP packet magic 0x1603 \(expected 0x1234\)$'),
    (client.packet(b'ok') + b'\x12\x35', r'magic 0x1235'),
])
def test_bad_magic(backend, data, message):
    for feed in (feed_whole, feed_bytewise):
        with pytest.raises(AJPError, match=message):
            feed(backend.AJPParser(), data)


def test_magic_checked_as_soon_as_two_bytes_are_in(backend):
    parser = backend.AJPParser()
    assert parser.feed(b'G') == [] and parser.pending == 1
    with pytest.raises(AJPError, match='magic'):
        parser.feed(b'E')


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200) | st.builds(lambda a, b: a + b, st.just(WIRE),
                                                st.binary(max_size=20)),
       cut=st.integers(0, 400))
def test_any_bytes_give_packets_or_ajp_error_whatever_the_chunking(data, cut):
    """Per backend (the parity test compares the twins): every chunking gives the same
    packets, or every one fails with the same AJPError; nothing else escapes."""
    from tests.conftest import COMPILED, PURE
    for backend in [PURE] + ([COMPILED] if COMPILED else []):
        outcomes = set()
        for feed in (feed_whole, feed_bytewise,
                     lambda p, d: p.feed(d[:cut]) + p.feed(d[cut:])):
            parser = backend.AJPParser()
            try:
                outcomes.add(('ok', tuple(feed(parser, data)), parser.pending))
            except ProtocolError as exc:
                assert type(exc) is AJPError
                outcomes.add(('error', str(exc)))
        assert len(outcomes) == 1, outcomes


# -- FORWARD_REQUEST: the environ ---------------------------------------------------------------

@pytest.mark.parametrize('code', range(1, 28))
def test_every_method_code(backend, code):
    expected = ajp.methodTable[code].decode('latin-1').replace('BASELINE_', 'BASELINE-')
    assert environ_of(backend, method=code)['REQUEST_METHOD'] == expected


@pytest.mark.parametrize('code', [0, 28, 0x7F, 0xFE])
def test_unknown_method_code(backend, code):
    with pytest.raises(AJPError, match='unknown AJP method code 0x%02X' % code):
        decode(backend, method=code)


def test_stored_method(backend):
    # mod_jk sends PATCH and other verbs outside the table as 0xFF + stored_method (0x0D).
    env = environ_of(backend, method='PATCH')
    assert env['REQUEST_METHOD'] == 'PATCH'
    assert 'stored_method' not in env and 'STORED_METHOD' not in env
    assert list(env)[0] == 'REQUEST_METHOD'  # flup's key order is kept
    # A stored method beside a coded one does not override it.
    env = environ_of(backend, method='GET', attributes=[('stored_method', 'PATCH')])
    assert env['REQUEST_METHOD'] == 'GET'


@pytest.mark.parametrize('attributes', [[], [('stored_method', None)]], ids=['absent', 'null'])
def test_stored_method_code_without_the_attribute(backend, attributes):
    with pytest.raises(AJPError, match=r'method code 0xFF \(stored method\) without a '
                                       r'stored_method attribute'):
        decode(backend, method=0xFF, attributes=attributes)


def test_fixed_fields(backend):
    env, length, chunked, secret = decode(
        backend, method='POST', uri='/caf\xe9/x', protocol='HTTP/1.0', remote_addr='::1',
        remote_host='client.example', server_name='www.example', server_port=65535)
    assert env == {'REQUEST_METHOD': 'POST', 'SERVER_PROTOCOL': 'HTTP/1.0',
                   'REQUEST_URI': '/caf\xe9/x', 'REMOTE_ADDR': '::1',
                   'REMOTE_HOST': 'client.example', 'SERVER_NAME': 'www.example',
                   'SERVER_PORT': '65535'}
    assert (length, chunked, secret) == (None, False, None)
    assert all(type(k) is str and type(v) is str for k, v in env.items())


@pytest.mark.parametrize('is_ssl', [1, 0x80, 0])
def test_ssl_flag(backend, is_ssl):
    payload = bytearray(client.forward_request(is_ssl=True))
    at = payload.index(struct.pack('>HBH', 80, 1, 0))
    payload[at + 2] = is_ssl
    env = backend.decode_forward_request(bytes(payload))[0]
    assert env.get('HTTPS') == ('on' if is_ssl else None)


def test_every_coded_request_header(backend):
    headers = [(i, '42' if i == 8 else 'v%d' % i) for i in range(1, 15)]
    env, length, _, _ = decode(backend, headers=headers)
    for i in range(1, 15):
        name = ajp.requestHeaderTable[i].decode().upper().replace('-', '_')
        key = name if name.startswith('CONTENT_') else 'HTTP_' + name
        assert env[key] == ('42' if i == 8 else 'v%d' % i)
    assert length == 42
    assert 'HTTP_CONTENT_TYPE' not in env and 'HTTP_CONTENT_LENGTH' not in env
    assert len(env) == 7 + 14


@pytest.mark.parametrize('code', [0x00, 0x0F, 0xFF])
def test_unknown_request_header_code(backend, code):
    with pytest.raises(AJPError, match='unknown AJP request header code 0xA0%02X' % code):
        decode(backend, headers=[(code, 'x')])


def test_string_headers(backend):
    env = environ_of(backend, headers=[
        ('X-Forwarded-For', '10.0.0.1'), ('x-mixed-Case', 'a'), (('content-type',), 'text/x'),
        (('Content-Length',), '7'), (b'X-Raw', '\xff'), ('Dnt', ''),
        ('A' * 300, 'long name'), ('Transfer-Encoding', 'gzip')])
    assert env['HTTP_X_FORWARDED_FOR'] == '10.0.0.1'
    assert env['HTTP_X_MIXED_CASE'] == 'a'
    # Content-Type/-Length sent as strings map as the coded ones do (flup's addHeader).
    assert env['CONTENT_TYPE'] == 'text/x' and env['CONTENT_LENGTH'] == '7'
    assert env['HTTP_X_RAW'] == '\xff'  # latin-1 decoded
    assert env['HTTP_DNT'] == ''
    assert env['HTTP_' + 'A' * 300] == 'long name'
    assert env['HTTP_TRANSFER_ENCODING'] == 'gzip'


def test_header_names_as_flup_makes_them(backend):
    # flup: name.replace(b'-', b'_').upper(), then HTTP_ unless CONTENT_TYPE/CONTENT_LENGTH.
    names = [b'X-Foo', b'accept-language', b'x-Y-z9', b'Content-type', b'-']
    env = environ_of(backend, headers=[((n,), 'v') for n in names])
    for name in names:
        request = types.SimpleNamespace(environ={}, input=types.SimpleNamespace(
            setDataLength=lambda n: None))
        flup_ajp.Request.addHeader(request, name, b'v')
        (key,) = request.environ
        assert env[key] == 'v'


@pytest.mark.parametrize('name', [b'Content_Length', b'content_length', b'Transfer_Encoding',
                                  b'X_Forwarded-For', b'\xe9t\xe9', b'X Y', b'X:Y', b'X.Y'])
def test_a_header_name_beyond_letters_digits_and_dash_is_dropped(backend, name):
    """As httpd drops it from its CGI variables (known_differences
    'ajp-header-name-dropped'): a client's "Content_Length: 5" had set the body's length, and
    a GET then waited for a body Apache never sends (found in review)."""
    env, length, chunked, _ = decode(backend, headers=[
        ((name,), '5' if b'ength' in name else 'chunked'), ('X-Forwarded-For', '10.0.0.1')])
    assert (length, chunked) == (None, False)
    assert 'CONTENT_LENGTH' not in env and 'HTTP_TRANSFER_ENCODING' not in env
    assert env['HTTP_X_FORWARDED_FOR'] == '10.0.0.1'
    assert [key for key in env if key.startswith('HTTP_')] == ['HTTP_X_FORWARDED_FOR']


def test_repeated_headers_are_joined(backend):
    env = environ_of(backend, headers=[('Accept', 'a/b'), ('X-A', '1'), (1, 'c/d'), ('x-a', '2'),
                                       ('X-A', '3')])
    assert env['HTTP_ACCEPT'] == 'a/b, c/d'   # flup keeps only the last value
    assert env['HTTP_X_A'] == '1, 2, 3'


def test_every_attribute(backend):
    env, _, _, secret = decode(backend, attributes=[
        ('context', '/ctx'), ('servlet_path', '/sp'), ('remote_user', 'alice'),
        ('auth_type', 'Basic'), ('query_string', 'a=1&b=\xe9'), ('route', 'node1'),
        ('ssl_cert', '-----BEGIN CERTIFICATE-----'), ('ssl_cipher', 'TLS_AES_128_GCM_SHA256'),
        ('ssl_session', 'abcdef'), ('ssl_key_size', 256),
        ('req_attribute', ('AJP_REMOTE_PORT', '54321')),
        ('req_attribute', ('SSL_CLIENT_S_DN', 'CN=x')), ('secret', 's3cret')])
    assert env == {
        'REQUEST_METHOD': 'GET', 'SERVER_PROTOCOL': 'HTTP/1.1', 'REQUEST_URI': '/',
        'REMOTE_ADDR': '127.0.0.1', 'REMOTE_HOST': '', 'SERVER_NAME': 'localhost',
        'SERVER_PORT': '80', 'CONTEXT': '/ctx', 'SERVLET_PATH': '/sp', 'REMOTE_USER': 'alice',
        'AUTH_TYPE': 'Basic', 'QUERY_STRING': 'a=1&b=\xe9', 'JVM_ROUTE': 'node1',
        'SSL_CERT': '-----BEGIN CERTIFICATE-----', 'SSL_CIPHER': 'TLS_AES_128_GCM_SHA256',
        'SSL_SESSION': 'abcdef', 'SSL_KEY_SIZE': '256', 'AJP_REMOTE_PORT': '54321',
        'SSL_CLIENT_S_DN': 'CN=x'}
    assert secret == 's3cret'  # returned for the connection to check, never in environ


def test_attributes_repeat_and_override_as_in_flup(backend):
    env = environ_of(backend, attributes=[
        ('query_string', 'a'), ('query_string', 'b'), ('ssl_key_size', 0xFFFF),
        ('req_attribute', ('SERVER_NAME', 'from-attribute'))])
    assert env['QUERY_STRING'] == 'b' and env['SSL_KEY_SIZE'] == '65535'
    assert env['SERVER_NAME'] == 'from-attribute'  # flup's addAttribute overwrites too


@pytest.mark.parametrize('code', [0x00, 0x0E, 0x20, 0xFE])
def test_unknown_attribute_code(backend, code):
    with pytest.raises(AJPError, match='unknown AJP attribute code 0x%02X' % code):
        decode(backend, attributes=[(code, 'x')])


def test_null_strings(backend):
    # Fixed fields become '' as in flup (WSGI needs the keys); null headers and attributes
    # are left out (flup stores ''), a null secret is None.
    env, _, _, secret = decode(
        backend, protocol=None, uri=None, remote_addr=None, remote_host=None, server_name=None,
        headers=[('X-Null', None), ((None,), 'orphan value'), ('Host', None)],
        attributes=[('remote_user', None), ('req_attribute', (None, 'v')),
                    ('req_attribute', ('K', None)), ('secret', None)])
    assert env == {'REQUEST_METHOD': 'GET', 'SERVER_PROTOCOL': '', 'REQUEST_URI': '',
                   'REMOTE_ADDR': '', 'REMOTE_HOST': '', 'SERVER_NAME': '', 'SERVER_PORT': '80'}
    assert secret is None


def test_empty_secret_is_not_absent(backend):
    assert decode(backend, attributes=[('secret', '')])[3] == ''


# -- FORWARD_REQUEST: the body framing ----------------------------------------------------------

@pytest.mark.parametrize('headers, length, chunked', [
    ([], None, False),
    ([('Content-Length', '0')], 0, False),
    ([('Content-Length', '123')], 123, False),
    ([('Content-Length', '000123')], 123, False),
    ([('Content-Length', str(2 ** 63 - 1))], 2 ** 63 - 1, False),
    ([('Content-Length', '0' * 40 + '5')], 5, False),
    ([('Content-Length', '0' * 30)], 0, False),
    ([('Transfer-Encoding', 'chunked')], None, True),
    ([('Transfer-Encoding', 'gzip, CHUNKED')], None, True),
    ([('Transfer-Encoding', 'gzip'), ('Transfer-Encoding', 'Chunked')], None, True),
    ([('Transfer-Encoding', 'gzip')], None, False),
    ([('Transfer-Encoding', 'chunked'), ('Content-Length', '5')], 5, False),
])
def test_content_length_and_chunked(backend, headers, length, chunked):
    _, got_length, got_chunked, _ = decode(backend, headers=headers)
    assert (got_length, got_chunked) == (length, chunked)
    assert type(got_chunked) is bool


def test_body_framing_comes_from_headers_not_attributes(backend):
    env, length, _, _ = decode(backend, headers=[('Content-Length', '5')],
                               attributes=[('req_attribute', ('CONTENT_LENGTH', 'junk'))])
    assert length == 5 and env['CONTENT_LENGTH'] == 'junk'


@pytest.mark.parametrize('value, message', [
    ('', "invalid Content-Length ''"), ('-1', "invalid Content-Length '-1'"),
    ('+5', 'invalid'), (' 5', 'invalid'), ('5 ', 'invalid'), ('1e3', 'invalid'),
    ('0x10', 'invalid'), ('\xb2', 'invalid'), ('1_000', 'invalid'),
    (str(2 ** 63), 'Content-Length 9223372036854775808 is too large'),
    ('1' * 40, 'too large'),
    ('9' * 5000, 'too large'),  # past int()'s 4300 digits: still an AJPError
])
def test_bad_content_length(backend, value, message):
    with pytest.raises(AJPError, match=message):
        decode(backend, headers=[('Content-Length', value)])


def test_repeated_content_length_is_refused(backend):
    # Joined as '5, 5', which is no length: a smuggling attempt or a broken proxy.
    with pytest.raises(AJPError, match="invalid Content-Length '5, 5'"):
        decode(backend, headers=[('Content-Length', '5'), (8, '5')])


# -- FORWARD_REQUEST: malformed ---------------------------------------------------------------

GOOD = client.forward_request(
    method='POST', uri='/u', remote_host='rh',
    headers=[('Host', 'h'), ('X-A', 'b'), ('Content-Length', '3')],
    attributes=[('query_string', 'q'), ('ssl_key_size', 128), ('req_attribute', ('n', 'v'))])


def test_every_truncation_is_an_ajp_error(backend):
    assert backend.decode_forward_request(GOOD)[1] == 3
    for cut in range(len(GOOD)):
        with pytest.raises(AJPError):
            backend.decode_forward_request(GOOD[:cut])


@pytest.mark.parametrize('payload, message', [
    (b'', r'not a FORWARD_REQUEST payload \(type byte missing\)'),
    (b'\x0a', r'not a FORWARD_REQUEST payload \(type byte 0x0A\)'),
    (b'\x02', 'truncated FORWARD_REQUEST: no room for the method'),
    (b'\x02\x02', 'no room for the length of protocol'),
    (b'\x02\x02\x00', 'no room for the length of protocol'),
    (b'\x02\x02\x00\x08HTTP/1.1', 'AJP string protocol lacks its NUL terminator'),
    (b'\x02\x02\x00\x08HTTP/1.1X', 'AJP string protocol lacks its NUL terminator'),
    (b'\x02\x02\x00\x09HTTP/1.1', 'AJP string protocol of 9 bytes runs past the end'),
    (b'\x02\x02\xff\xfe', 'AJP string protocol of 65534 bytes runs past the end'),
    (client.forward_request()[:-6], 'no room for server_port'),
    (client.forward_request()[:-5], 'no room for server_port'),
    (client.forward_request()[:-4], 'no room for is_ssl'),
    (client.forward_request()[:-3], 'no room for num_headers'),
    (client.forward_request()[:-1], 'lacks the 0xFF that ends its attributes'),
    (client.forward_request(num_headers=1), 'no room for a header name'),
    (client.forward_request(headers=[('X-Y', 'z')])[:-4], 'no room for the length of header value'),
    (client.forward_request(headers=[('X-Y', 'z')])[:-3], 'string header value of 1 bytes runs'),
    (client.forward_request(headers=[('X-Y', 'z')])[:-2], 'header value lacks its NUL'),
    (client.forward_request(headers=[(('X',), 'z')])[:-7] + b'\x00\x01Xz',
     'header name lacks its NUL'),
    (client.forward_request(terminator=b''), 'lacks the 0xFF that ends its attributes'),
    (client.forward_request(terminator=b'\xff\xff'), '1 bytes after the 0xFF that ends'),
    (client.forward_request(terminator=b'\xff\x00\x00\x00'), '3 bytes after the 0xFF'),
    (client.forward_request(terminator=b'\x0b\x01'), 'no room for ssl_key_size'),
    (client.forward_request(terminator=b'\x05\x00\x05abc\x00'),
     'string query_string of 5 bytes runs past'),
    (client.forward_request(terminator=b'\x0c\x00\x01x'), 'string secret lacks its NUL'),
    (client.forward_request(terminator=b'\x0a\x00\x01n\x00\x00\x01v'),
     'string req_attribute value lacks its NUL'),
    (client.forward_request(terminator=b'\x0a\x00\x01n'), 'req_attribute name lacks its NUL'),
    (client.forward_request(terminator=b'\x0d'), 'no room for the length of stored_method'),
])
def test_malformed_forward_request(backend, payload, message):
    with pytest.raises(AJPError, match=message):
        backend.decode_forward_request(payload)


def test_decoders_take_any_buffer(backend):
    expected = backend.decode_forward_request(GOOD)
    assert backend.decode_forward_request(bytearray(GOOD)) == expected
    assert backend.decode_forward_request(memoryview(b'..' + GOOD)[2:]) == expected
    assert backend.decode_body_chunk(memoryview(b'\x00\x02hi')) == b'hi'


# -- Body chunks ------------------------------------------------------------------------------

@pytest.mark.parametrize('payload, data', [
    (b'', b''), (b'\x00\x00', b''), (b'\x00\x03abc', b'abc'), (b'\x00\x01abc', b'a'),
    (b'\x20\x00' + b'z' * 8192, b'z' * 8192),
])
def test_body_chunk(backend, payload, data):
    got = backend.decode_body_chunk(payload)
    assert got == data and type(got) is bytes


@pytest.mark.parametrize('payload, message', [
    (b'\x00', 'body chunk of 1 byte has no room for its length'),
    (b'\x00\x04abc', 'body chunk declares 4 bytes but carries 3'),
    (b'\xff\xff', 'body chunk declares 65535 bytes but carries 0'),
])
def test_bad_body_chunk(backend, payload, message):
    with pytest.raises(AJPError, match=message):
        backend.decode_body_chunk(payload)


def test_body_chunk_as_flup_reads_it(backend):
    # flup's Connection._processBody: data[2:2 + length] of the packet data.
    received = []
    fake = types.SimpleNamespace(_request=types.SimpleNamespace(
        input=types.SimpleNamespace(addData=received.append)))
    for payload in (b'\x00\x03abc', b'\x00\x02abc', b'\x00\x00'):
        flup_ajp.Connection._processBody(fake, types.SimpleNamespace(length=len(payload),
                                                                     data=payload))
        assert backend.decode_body_chunk(payload) == received[-1]


# -- Container packets against flup's own encoders ----------------------------------------------

class FakeSocket:
    def __init__(self):
        self.data = bytearray()

    def send(self, data):
        self.data += data
        return len(data)


def flup_request():
    """flup's Request on a fake connection: whatever it writes lands in ``sock.data``."""
    sock = FakeSocket()
    server = types.SimpleNamespace(inputStreamShrinkThreshold=102400 - 8192,
                                   handler=lambda request: None)
    conn = types.SimpleNamespace(server=server, writePacket=lambda pkt: pkt.write(sock),
                                 processInput=lambda: None)
    request = flup_ajp.Request(conn)
    request.environ.update(REQUEST_METHOD='GET', REQUEST_URI='/')
    return request, sock


@pytest.mark.parametrize('status, reason, headers', [
    (200, b'OK', []),
    (404, b'Not Found', [(b'Content-Type', b'text/html'), (b'X-Custom', b'v')]),
    (302, b'Found', [(b'LOCATION', b'/x'), (b'Set-Cookie', b'a=1'), (b'set-cookie', b'b=2'),
                     (b'Content-Length', b'0'), (b'WWW-Authenticate', b'Basic'),
                     (b'Servlet-Engine', b'x'), (b'Status', b'302'), (b'Date', b'now'),
                     (b'Last-Modified', b'then'), (b'Content-Language', b'en'),
                     (b'Set-Cookie2', b'c'), (b'X-\xe9', b'\xff' * 300)]),
    (599, b'', [(b'', b'')]),
])
def test_send_headers_match_flup(status, reason, headers):
    request, sock = flup_request()
    request.startResponse(status, reason, headers)
    assert ajp.encode_send_headers(status, reason, headers) == sock.data
    packets, rest = client.read_container_packets(sock.data)
    assert packets == [('headers', status, reason,
                        [(n.lower() if n.lower() in ajp.responseHeaderTable else n, v)
                         for n, v in headers])] and rest == b''


def test_send_headers_refuse_what_no_packet_holds():
    with pytest.raises(ValueError, match='string of 65535 bytes exceeds 65534'):
        ajp.encode_send_headers(200, b'OK', [(b'X-Big', b'v' * 0xFFFF)])  # would read as null
    with pytest.raises(ValueError, match='payload of 65555 bytes exceeds 65535'):
        ajp.encode_send_headers(200, b'OK', [(b'X-Big', b'v' * 65534)])


@pytest.mark.parametrize('size', [1, 3, 8186, 0xFFFF, 0x10000, 10 ** 9])
def test_get_body_chunk_matches_flup(size):
    request, sock = flup_request()
    request.input.setDataLength(size)
    request.input._waitForData()
    assert ajp.encode_get_body_chunk(size) == sock.data


def test_get_body_chunk_clamps():
    assert ajp.encode_get_body_chunk(-5) == b'AB\x00\x03\x06\x00\x00'
    assert ajp.encode_get_body_chunk(0) == b'AB\x00\x03\x06\x00\x00'
    assert ajp.encode_get_body_chunk(70000) == b'AB\x00\x03\x06\xff\xff'


def test_end_response_and_cpong_match_flup():
    request, sock = flup_request()
    request.run()  # the handler does nothing; flup then sends END_RESPONSE with reuse=1
    assert ajp.encode_end_response(True) == sock.data == b'AB\x00\x02\x05\x01'
    assert ajp.encode_end_response(False) == b'AB\x00\x02\x05\x00'
    sock = FakeSocket()
    flup_ajp.Connection(sock, ('127.0.0.1', 1), None, 0)._cping(None)
    assert ajp.CPONG_PACKET == sock.data


def test_compiled_module_reexports_the_cold_encoders():
    from tests.conftest import COMPILED
    if COMPILED is None:
        pytest.skip('flupfast._speedups is not built')
    from flupfast import _speedups
    assert _speedups.encode_send_headers is ajp.encode_send_headers
    assert _speedups.encode_get_body_chunk is ajp.encode_get_body_chunk
    assert _speedups.encode_end_response is ajp.encode_end_response
    assert _speedups.CPONG_PACKET == ajp.CPONG_PACKET


# -- frame_body -------------------------------------------------------------------------------

@pytest.mark.parametrize('size', [1, 100, 8183, 8184, 8185, 16368, 16369, 3 * 8184, 65528,
                                  65529, 200000])
def test_frame_body_matches_flup_at_8184(backend, size):
    payload = bytes(i % 251 for i in range(size))
    request, sock = flup_request()
    request._headersSent = True
    request.write(payload)
    assert b''.join(backend.frame_body(payload, AJP_DEFAULT_MAX_DATA)) == sock.data


@pytest.mark.parametrize('max_data', [1, 7, 8184, 65528, ajp.MAX_BODY_CHUNK_DATA])
@pytest.mark.parametrize('size', [1, 8183, 8184, 8185, 65528, 65529, 65531, 65532, 131056,
                                  131057])
def test_frame_body_packet_boundaries(backend, size, max_data):
    if size // max_data > 20000:
        return  # max_data=1 on big sizes adds nothing but time
    payload = bytes(i % 253 for i in range(size))
    buffers = backend.frame_body(payload, max_data)
    assert len(buffers) == 3 * -(-size // max_data)
    for i in range(0, len(buffers), 3):
        header, data, trailer = buffers[i:i + 3]
        n = len(data)
        assert 0 < n <= max_data
        assert bytes(header) == b'AB' + struct.pack('>HBH', n + 4, 3, n)
        assert trailer is buffers[2]  # the shared NUL
        assert trailer == b'\x00'
    packets, rest = client.read_container_packets(b''.join(buffers))
    assert rest == b'' and all(p[0] == 'body' for p in packets)
    assert b''.join(p[1] for p in packets) == payload
    # Every packet but the last is full.
    assert all(len(p[1]) == max_data for p in packets[:-1])


@pytest.mark.parametrize('kind', [bytes, bytearray, memoryview])
def test_frame_body_does_not_copy(backend, kind):
    data = kind(b'x' * 100000)
    buffers = backend.frame_body(data, 8184)
    views = buffers[1::3]
    assert all(type(v) is memoryview for v in views)
    assert sum(len(v) for v in views) == 100000
    owner = data.obj if kind is memoryview else data
    assert all(v.obj is owner for v in views)


def test_frame_body_single_packet_keeps_the_object(backend):
    data = b'hello'
    buffers = backend.frame_body(data, 8184)
    assert buffers[1] is data
    array = bytearray(b'hello')
    view = backend.frame_body(array, 8184)[1]
    assert type(view) is memoryview and view.obj is array and bytes(view) == b'hello'


def test_frame_body_of_nothing(backend):
    assert backend.frame_body(b'', 8184) == []
    assert backend.frame_body(memoryview(bytearray()), 8184) == []


def test_frame_body_casts_wide_views(backend):
    import array
    data = array.array('I', range(10))
    buffers = backend.frame_body(data, 16)
    assert b''.join(bytes(b) for b in buffers[1::3]) == data.tobytes()


@pytest.mark.parametrize('max_data', [0, -1, ajp.MAX_BODY_CHUNK_DATA + 1, 1 << 70])
def test_frame_body_rejects_bad_sizes(backend, max_data):
    with pytest.raises(ValueError, match=r'max_data must be in 1\.\.65531, not %d' % max_data):
        backend.frame_body(b'abc', max_data)


def test_frame_body_wants_an_integer_size(backend):
    with pytest.raises(TypeError):
        backend.frame_body(b'abc', 8184.0)
