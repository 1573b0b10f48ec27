"""The web server's side of AJP13 (flupfast.protocols.ajp_webserver, used by flupfast.client):
what it encodes is what the container's decoder reads, and the container's packets are read
whole, byte by byte, or refused with AJPError."""
import pytest

from flupfast.protocols import ajp, ajp_webserver
from flupfast.protocols.errors import AJPError


def test_forward_request_round_trips_through_the_container_decoder(backend):
    packet = ajp_webserver.encode_forward_request(
        'PATCH', '/caf\u00e9', headers=[('Content-Type', 'text/plain'), ('X-Thing', 'a b'),
                                        ('Content-Length', '3')],
        query_string='a=1', remote_user='me', secret='s3')
    (payload,) = backend.AJPParser().feed(packet)
    environ, content_length, _, secret = backend.decode_forward_request(payload)
    assert environ['REQUEST_METHOD'] == 'PATCH' and environ['QUERY_STRING'] == 'a=1'
    assert environ['CONTENT_TYPE'] == 'text/plain' and environ['HTTP_X_THING'] == 'a b'
    assert environ['REMOTE_USER'] == 'me' and secret == 's3' and content_length == 3
    assert environ['REQUEST_URI'] == '/caf\u00e9'


def test_body_packets_round_trip(backend):
    assert backend.decode_body_chunk(backend.AJPParser().feed(
        ajp_webserver.encode_body_packet(b'hello'))[0]) == b'hello'
    assert ajp_webserver.encode_body_packet(b'') == ajp.SERVER_PREFIX + b'\x00\x00'


RESPONSE = (ajp.encode_send_headers(200, b'OK', [(b'Content-Type', b'text/plain'),
                                                 (b'X-A', b'1')])
            + b''.join(bytes(b) for b in ajp.frame_body(b'body', 8184))
            + ajp.encode_get_body_chunk(100) + ajp.encode_end_response(True) + ajp.CPONG_PACKET)
EVENTS = [('headers', 200, 'OK', [('content-type', 'text/plain'), ('X-A', '1')]),
          ('body', b'body'), ('get_body', 100), ('end', True), ('cpong',)]


@pytest.mark.parametrize('step', [len(RESPONSE), 1, 7])
def test_container_packets_read_whole_or_in_pieces(step):
    reader = ajp_webserver.ContainerPacketReader()
    events = []
    for pos in range(0, len(RESPONSE), step):
        events += reader.feed(RESPONSE[pos:pos + step])
    assert events == EVENTS


@pytest.mark.parametrize('data, words', [
    (b'XY\x00\x01\x05', 'bad container packet magic'),
    (b'AB\x00\x01\x07', 'unknown container packet type'),
    (b'AB\x00\x03\x04\x00\xc8', 'truncated container packet'),
    (b'AB\x00\x05\x03\x00\x09ab', 'SEND_BODY_CHUNK declares 9 bytes but carries 2'),
])
def test_malformed_container_packets_are_ajp_errors(data, words):
    with pytest.raises(AJPError, match=words):
        ajp_webserver.ContainerPacketReader().feed(data)


# What a mutation run found untested: the defaults and every fixed field as sent, the coded
# forms httpd uses (not just anything the decoder accepts), and each container packet at its
# edges with the error texts in full.

def test_forward_request_defaults_and_fixed_fields():
    def environ_of(packet):
        return ajp.decode_forward_request(ajp.AJPParser().feed(packet)[0])[0]
    environ = environ_of(ajp_webserver.encode_forward_request('GET', '/'))
    assert (environ['SERVER_PROTOCOL'], environ['REMOTE_ADDR'], environ['REMOTE_HOST'],
            environ['SERVER_NAME'], environ['SERVER_PORT']) == \
        ('HTTP/1.1', '127.0.0.1', '', 'localhost', '80')
    assert 'HTTPS' not in environ
    environ = environ_of(ajp_webserver.encode_forward_request(
        'GET', '/p', protocol='HTTP/1.0', remote_addr='10.0.0.1', remote_host='rh',
        server_name='sn', server_port=65535, is_ssl=True))
    assert (environ['SERVER_PROTOCOL'], environ['REQUEST_URI'], environ['REMOTE_ADDR'],
            environ['REMOTE_HOST'], environ['SERVER_NAME'], environ['SERVER_PORT'],
            environ['HTTPS']) == ('HTTP/1.0', '/p', '10.0.0.1', 'rh', 'sn', '65535', 'on')


def test_forward_request_uses_the_coded_forms():
    # Spec "Request Packet Structure": a method in the table is its code, not 0xFF plus a
    # stored_method; a header in requestHeaderTable is 0xA0xx whatever its case.
    packet = ajp_webserver.encode_forward_request('GET', '/', headers=[('HoSt', 'h')])
    assert packet[4:6] == b'\x02\x02'
    assert b'\xa0\x0b\x00\x01h\x00' in packet and b'HoSt' not in packet


def feed(data):
    return ajp_webserver.ContainerPacketReader().feed(data)


def test_container_packets_at_their_edges():
    assert feed(b'AB\x00\x05\x03\x00\x02hi') == [('body', b'hi')]  # no NUL after the data
    assert feed(b'AB\x00\x03\x05\x01\x00') == [('end', True)]  # the flag is the first byte
    headers = b'\x04\x00\xc8\xff\xff\x00\x01\xff\xff\xff\xff'  # null reason, name and value
    assert feed(b'AB' + len(headers).to_bytes(2, 'big') + headers) == \
        [('headers', 200, '', [('', '')])]


@pytest.mark.parametrize('data, message', [
    (b'AB\x00\x00', "unknown container packet type b''"),  # a whole packet of 4 bytes
    (b'AB\x00\x01\x07', "unknown container packet type b'\\x07'"),
    (b'AB\x00\x01\x09XY\x00\x00', "bad container packet magic b'XY'"),  # after a CPONG
    # Declares 3 bytes, carries 2: the next packet's bytes are not its data.
    (b'AB\x00\x05\x03\x00\x03ab' + b'AB\x00\x01\x09',
     'SEND_BODY_CHUNK declares 3 bytes but carries 2'),
    (b'AB\x00\x14\x04\x00\xc8\x00\x02OK\x00\x00\x05' + b'\x00' * 10,
     "truncated container packet b'\\x04\\x00\\xc8\\x00\\x02OK\\x00\\x00\\x05\\x00\\x00\\x00"
     "\\x00\\x00\\x00'"),
], ids=['empty', 'unknown', 'magic', 'short-body', 'truncated'])
def test_container_packet_error_texts_in_full(data, message):
    with pytest.raises(AJPError) as raised:
        feed(data)
    assert str(raised.value) == message
