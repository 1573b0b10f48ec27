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
