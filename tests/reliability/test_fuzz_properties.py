"""Fuzz properties of every codec, on both backends at once (fuzz/oracles.py has the checks).

For FastCGI records and PARAMS, SCGI netstrings, uwsgi packets, AJP13 packets and requests, and
wsgi.input: any bytes, fed whole or split anywhere, as bytes, bytearray or a reused receive
buffer's view, either parse or raise the protocol's ProtocolError, never another exception;
the pure and the compiled twins agree event for event (same events and pending counts after each feed, the
same error at the same feed); the split never changes the outcome; buffered sizes stay under
the caps of flupfast.limits. Inputs are random bytes and, to reach deep states, valid streams
(the strategies of the parity tests, and record floods, boundary lengths) damaged by a few
mutations.

The run's size is the hypothesis profile tests/conftest.py loads (``HYPOTHESIS_PROFILE`` or
``FLUPFAST_FUZZ_PROFILE``): ``ci`` by default, ``derandomize`` in .ci/run, ``fuzz`` for a
long run. atheris drives the same checks (fuzz/README.md).
"""
import re
import struct

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from flupfast.limits import MAX_OPEN_REQUESTS
from flupfast.protocols import fastcgi as f
from flupfast.protocols import scgi, uwsgi
from flupfast.protocols.errors import ProtocolError, SCGIError
from fuzz import oracles
from tests import ajp_client
from tests.conftest import COMPILED, PURE
from tests.unit.test_ajp_parity import ajp_streams, forward_requests
from tests.unit.test_speedups_parity import bodies, fcgi_streams, operations, pair_lists

FUZZ = settings()  # the profile tests/conftest.py loaded


pytestmark = pytest.mark.usefixtures('needs_compiled')


def _label(message):
    return re.sub(r"0x[0-9A-Fa-f]+|\d+|b?'.*'|b?\".*\"", '_', message)[:70]


def outcome(log, ajp_wire=None):
    """Label the example by how it ended (pytest --hypothesis-show-statistics shows the mix):
    the error without its numbers, or 'ok'; for AJP13 also how its first packet (or the wire
    as one payload) decoded as a FORWARD_REQUEST."""
    last = log[-1] if log else None
    if type(last) is tuple and last and last[0] == 'error':
        event('error: ' + _label(last[2]))
    else:
        event('ok')
    if ajp_wire is not None:
        packets = [p for entry in log if entry[0] != 'error' for p in entry[0]]
        forward = packets[0][1][0] if packets else oracles.ajp_decoded(PURE, ajp_wire)[0]
        event('FORWARD_REQUEST: ' + ('error: ' + _label(forward[2]) if forward[0] == 'error'
                                     else 'decoded'))


# -- Shared strategies ------------------------------------------------------------------------

kinds = st.sampled_from(oracles.KINDS)


@st.composite
def cuts_for(draw, wire):
    """Where to split ``wire``: nowhere, anywhere (a few random offsets), or byte by byte."""
    how = draw(st.sampled_from(['random'] * 6 + ['none', 'bytewise']))
    if how == 'none' or not wire:
        return []
    if how == 'bytewise' and len(wire) <= 3000:
        return list(range(1, len(wire)))
    return draw(st.lists(st.integers(0, len(wire)), max_size=12))


BOUNDARY_8 = (0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF)
BOUNDARY_16 = (0x0000, 0x0001, 0x7FFF, 0x8000, 0xFFF8, 0xFFFE, 0xFFFF)
BOUNDARY_32 = (0, 0x7FFFFFFF, 0x80000000, 0x80000080, 0xFFFFFFFF)


