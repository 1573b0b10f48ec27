"""AJP13 codec: every error text in full, one case per place that raises, and the boundaries a
mutation run found untested (a header count above 255, a coded header name that ends the
packet, the encoders at their 16-bit limits). Beside test_ajp_codec.py, which is full."""
import pytest

from flupfast.protocols import ajp
from flupfast.protocols.errors import AJPError
from tests import ajp_client as client

FIXED = ('protocol', 'req_uri', 'remote_addr', 'remote_host', 'server_name')


def string_past_the_end(field):
    # The fixed strings before ``field`` whole, then ``field`` announcing 9 bytes of 1.
    before = b''.join(client.string('s') for _ in FIXED[:FIXED.index(field)])
    return b'\x02\x02' + before + b'\x00\x09/'


FORWARD_REQUEST_ERRORS = [
    (b'', 'not a FORWARD_REQUEST payload (type byte missing)'),
    (b'\x0a', 'not a FORWARD_REQUEST payload (type byte 0x0A)'),
    (b'\x02', 'truncated FORWARD_REQUEST: no room for the method'),
    (client.forward_request(method=0x1C), 'unknown AJP method code 0x1C'),
    (b'\x02\x02\x00\x08HTTP/1.1X', 'AJP string protocol lacks its NUL terminator'),
    (client.forward_request(num_headers=1, terminator=b'') + b'\xa0\x0b',
     'truncated FORWARD_REQUEST: no room for the length of header value'),
    (client.forward_request(num_headers=1, terminator=b'') + b'\xa0\x0f',
     'unknown AJP request header code 0xA00F'),
    (client.forward_request(terminator=b'\x0e\xff'), 'unknown AJP attribute code 0x0E'),
    (client.forward_request(terminator=b'\xff\xff'),
     '1 bytes after the 0xFF that ends FORWARD_REQUEST'),
    (client.forward_request(terminator=b''),
     'FORWARD_REQUEST lacks the 0xFF that ends its attributes'),
    (client.forward_request(terminator=b'\x0b\x01'),
     'truncated FORWARD_REQUEST: no room for ssl_key_size'),
    (client.forward_request(terminator=b'\x0b\x01\x00'),  # the size at the last byte
     'FORWARD_REQUEST lacks the 0xFF that ends its attributes'),
    (client.forward_request(method=0xFF),
     'method code 0xFF (stored method) without a stored_method attribute'),
    (client.forward_request(headers=[('Content-Length', '-1')]),
     "invalid Content-Length '-1'"),
    (client.forward_request(headers=[('Content-Length', str(2 ** 63))]),
     'Content-Length 9223372036854775808 is too large'),
] + [(string_past_the_end(field),
      'AJP string %s of 9 bytes runs past the end of the packet' % field) for field in FIXED]


@pytest.mark.parametrize('payload, message', FORWARD_REQUEST_ERRORS,
                         ids=range(len(FORWARD_REQUEST_ERRORS)))
def test_forward_request_error_texts_in_full(backend, payload, message):
    with pytest.raises(AJPError) as raised:
        backend.decode_forward_request(payload)
    assert str(raised.value) == message


@pytest.mark.parametrize('payload, message', [
    (b'\x00', 'body chunk of 1 byte has no room for its length'),
    (b'\x00\x04abc', 'body chunk declares 4 bytes but carries 3'),
])
def test_body_chunk_error_texts_in_full(backend, payload, message):
    with pytest.raises(AJPError) as raised:
        backend.decode_body_chunk(payload)
    assert str(raised.value) == message


def test_parser_error_texts_in_full(backend):
    with pytest.raises(AJPError) as raised:
        backend.AJPParser().feed(b'\x12\x34\xff\xfd')
    assert str(raised.value) == 'AJP packet of 65537 bytes exceeds max_packet=65536'
    with pytest.raises(ValueError) as raised:
        backend.AJPParser(4)
    assert str(raised.value) == 'max_packet must be at least 5, not 4'


def test_more_than_255_headers(backend):
    # num_headers is a 16-bit integer: its high byte counts.
    headers = [('X-H%d' % i, str(i)) for i in range(300)]
    environ = backend.decode_forward_request(client.forward_request(headers=headers))[0]
    assert [environ['HTTP_X_H%d' % i] for i in range(300)] == [str(i) for i in range(300)]


