"""The shared atheris runner: one libFuzzer target per codec, each checking fuzz/oracles.py's
invariants on every input (only the protocol's ProtocolError escapes; the pure and compiled
twins agree event for event; the split never changes the outcome; memory stays under the
caps of flupfast.limits).

Coverage: the pure twins (flupfast.protocols, flupfast.body) and the oracles are instrumented
with atheris's Python coverage; the compiled twins run uninstrumented and are checked against
them on every input. See fuzz/README.md for how to run and what was run.
"""
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import atheris  # noqa: E402  (opt-in: pip install atheris; see fuzz/README.md)

with atheris.instrument_imports(include=['flupfast.protocols', 'flupfast.body']):
    from flupfast import body as _body  # noqa: F401
    from flupfast.protocols import ajp, fastcgi, scgi, uwsgi  # noqa: F401
    from fuzz import oracles

from tests.conftest import COMPILED, COMPILED_ERROR, PURE  # noqa: E402


def _control(flags, cuts):
    return bytes((flags, len(cuts))) + b''.join(struct.pack('>H', c) for c in cuts)


def seeds(codec):
    """A few valid inputs (control prefix + wire) to start the corpus from."""
    from tests import ajp_client
    f = fastcgi
    if codec == 'fastcgi':
        wire = (f.encode_begin_request(1, flags=1)
                + f.encode_stream(f.FCGI_PARAMS, 1, f.encode_params(
                    [('REQUEST_METHOD', 'POST'), ('CONTENT_LENGTH', '3'), ('N' * 130, 'v')]))
                + f.encode_stream(f.FCGI_STDIN, 1, b'abc')
                + f.encode_record(f.FCGI_GET_VALUES, 0, f.encode_params(
                    [('FCGI_MAX_CONNS', ''), ('FCGI_MPXS_CONNS', '')]))
                + f.encode_record(f.FCGI_ABORT_REQUEST, 1) + f.encode_record(77, 0, b'x'))
        return [_control(0, []) + wire, _control(5, [9, 30]) + wire,
                _control(2, [1]) + f.encode_begin_request(2) + f.encode_record(4, 2, b'\x81')]
    if codec == 'scgi':
        wire = scgi.encode_request({'REQUEST_METHOD': 'GET', 'HTTP_HOST': 'x'}, b'body')
        return [_control(0, []) + wire, _control(1, [2, 20]) + wire,
                _control(4, []) + scgi.encode_request({}, b'')]
    if codec == 'uwsgi':
        wire = uwsgi.encode_request({'REQUEST_METHOD': 'POST', 'HTTP_HOST': 'x',
                                     'HTTP_COOKIE': 'a=1'}, b'body')
        return [_control(0, []) + wire, _control(1, [2, 20]) + wire,
                _control(4, []) + uwsgi.encode_request({'CONTENT_LENGTH': ''}),
                _control(0, []) + uwsgi.encode_request({}, modifier1=5)]
    if codec == 'ajp':
        post = ajp_client.request_bytes('POST', '/u', body=b'hello',
                                        headers=[('Host', 'h'), ('X-A', 'b')],
                                        attributes=[('query_string', 'a=1'), ('secret', 's')])
        return [_control(0, []) + post, _control(1, [3, 40]) + post,
                _control(0, []) + ajp_client.CPING + ajp_client.body_packet(b'xyz'),
                _control(0, []) + ajp_client.forward_request('PATCH')]
    if codec == 'input_stream':
        # flags, sizes (count byte + sizes), op count, ops (op, arg), body
        return [bytes((0, 1, 3, 5, 6, 0, 1, 1, 7, 2, 255, 4, 0)) + b'ab\ncd\nefgh\n' * 3,
                bytes((4, 6, 1, 3, 0, 255)) + b'x' * 200]
    raise ValueError(codec)


def main(codec):
    if COMPILED is None:
        sys.exit('flupfast._speedups is not built (%s): the targets compare it with the pure '
                 'twins' % COMPILED_ERROR)
    corpus = [a for a in sys.argv[1:] if not a.startswith('-')]
    if corpus and os.path.isdir(corpus[0]) and not os.listdir(corpus[0]):
        for i, seed in enumerate(seeds(codec)):
            with open(os.path.join(corpus[0], 'seed-%d' % i), 'wb') as out:
                out.write(seed)

    def test_one_input(data):
        oracles.run_input(codec, PURE, COMPILED, data)

    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