@st.composite
def mutated(draw, valid, most=4):
    """A value of ``valid`` (bytes) with up to ``most`` mutations: byte flips, boundary
    integers written over 1, 2 or 4 bytes (lengths, ids, codes), inserted, deleted or
    duplicated runs, truncation."""
    wire = bytearray(draw(valid))
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2, most]))):
        op = draw(st.sampled_from(['flip', 'int8', 'int16', 'int32', 'insert', 'delete',
                                   'duplicate', 'truncate']))
        at = draw(st.integers(0, len(wire)))
        if op == 'insert':
            wire[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == 'truncate':
            del wire[at:]
        elif at == len(wire):
            continue
        elif op == 'flip':
            wire[at] ^= 1 << draw(st.integers(0, 7))
        elif op == 'int8':
            wire[at] = draw(st.sampled_from(BOUNDARY_8))
        elif op == 'int16':
            wire[at:at + 2] = struct.pack('>H', draw(st.sampled_from(BOUNDARY_16)))
        elif op == 'int32':
            wire[at:at + 4] = struct.pack('>L', draw(st.sampled_from(BOUNDARY_32)))
        else:
            stop = draw(st.integers(at, min(len(wire), at + 64)))
            if op == 'delete':
                del wire[at:stop]
            else:
                wire[stop:stop] = wire[at:stop]
    return bytes(wire)


# -- FastCGI ----------------------------------------------------------------------------------

fcgi_caps = st.sampled_from(oracles.FASTCGI_CAPS)


def param_bytes(draw):
    """A PARAMS/GET_VALUES content: encoded pairs, or pairs with boundary length prefixes."""
    if draw(st.integers(0, 3)):
        return f.encode_params(draw(pair_lists))
    out = b''
    for _ in range(draw(st.integers(1, 4))):
        for _ in range(2):
            length = draw(st.sampled_from((0, 1, 127, 128, 300, 0x7FFFFFFF)))
            out += bytes((length,)) if length < 128 and draw(st.booleans()) else \
                struct.pack('>L', length | 0x80000000)
        out += draw(st.binary(max_size=40))
    return out


@st.composite
def fcgi_records(draw):
    """Records of any type (mostly the ones a web server sends) for a few request ids, with
    any padding, sometimes a flood of BEGIN_REQUEST records past MAX_OPEN_REQUESTS."""
    rids = st.sampled_from([0, 1, 2, 0xFFFF])
    out = []
    if not draw(st.integers(0, 19)):
        count = draw(st.integers(MAX_OPEN_REQUESTS - 2, MAX_OPEN_REQUESTS + 2))
        out += [f.encode_begin_request(rid) for rid in range(3, 3 + count)]
    for _ in range(draw(st.integers(1, 10))):
        record_type = draw(st.sampled_from([1, 1, 2, 4, 4, 4, 5, 8, 9]) | st.integers(0, 255))
        if record_type == 1:
            content = struct.pack('!HB5x', draw(st.sampled_from([1, 2, 3, 0, 0xFFFF])),
                                  draw(st.sampled_from(BOUNDARY_8)))
        elif record_type in (4, 9):
            content = param_bytes(draw) if draw(st.integers(0, 3)) else b''
        else:
            content = draw(st.binary(max_size=64)
                           | st.integers(0xFFF0, 0xFFFF).map(lambda n: b'c' * n))
        padding = draw(st.sampled_from([0, -len(content) & 7, 255]))
        out.append(struct.pack('!BBHHBx', 1, record_type, draw(rids), len(content), padding)
                   + content + b'\0' * padding)
    return b''.join(out)


fcgi_wires = st.one_of(st.binary(max_size=300),
                       mutated(fcgi_streams()),
                       mutated(fcgi_records()))


@FUZZ
@given(data=st.data(), wire=fcgi_wires, kind=kinds, caps=fcgi_caps)
def test_fastcgi_any_input(data, wire, kind, caps):
    outcome(oracles.check_fastcgi(PURE, COMPILED, wire, data.draw(cuts_for(wire)), kind, caps))


@FUZZ
@given(request_id=st.integers(0, 0xFFFF), data=st.binary(max_size=3000)
       | st.integers(65520, 140000).map(bytes),
       max_content=st.integers(1, 8191).map(lambda n: n * 8))
def test_frame_stdout_parses_back(request_id, data, max_content):
    oracles.check_frame_stdout(PURE, COMPILED, request_id, data, max_content)


# -- SCGI -------------------------------------------------------------------------------------

scgi_caps = st.sampled_from(oracles.SCGI_CAPS)
scgi_names = st.sampled_from(['CONTENT_LENGTH', 'SCGI', 'REQUEST_METHOD', 'HTTP_HOST', 'A',
                              '', 'x\xe9']) | st.text(max_size=8).map(
                                  lambda s: s.encode('utf-8').decode('latin-1'))
scgi_values = st.sampled_from(['0', '1', '2', '17', '', '-1', '00', '1' * 25, '\xff',
                               '9' * 4301, '0' * 5000 + '7']) | \
    st.binary(max_size=12).map(lambda b: b.decode('latin-1'))


@st.composite
def scgi_requests(draw):
    pairs = draw(st.lists(st.tuples(scgi_names, scgi_values), max_size=8))
    if draw(st.integers(0, 3)):  # mostly valid up front: CONTENT_LENGTH, SCGI=1, no duplicates
        seen = {'CONTENT_LENGTH', 'SCGI'}
        pairs = [('CONTENT_LENGTH', draw(st.sampled_from(['0', '5', '12345678901234567890',
                                                          '9' * 4301]))),
                 ('SCGI', '1')] + [(n, v) for n, v in pairs
                                   if n and not (n in seen or seen.add(n))]
    return scgi.encode_request(pairs, draw(st.binary(max_size=20)))


scgi_wires = st.one_of(st.binary(max_size=200),
                       st.binary(max_size=60).map(lambda b: b'%d:%s,' % (len(b), b)),
                       mutated(scgi_requests()), mutated(scgi_requests()))


@FUZZ
@given(data=st.data(), wire=scgi_wires, kind=kinds, caps=scgi_caps)
def test_scgi_any_input(data, wire, kind, caps):
    outcome(oracles.check_scgi(PURE, COMPILED, wire, data.draw(cuts_for(wire)), kind, caps))


@pytest.mark.parametrize('value, result', [
    ('9223372036854775807', 2 ** 63 - 1), ('0' * 5000 + '7', 7),
    ('9223372036854775808', 'of 19 digits is too large'),
    ('9' * 4301, 'of 4301 digits is too large')])  # int() raised ValueError past 4300 digits
def test_scgi_content_length_bound(backend, value, result):
    wire = scgi.encode_request([('CONTENT_LENGTH', value), ('SCGI', '1')])
    if type(result) is int:
        assert backend.decode_scgi_request(wire)[1] == result
    else:
        with pytest.raises(SCGIError, match=result):
            backend.decode_scgi_request(wire)


# -- uwsgi ------------------------------------------------------------------------------------

uwsgi_caps = st.sampled_from(oracles.UWSGI_CAPS)


@st.composite
def uwsgi_requests(draw):
    pairs = draw(st.lists(st.tuples(scgi_names, scgi_values), max_size=8))
    modifier1 = draw(st.sampled_from([0] * 6 + [1, 5, 255]))
    try:
        return uwsgi.encode_request(pairs, draw(st.binary(max_size=20)), modifier1,
                                    draw(st.sampled_from([0, 0, 1, 255])))
    except ValueError:  # a value of over 65,535 bytes: the wire cannot say it
        return uwsgi.encode_request([], b'')


uwsgi_wires = st.one_of(st.binary(max_size=200),
                        st.binary(max_size=60).map(
                            lambda b: struct.pack('<BHB', 0, len(b), 0) + b),
                        mutated(uwsgi_requests()), mutated(uwsgi_requests()))


@FUZZ
@given(data=st.data(), wire=uwsgi_wires, kind=kinds, caps=uwsgi_caps)
def test_uwsgi_any_input(data, wire, kind, caps):
    outcome(oracles.check_uwsgi(PURE, COMPILED, wire, data.draw(cuts_for(wire)), kind, caps))


# -- AJP13 ------------------------------------------------------------------------------------

max_packets = st.sampled_from(oracles.AJP_MAX_PACKETS)
requests_with_bodies = st.tuples(forward_requests(), st.lists(st.binary(max_size=90), max_size=3))
ajp_wires = st.one_of(
    st.binary(max_size=300),
    mutated(ajp_streams()),
    mutated(requests_with_bodies.map(lambda r: ajp_client.packet(r[0]) + b''.join(
        ajp_client.body_packet(chunk) for chunk in r[1] + [b'']))),
    mutated(forward_requests()),  # a bare payload: the decoders see it whole
    mutated(forward_requests()),
    st.sampled_from(['9' * 19, '9' * 20, '0' * 30 + '1', '9' * 4301, '1e3', '\xb2']).map(
        lambda length: ajp_client.request_bytes(headers=[('Content-Length', length)])))


@FUZZ
@given(data=st.data(), wire=ajp_wires, kind=kinds, max_packet=max_packets)
def test_ajp_any_input(data, wire, kind, max_packet):
    outcome(oracles.check_ajp(PURE, COMPILED, wire, data.draw(cuts_for(wire)), kind, max_packet),
            ajp_wire=wire)


# -- The input stream -------------------------------------------------------------------------

@FUZZ
@given(body=bodies | st.integers(60000, 300000).map(lambda n: b'ab\n' * (n // 3)),
       sizes=st.lists(st.integers(1, 700) | st.integers(30000, 70000), max_size=6),
       kind=kinds, end=st.sampled_from(['empty', 'empty', 'none', 'raise']), ops=operations)
def test_input_stream_any_chunking(body, sizes, kind, end, ops):
    oracles.check_input_stream(PURE, COMPILED, body, sizes, kind, end, ops)


@FUZZ
@given(data=st.binary(max_size=80), pos=st.integers(0, 90))
def test_flup_adapter_decoders_raise_only_protocol_errors(data, pos):
    """The pure-only decoders behind flup's Record/Packet adapters and the clients."""
    from flupfast.protocols import ajp
    for decode, args in ((ajp.decode_string, (data, pos)), (f.decode_end_request, (data,))):
        try:
            decode(*args)
        except ProtocolError:
            pass


# -- The atheris input layouts ----------------------------------------------------------------

@FUZZ
@given(codec=st.sampled_from(sorted(oracles.CODECS)), data=st.binary(max_size=400))
def test_raw_fuzzer_inputs(codec, data):
    """Any raw bytes decode to a case, and the case passes: what the atheris targets run."""
    oracles.run_input(codec, PURE, COMPILED, data)
