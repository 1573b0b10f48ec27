"""The compiled AJP13 twins against the pure ones on random input: packet streams cut at random
places give the same packets, pending counts and errors; random (often damaged)
FORWARD_REQUEST payloads decode to the same environ, in the same key order, or fail with the
same message; body chunks and frame_body agree.

Only tests import the twins directly (DESIGN.md, "The speedups switch").
"""
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flupfast.protocols.errors import AJPError
from tests import ajp_client as client
from tests.conftest import COMPILED, PURE


pytestmark = pytest.mark.usefixtures('needs_compiled')


BACKENDS = [PURE, COMPILED] if COMPILED else [PURE]
FUZZ = settings(max_examples=400, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

latin1 = st.characters(min_codepoint=0, max_codepoint=255)
strings = st.one_of(st.none(), st.text(latin1, max_size=12),
                    st.sampled_from(['chunked', 'gzip, chunked', '0', '17', '-1', '5, 5']),
                    st.integers(90, 400).map(lambda n: 'L' * n))


def sometimes(usual, rare, one_in=10):
    """``usual``, and ``rare`` once in ``one_in`` draws (hypothesis's one_of draws its
    branches about evenly, which would make nearly every request invalid)."""
    return st.integers(0, one_in - 1).flatmap(lambda i: rare if i == one_in - 1 else usual)


header_names = sometimes(st.one_of(
    st.integers(1, 14),                                  # coded
    st.sampled_from(['Host', 'content-length', 'Transfer-Encoding', 'X-A', 'x-a', 'Cookie']),
    st.tuples(strings),                                  # forced string names, may be null
    st.text(latin1, max_size=10)),
    st.integers(0, 255), one_in=25)                      # coded, mostly unknown
known_attributes = st.one_of(
    st.tuples(st.integers(1, 9) | st.sampled_from([0x0C, 0x0D]), strings),
    st.tuples(st.just(0x0A), st.tuples(strings, strings)),
    st.tuples(st.just(0x0B), st.integers(0, 0xFFFF)))
unknown_attribute = st.tuples(st.integers(0x0E, 0xFE) | st.just(0), strings)


@st.composite
def forward_requests(draw):
    """FORWARD_REQUEST payloads, mostly well formed, sometimes damaged."""
    attrs = draw(st.lists(known_attributes, max_size=5))
    if draw(st.integers(0, 19)) == 19:  # hypothesis favours 0: the usual case
        attrs.insert(draw(st.integers(0, len(attrs))), draw(unknown_attribute))
    headers = draw(st.lists(st.tuples(header_names, strings), max_size=6))
    payload = client.forward_request(
        method=draw(sometimes(st.integers(1, 27) | st.sampled_from(['PATCH', 'GET', 0xFF]),
                              st.integers(0, 255), one_in=20)),
        uri=draw(strings), protocol=draw(strings), remote_addr=draw(strings),
        remote_host=draw(strings), server_name=draw(strings),
        server_port=draw(st.integers(0, 0xFFFF)), is_ssl=draw(st.booleans()),
        headers=headers,
        attributes=attrs,
        num_headers=draw(sometimes(st.none(), st.integers(0, 8), one_in=15)),
        terminator=draw(sometimes(st.just(b'\xff'), st.sampled_from([b'', b'\xff\x00', b'\x00'])))
    )
    damage = draw(st.sampled_from(['none'] * 9 + ['flip', 'truncate', 'insert']))
    if damage == 'flip':
        at = draw(st.integers(0, len(payload) - 1))
        payload = payload[:at] + bytes([draw(st.integers(0, 255))]) + payload[at + 1:]
    elif damage == 'truncate':
        payload = payload[:draw(st.integers(0, len(payload)))]
    elif damage == 'insert':
        at = draw(st.integers(0, len(payload)))
        payload = payload[:at] + draw(st.binary(min_size=1, max_size=4)) + payload[at:]
    return payload


def decode_outcome(backend, payload):
    try:
        environ, length, chunked, secret = backend.decode_forward_request(payload)
    except AJPError as exc:
        return ('error', str(exc))
    assert all(type(k) is str and type(v) is str for k, v in environ.items())
    return (list(environ.items()), length, chunked, secret)


@FUZZ
@given(payload=forward_requests() | st.binary(max_size=120).map(lambda b: b'\x02' + b))
def test_forward_requests_decode_identically(payload):
    outcomes = [decode_outcome(b, payload) for b in BACKENDS]
    assert outcomes[0] == outcomes[1]


@FUZZ
@given(payload=st.binary(max_size=40) | st.binary(max_size=300).map(
    lambda b: struct.pack('>H', len(b) + 1) + b))
def test_body_chunks_decode_identically(payload):
    outcomes = []
    for backend in BACKENDS:
        try:
            outcomes.append(backend.decode_body_chunk(payload))
        except AJPError as exc:
            outcomes.append(('error', str(exc)))
    assert outcomes[0] == outcomes[1]


packet_payloads = st.one_of(
    forward_requests(), st.just(b'\x0a'), st.just(b'\x07'), st.just(b''),
    st.binary(max_size=50).map(lambda b: struct.pack('>H', len(b)) + b),
    st.integers(8000, 8300).map(lambda n: b'\x00' * n),
    st.integers(65500, 65532).map(lambda n: b'b' * n))


def split_at(data, cuts):
    bounds = [0] + sorted(c for c in cuts if 0 < c < len(data)) + [len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


@st.composite
def ajp_streams(draw):
    wire = b''.join(client.packet(p) for p in draw(st.lists(packet_payloads, max_size=5)))
    damage = draw(st.sampled_from(['none'] * 5 + ['flip', 'truncate', 'garbage', 'oversize']))
    if damage == 'flip' and wire:
        at = draw(st.integers(0, len(wire) - 1))
        wire = wire[:at] + bytes([draw(st.integers(0, 255))]) + wire[at + 1:]
    elif damage == 'truncate':
        wire = wire[:draw(st.integers(0, len(wire)))]
    elif damage == 'garbage':
        wire += draw(st.binary(min_size=1, max_size=30))
    elif damage == 'oversize':
        wire += struct.pack('>2sH', b'\x12\x34', draw(st.integers(65533, 0xFFFF)))
    return wire


def feed_log(backend, wire, cuts, kind, max_packet):
    """Feed ``wire`` in pieces; the log of (packets, pending) per feed, ended by an error."""
    parser = backend.AJPParser(max_packet)
    log = []
    recv_buf = bytearray(len(wire) + 1)
    for piece in split_at(wire, cuts):
        if kind == 'bytes':
            data = piece
        elif kind == 'bytearray':
            data = bytearray(piece)
        else:  # a view of a reused receive buffer, overwritten after each feed (recv_into)
            recv_buf[:len(piece)] = piece
            data = memoryview(recv_buf)[:len(piece)]
        try:
            packets = parser.feed(data)
        except AJPError as exc:
            log.append(('error', str(exc)))
            return log
        if kind == 'view':
            recv_buf[:] = b'\xff' * len(recv_buf)
        log.append((packets, parser.pending))
    return log


@FUZZ
@given(wire=ajp_streams() | st.binary(max_size=300),
       cuts=st.lists(st.integers(0, 1 << 18), max_size=12),
       kind=st.sampled_from(['bytes', 'bytearray', 'view']),
       max_packet=st.sampled_from([65536, 65536, 8192, 300, 5]))
def test_packet_streams_give_identical_packets(wire, cuts, kind, max_packet):
    logs = [feed_log(b, wire, cuts, kind, max_packet) for b in BACKENDS]
    assert logs[0] == logs[1]
    if logs[0] and logs[0][-1][0] != 'error':
        # Chunking never changes the packets.
        whole = COMPILED.AJPParser(max_packet).feed(wire)
        assert whole == [p for packets, _ in logs[0] for p in packets]


@FUZZ
@given(size=st.integers(0, 3000), max_data=st.integers(1, 1200) | st.just(65531),
       kind=st.sampled_from([bytes, bytearray, memoryview]))
def test_frame_body_twins_agree(size, max_data, kind):
    payload = kind(bytes(i % 253 for i in range(size)))
    results = [backend.frame_body(payload, max_data) for backend in BACKENDS]
    assert [bytes(b) for b in results[0]] == [bytes(b) for b in results[1]]
    assert [type(b) for b in results[0]] == [type(b) for b in results[1]]


def test_parser_attributes_agree():
    for backend in BACKENDS:
        parser = backend.AJPParser()
        assert parser.max_packet == 65536 and parser.pending == 0
        parser.max_packet = 100
        with pytest.raises(AJPError, match='exceeds max_packet=100'):
            parser.feed(client.packet(b'x' * 97))
