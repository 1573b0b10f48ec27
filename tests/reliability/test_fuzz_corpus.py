"""Replays every saved fuzzer input of tests/data/fuzz/<codec>/ on both backends, through the
same checks the atheris targets run (fuzz/oracles.py): crash reproducers and the minimized
corpora of the long runs (fuzz/README.md), so the states they reached stay covered.

Also shows that the checks can fail: twins broken on purpose are caught.
"""
import os
import types

import pytest

from flupfast.protocols import fastcgi as f
from flupfast.protocols import scgi, uwsgi
from fuzz import oracles
from tests import ajp_client
from tests.conftest import COMPILED, PURE

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'data', 'fuzz')


def saved_inputs():
    found = []
    for codec in sorted(oracles.CODECS):
        folder = os.path.join(DATA, codec)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
            found.append(pytest.param(codec, os.path.join(folder, name),
                                      id='%s/%s' % (codec, name)))
    return found


pytestmark = pytest.mark.usefixtures('needs_compiled')


def test_every_codec_has_saved_inputs():
    codecs = {p.values[0] for p in saved_inputs()}
    assert codecs == set(oracles.CODECS)


@pytest.mark.parametrize('codec, path', saved_inputs())
def test_saved_input(codec, path):
    with open(path, 'rb') as saved:
        oracles.run_input(codec, PURE, COMPILED, saved.read())


# -- The checks catch broken twins ------------------------------------------------------------

def broken(**names):
    """The compiled backend with some names replaced."""
    return types.SimpleNamespace(**dict(vars(COMPILED), **names))


class DropsLastEvent:
    def __init__(self, *caps):
        self._parser = COMPILED.FastCGIParser(*caps)
        self._params = oracles.params_streams(self._parser)
        self.pending = 0

    def feed(self, data):
        events = self._parser.feed(data)
        self.pending = self._parser.pending
        return events[:-1]


class KeepsParams(DropsLastEvent):
    """Right events, but a PARAMS stream beyond its cap stays buffered."""

    def __init__(self, *caps):
        super().__init__(*caps)
        self._params = {1: bytearray(caps[0] + 1)}

    def feed(self, data):
        events = self._parser.feed(data)
        self.pending = self._parser.pending
        return events


def fastcgi_wire():
    return (f.encode_begin_request(1) + f.encode_stream(f.FCGI_PARAMS, 1, f.encode_pair('A', 'b'))
            + f.encode_stream(f.FCGI_STDIN, 1, b'xyz'))


@pytest.mark.parametrize('fake, message', [(DropsLastEvent, 'twins disagree'),
                                           (KeepsParams, 'over the 400-byte cap')])
def test_fastcgi_checks_catch_a_broken_twin(fake, message):
    with pytest.raises(AssertionError, match=message):
        oracles.check_fastcgi(PURE, broken(FastCGIParser=fake), fastcgi_wire(), [5, 30],
                              'bytes', (400, 5))


def test_fastcgi_checks_catch_a_foreign_exception():
    class Raises(DropsLastEvent):
        def feed(self, data):
            raise ValueError('not a protocol error')
    with pytest.raises(ValueError):
        oracles.check_fastcgi(PURE, broken(FastCGIParser=Raises), fastcgi_wire())


def test_fastcgi_checks_catch_a_split_dependent_parser():
    class WholeOnly(DropsLastEvent):
        """Agrees with the pure twin fed in pieces, but drops events when fed whole."""
        def feed(self, data):
            events = self._parser.feed(data)
            self.pending = self._parser.pending
            return events[:1] if len(data) > 40 else events
    wire = fastcgi_wire()
    oracles.check_fastcgi(PURE, COMPILED, wire, [5, 30])
    with pytest.raises(AssertionError, match='the split changed'):
        oracles.check_fastcgi(PURE, broken(FastCGIParser=WholeOnly), wire, [5, 30])


def test_scgi_checks_catch_a_broken_twin():
    def wrong_length(data, *caps):
        result = COMPILED.decode_scgi_request(data, *caps)
        return result if result is None else (result[0], result[1] + 1, result[2])
    with pytest.raises(AssertionError, match='twins disagree'):
        oracles.check_scgi(PURE, broken(decode_scgi_request=wrong_length),
                           scgi.encode_request({}, b'ab'))

    def never_done(data, *caps):
        return None  # buffers the header without end
    with pytest.raises(AssertionError, match='over the 9-byte cap'):
        oracles.check_scgi(PURE, broken(decode_scgi_request=never_done), b'1:' + b'x' * 20,
                           [], 'bytes', (9, 1))


def test_uwsgi_checks_catch_a_broken_twin():
    def wrong_length(data, *caps):
        result = COMPILED.decode_uwsgi_request(data, *caps)
        return result if result is None else (result[0], result[1] + 1, result[2])
    with pytest.raises(AssertionError, match='uwsgi twins disagree'):
        oracles.check_uwsgi(PURE, broken(decode_uwsgi_request=wrong_length),
                            uwsgi.encode_request({}, b'ab'))

    def never_done(data, *caps):
        return None  # buffers the vars without end
    with pytest.raises(AssertionError, match='over the 9-byte cap'):
        oracles.check_uwsgi(PURE, broken(decode_uwsgi_request=never_done),
                            b'\x00\x09\x00\x00' + b'x' * 20, [], 'bytes', (9, 1))


def test_ajp_checks_catch_a_broken_twin():
    def not_chunked(payload):
        environ, length, chunked, secret = COMPILED.decode_forward_request(payload)
        return environ, length, not chunked, secret
    wire = ajp_client.request_bytes('POST', body=b'abc')
    oracles.check_ajp(PURE, COMPILED, wire)
    with pytest.raises(AssertionError, match='twins disagree'):
        oracles.check_ajp(PURE, broken(decode_forward_request=not_chunked), wire)

    def lowercase_keys(payload):
        environ, length, chunked, secret = COMPILED.decode_forward_request(payload)
        return {k.lower(): v for k, v in environ.items()}, length, chunked, secret
    with pytest.raises(AssertionError, match='REQUEST_METHOD'):  # a key WSGI requires
        oracles.check_ajp(PURE, broken(decode_forward_request=lowercase_keys), wire)


def test_input_stream_checks_catch_a_stream_that_keeps_every_chunk():
    class Hoarder:
        def __init__(self, pull):
            self.kept = []

            def keeping():
                chunk = pull()
                self.kept.append(chunk)
                return chunk
            self._stream = COMPILED.InputStream(keeping)

        def __getattr__(self, name):
            return getattr(self._stream, name)

        def __next__(self):
            return next(self._stream)
    body = b'line\n' * 40
    ops = [('readline', -1)] * 5
    oracles.check_input_stream(PURE, COMPILED, body, [7], 'bytes', 'empty', ops)
    with pytest.raises(AssertionError, match='several pulled chunks'):
        oracles.check_input_stream(PURE, broken(InputStream=Hoarder), body, [7], 'bytes',
                                   'empty', ops)
