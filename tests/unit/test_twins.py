"""The one list of twins (flupfast._impl.TWINS): the test backends, the typed stub and the
compiled module agree with it; and SCGI's wsgi.input, a twin chosen through _impl too, reads
the same on both backends."""
import ast
import inspect
import pathlib
import socket
import threading

import pytest

from flupfast import _impl
from tests.conftest import COMPILED, PURE

STUB = pathlib.Path(_impl.__file__).with_name('_speedups.pyi')


def stub_functions():
    """{top-level name: parameter names (None for a class or constant)} of the stub."""
    names = {}
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, ast.FunctionDef):
            names[node.name] = [arg.arg for arg in node.args.args]
        elif isinstance(node, ast.ClassDef):
            names[node.name] = None
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = None
    return names


def test_the_backends_have_exactly_the_listed_twins():
    listed = {name for name, _, _, _ in _impl.TWINS} | {'open_scgi_body'}
    assert set(vars(PURE)) - {'name'} == listed
    if COMPILED is not None:
        assert set(vars(COMPILED)) - {'name'} == listed


def test_the_stub_declares_every_compiled_twin():
    stub = stub_functions()
    missing = [compiled for _, compiled, _, _ in _impl.TWINS if compiled not in stub]
    assert not missing, 'compiled twins missing from _speedups.pyi: %s' % missing


def test_the_stub_matches_the_compiled_module(needs_compiled):
    from flupfast import _speedups
    for name, params in stub_functions().items():
        assert hasattr(_speedups, name), '_speedups.pyi declares %s, not compiled' % name
        if params is not None:
            compiled = list(inspect.signature(getattr(_speedups, name)).parameters)
            assert compiled == params, name


def test_the_twins_share_their_signatures(needs_compiled):
    from flupfast import _speedups
    for name, compiled, _, _ in _impl.TWINS:
        twin = getattr(_speedups, compiled)
        if inspect.isclass(twin):
            continue
        pure = _impl.pure_twin(name)
        assert (list(inspect.signature(twin).parameters)
                == list(inspect.signature(pure).parameters)), name


class _Conn:
    """What SCGI's body needs of its connection: the socket and ``recv_some``."""

    def __init__(self, sock):
        self._sock = sock

    def recv_some(self, limit=0):
        return memoryview(self._sock.recv(limit or 65536))


BODIES = [b'', b'one line', b'a\nb\r\nc\n\nlast', b'x' * 70000 + b'\n' + b'y' * 10]


def read_all_ways(backend, body, split):
    """Open the body with ``split`` bytes arriving with the header, the rest on the socket in
    pieces; read it with readline and read(n) and read(); return what each gave and ``left``."""
    ours, theirs = socket.socketpair()
    try:
        sender = threading.Thread(target=ours.sendall, args=(body[split:],))
        sender.start()
        source, stream = backend.open_scgi_body(_Conn(theirs), body[:split], len(body))
        got = [stream.readline(), stream.read(3), stream.readline(5), stream.read()]
        got.append(stream.read())  # at the end: empty, never a wait past CONTENT_LENGTH
        sender.join(10)
        return got, source.left
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize('body', BODIES, ids=['empty', 'line', 'lines', 'long'])
@pytest.mark.parametrize('split', [0, 1, 9])
def test_scgi_body_reads_the_same_on_both_backends(needs_compiled, body, split):
    split = min(split, len(body))
    pure = read_all_ways(PURE, body, split)
    assert b''.join(pure[0]) == body and pure[1] == 0
    assert read_all_ways(COMPILED, body, split) == pure
