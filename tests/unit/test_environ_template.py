"""The environ a codec decodes is its pure twin's from request to request: the compiled codecs
copy the last request's dict when the names come again in the same order, and set again only
the values that changed (environ.pxi). Sequences of requests whose names repeat, change, move
and repeat within one request, through each codec on both backends, against the pure twin.
"""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flupfast.protocols import fastcgi as f
from flupfast.protocols import scgi as s
from flupfast.protocols import uwsgi as u
from flupfast.protocols.errors import FastCGIError, SCGIError, UWSGIError
from tests.conftest import PURE

BASE = [('REQUEST_METHOD', 'GET'), ('REMOTE_PORT', '50000'), ('HTTP_HOST', 'example.org'),
        ('HTTP_X_LONG', 'v' * 60), ('HTTP_EMPTY', ''), ('Q', '1'), ('\xe9T\xe9', '\xff\xfe')]


def _with(pairs, **changes):
    return [(name, changes.get(name, value)) for name, value in pairs]


SEQUENCE = [
    BASE,
    _with(BASE, REMOTE_PORT='50001'),                    # the value that changes every request
    [(name, value + 'x') for name, value in BASE],       # every value
    BASE,                                                 # and back
    BASE + [('HTTP_COOKIE', 'a=1')],                      # one more name
    BASE,                                                 # one fewer
    BASE[::-1],                                           # the same names, another order
    BASE,
    BASE + [('HTTP_HOST', 'other.example')],             # a name twice: the last value wins
    _with(BASE, HTTP_HOST='x') + [('HTTP_HOST', 'other.example')],  # only a hidden one changes
    BASE + [('HTTP_HOST', 'third.example')],             # the last value changes
    _with(BASE, HTTP_HOST='x') + [('HTTP_HOST', 'third.example')],  # one it hides changes
    [('REQUEST_METHOD', 'POST')] + BASE[1:] + [('HTTP_HOST', 'third.example')],
    BASE + [('Q', '2'), ('HTTP_HOST', 'y')],              # two names twice
    BASE + [('HTTP_HOST', 'y'), ('Q', '2')],              # the same repeats, other order
    BASE + [('Q', str(i)) for i in range(9)],             # more repeats than a template follows
    BASE + [('Q', str(i)) for i in range(9)],
    BASE,
    [('HTTP_HOSU' if n == 'HTTP_HOST' else n, v) for n, v in BASE],  # same length, other bytes
    _with(BASE, HTTP_HOST='example.orh'),                # a value of the same length
    _with(BASE, HTTP_EMPTY='now set', Q=''),
    BASE,
    [],
    BASE,
]


def _fcgi_decode(backend, pairs, max_pairs=f.MAX_PARAMS_PAIRS):
    parser = backend.FastCGIParser(max_params_pairs=max_pairs)
    events = parser.feed(f.encode_begin_request(1) + f.encode_stream(
        f.FCGI_PARAMS, 1, f.encode_params(pairs)))
    [params] = [content for kind, _, content in events if kind == f.FCGI_PARAMS]
    return params


def _scgi_decode(backend, pairs, max_pairs=s.MAX_PARAMS_PAIRS):
    environ, length, _ = backend.decode_scgi_request(s.encode_request(pairs), max_pairs=max_pairs)
    return environ, length


def _uwsgi_decode(backend, pairs, max_pairs=u.MAX_PARAMS_PAIRS):
    environ, length, _ = backend.decode_uwsgi_request(u.encode_request(pairs),
                                                      max_pairs=max_pairs)
    return environ, length


CODECS = {'fcgi': (_fcgi_decode, FastCGIError), 'scgi': (_scgi_decode, SCGIError),
          'uwsgi': (_uwsgi_decode, UWSGIError)}


def _outcome(decode, error, backend, pairs, **limits):
    """The decoded environ as its ordered items (plus any content length), or the error."""
    try:
        result = decode(backend, pairs, **limits)
    except error as exc:
        return 'error', str(exc)
    if isinstance(result, tuple):
        return list(result[0].items()), result[1]
    return list(result.items())


@pytest.mark.parametrize('codec', sorted(CODECS))
def test_a_sequence_of_requests_decodes_as_the_pure_twin(backend, codec):
    decode, error = CODECS[codec]
    for pairs in SEQUENCE * 2:
        assert _outcome(decode, error, backend, pairs) == _outcome(decode, error, PURE, pairs)


@pytest.mark.parametrize('codec', sorted(CODECS))
def test_an_environ_changed_by_its_app_leaves_the_next_one_alone(backend, codec):
    decode, _ = CODECS[codec]
    decode(backend, [('HTTP_OTHER', '1')])  # the next one's names are new: its dict is kept
    for _ in range(3):
        result = decode(backend, BASE)
        environ = result[0] if isinstance(result, tuple) else result
        assert environ['HTTP_HOST'] == 'example.org' and 'wsgi.input' not in environ
        environ['HTTP_HOST'] = 'changed'
        environ['wsgi.input'] = object()
        del environ['REQUEST_METHOD']
        environ.clear()


@pytest.mark.parametrize('codec', sorted(CODECS))
def test_the_pair_cap_holds_for_the_names_of_the_last_request(backend, codec):
    decode, error = CODECS[codec]
    for pairs, max_pairs in ((BASE, 30), (BASE, 30), (BASE, 2), (BASE, 30), (BASE, 2)):
        assert (_outcome(decode, error, backend, pairs, max_pairs=max_pairs)
                == _outcome(decode, error, PURE, pairs, max_pairs=max_pairs))
    assert _outcome(decode, error, backend, BASE, max_pairs=2)[0] == 'error'