def test_encoders_at_their_16_bit_limits():
    assert ajp.encode_packet(b'x' * 0xFFFF)[:4] == b'AB\xff\xff'
    with pytest.raises(ValueError) as raised:
        ajp.encode_packet(b'x' * 0x10000)
    assert str(raised.value) == 'AJP packet payload of 65536 bytes exceeds 65535'
    assert ajp.encode_string(b's' * 0xFFFE)[:2] == b'\xff\xfe'
    with pytest.raises(ValueError) as raised:
        ajp.encode_string(b's' * 0xFFFF)
    assert str(raised.value) == 'AJP string of 65535 bytes exceeds 65534'


def test_decode_string():
    # What flupfast.client reads SEND_HEADERS with.
    assert ajp.decode_string(b'\x00\x02hi\x00') == (b'hi', 5)
    assert ajp.decode_string(b'zz\x00\x01a\x00rest', 2) == (b'a', 6)
    assert ajp.decode_string(b'\xff\xffrest') == (None, 2)
    for data, message in [(b'\x00\x02hiX', 'AJP string string lacks its NUL terminator'),
                          (b'\x00\x05hi\x00', 'AJP string string of 5 bytes runs past the end '
                                              'of the packet'),
                          (b'\x00', 'truncated FORWARD_REQUEST: no room for the length of '
                                    'string')]:
        with pytest.raises(AJPError) as raised:
            ajp.decode_string(data)
        assert str(raised.value) == message


@pytest.mark.parametrize('make', [
    lambda: __import__('array').array('H', [1, 2, 3]),  # two-byte items
    lambda: memoryview(b'abcdef').cast('B', (2, 3)),  # two dimensions
], ids=['uint16', '2d'])
def test_frame_body_frames_bytes_not_items(backend, make):
    data = make()
    wire = [bytes(b) for b in backend.frame_body(data, 4)]
    payload = bytes(memoryview(data).cast('B'))
    assert wire == [b'AB\x00\x08\x03\x00\x04', payload[:4], b'\x00',
                    b'AB\x00\x06\x03\x00\x02', payload[4:], b'\x00']


def test_frame_body_exactly_one_packet_sends_the_bytes_themselves(backend):
    data = b'x' * 8184
    buffers = backend.frame_body(data, 8184)
    assert len(buffers) == 3 and buffers[1] is data
    assert buffers[0] == b'AB\x1f\xfc\x03\x1f\xf8'


def test_frame_body_error_text_in_full(backend):
    with pytest.raises(ValueError) as raised:
        backend.frame_body(b'a', 0)
    assert str(raised.value) == 'max_data must be in 1..65531, not 0'


HINT = '; is an HTTP client talking to the AJP port?'


@pytest.mark.parametrize('magic, hint', [
    (b'AA', True), (b'ZZ', True), (b'AZ', True), (b'ZA', True),  # the ends of A..Z
    (b'A\x00', False), (b'\x00A', False), (b'@A', False), (b'A@', False), (b'[A', False),
    (b'Z[', False),
])
def test_http_hint_for_two_capital_letters_only(backend, magic, hint):
    with pytest.raises(AJPError) as raised:
        backend.AJPParser().feed(magic + b'\x00\x00')
    assert str(raised.value) == 'bad AJP packet magic 0x%02X%02X (expected 0x1234)%s' % (
        magic[0], magic[1], HINT if hint else '')


def test_smallest_max_packet_holds_a_one_byte_payload(backend):
    assert backend.AJPParser(5).feed(b'\x12\x34\x00\x01\x02') == [b'\x02']
    with pytest.raises(AJPError):
        backend.AJPParser(5).feed(b'\x12\x34\x00\x02')


@pytest.mark.parametrize('view', [lambda b: memoryview(b).cast('c'),
                                  lambda b: memoryview(b).cast('B', (4, len(b) // 4))],
                         ids=['char-items', '2d'])
def test_parser_reads_any_view_as_unsigned_bytes(backend, view):
    # A length byte of 0x80 or more must not read as negative (a signed view).
    packet = client.packet(b'p' * 0x80) + client.packet(b'q' * 0x1FC)
    assert backend.AJPParser().feed(view(packet)) == [b'p' * 0x80, b'q' * 0x1FC]