@pytest.mark.parametrize('codec,bad', [
    ('scgi', [('CONTENT_LENGTH', '1x')]), ('scgi', [('CONTENT_LENGTH', '')]),
    ('scgi', [('SCGI', '2')]), ('uwsgi', [('CONTENT_LENGTH', '12a')]),
    ('uwsgi', [('CONTENT_LENGTH', '9' * 30)])])
def test_a_value_checked_after_decoding_is_checked_when_the_names_repeat(backend, codec, bad):
    """The names of a good request, then a bad value for one of them: the same error as the
    pure twin's, and the next good request decodes."""
    decode, error = CODECS[codec]
    good = [('CONTENT_LENGTH', '0'), ('SCGI', '1')] + BASE
    names = dict(bad)
    for pairs in (good, good, [(n, names.get(n, v)) for n, v in good], good):
        assert (_outcome(decode, error, backend, pairs)
                == _outcome(decode, error, PURE, pairs))
    assert _outcome(decode, error, backend, [(n, names.get(n, v)) for n, v in good])[0] \
        == 'error'


@pytest.mark.parametrize('codec', ['scgi', 'uwsgi'])
def test_a_repeated_content_length_is_checked_when_the_names_repeat(backend, codec):
    """Its values must agree: the same error as the pure twin's once they do not, even after
    requests with those names decoded."""
    decode, error = CODECS[codec]
    first = [('CONTENT_LENGTH', '0'), ('SCGI', '1')] + BASE
    for last in ('0', '0', '7', '0'):
        pairs = first + [('CONTENT_LENGTH', last)]
        assert (_outcome(decode, error, backend, pairs)
                == _outcome(decode, error, PURE, pairs))
    assert _outcome(decode, error, backend, first + [('CONTENT_LENGTH', '7')])[0] == 'error'


@pytest.mark.parametrize('codec', ['scgi', 'uwsgi'])
def test_a_collection_during_the_copy_that_decodes_again_changes_nothing(backend, codec):
    """Up to CPython 3.11 the copy's allocation may run a collection, whose finalizer (or a
    thread it hands the GIL to) decodes another request of the same codec: the request being
    copied keeps its own names and values. (FastCGI's parser allocates its events first: a
    collection would run there.)"""
    import gc
    decode = {'scgi': backend.decode_scgi_request, 'uwsgi': backend.decode_uwsgi_request}[codec]
    encode = {'scgi': s.encode_request, 'uwsgi': u.encode_request}[codec]
    first = encode([('HTTP_A', 'one'), ('HTTP_B', 'x1')])
    second = encode([('HTTP_A', 'one'), ('HTTP_B', 'x2')])
    other = encode([('ZZ_P', 'p'), ('ZZ_Q', 'q')])

    class DecodesWhenCollected:
        def __del__(self):
            decode(other)

    decode(first)
    threshold = gc.get_threshold()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        hold = [{} for _ in range(500)]  # no free dict left: the copy allocates one
        garbage = DecodesWhenCollected()
        garbage.cycle = garbage
        del garbage
        gc.set_threshold(1)
        gc.enable()
        environ = decode(second)[0]  # the bytes are ready: the copy is the first allocation
    finally:
        gc.set_threshold(*threshold)
        if not was_enabled:
            gc.disable()
        del hold
    gc.collect()
    assert list(environ.items()) == list(PURE_DECODE[codec](second)[0].items())


PURE_DECODE = {'scgi': PURE.decode_scgi_request, 'uwsgi': PURE.decode_uwsgi_request}


@pytest.mark.parametrize('tail', [b'\x05', b'\x05\x03AB', b'\x85\x00'])
def test_a_fastcgi_stream_cut_after_the_names_of_the_last_request_is_an_error(backend, tail):
    """The last request's pairs, whole, then a pair cut short (a name length alone, a pair
    running past the end, a 4-byte length cut): the pure twin's error, not the last dict."""
    results = []
    for twin in (backend, PURE):
        parser = twin.FastCGIParser()
        _fcgi_decode(twin, BASE)
        stream = f.encode_params(BASE) + tail
        try:
            parser.feed(f.encode_begin_request(1) + f.encode_stream(f.FCGI_PARAMS, 1, stream))
            results.append('decoded')
        except FastCGIError as exc:
            results.append(str(exc))
    assert results[0] == results[1] != 'decoded'


POOL = ['REQUEST_METHOD', 'REMOTE_PORT', 'HTTP_HOST', 'HTTP_COOKIE', 'A', 'B' * 50, 'N\xe9']
latin1 = st.characters(min_codepoint=0, max_codepoint=255)
requests = st.lists(st.tuples(st.sampled_from(POOL), st.sampled_from(['', '1', 'GET', 'x' * 45])
                              | st.text(latin1, max_size=6)), max_size=9)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=st.lists(requests, min_size=1, max_size=6),
       repeat=st.lists(st.integers(0, 5), max_size=6))
def test_random_sequences_decode_as_the_pure_twin(sequence, repeat):
    from tests.conftest import COMPILED
    backends = [PURE] + ([COMPILED] if COMPILED else [])
    # Requests again, in another order: most of them meet the names of the one before.
    sequence = sequence + [sequence[i % len(sequence)] for i in repeat]
    for codec in sorted(CODECS):
        decode, error = CODECS[codec]
        for pairs in sequence:
            if codec == 'scgi':
                pairs = [('CONTENT_LENGTH', '0'), ('SCGI', '1')] + pairs
            outcomes = [_outcome(decode, error, backend, pairs) for backend in backends]
            assert outcomes[0] == outcomes[-1], (codec, pairs)
