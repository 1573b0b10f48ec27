"""Process titles without a server: the master and worker titles, the per-request busy/idle
switch, and that everything is a no-op when titles are off or setproctitle is missing."""
import ast
import os
import pathlib
import subprocess
import sys

import pytest

from flupfast import gateway, ops
from flupfast.ops import proctitle
from tests.conftest import COMPILED, install_backend


@pytest.fixture
def titles(monkeypatch):
    seen = []
    monkeypatch.setattr(proctitle, '_set_title', seen.append)
    yield seen
    proctitle.disable()
    ops.put_on_duty('title', None)


def test_master_then_worker_busy_and_idle(titles, backend, monkeypatch):
    """On both backends: the compiled WorkerTitle is the pure one's twin."""
    install_backend(monkeypatch, backend)
    assert proctitle.enable('site.wsgi:app')
    ops.become_worker(3)
    observer = gateway._observer
    observer.end(observer.begin({'REQUEST_METHOD': 'POST', 'REQUEST_URI': '/form?x=1'}),
                 None, False)
    assert titles == ['flupfast: master [site.wsgi:app]',
                      'flupfast: worker 3 [site.wsgi:app] idle',
                      'flupfast: worker 3 [site.wsgi:app] busy POST /form?x=1',
                      'flupfast: worker 3 [site.wsgi:app] idle']
    assert type(observer) is backend.WorkerTitle
    observer.begin({'PATH_INFO': '/p'})
    assert titles[-1] == 'flupfast: worker 3 [site.wsgi:app] busy - /p'
    # setproctitle refuses a NUL (a FastCGI param may carry one): left out, the request goes on
    observer.begin({'REQUEST_METHOD': 'GET', 'REQUEST_URI': '/a\0b'})
    assert titles[-1] == 'flupfast: worker 3 [site.wsgi:app] busy GET /ab'


def test_off_means_no_observer_and_no_title(titles):
    ops.become_worker(1)
    assert gateway._observer is None and titles == []


def test_without_setproctitle_nothing_happens(monkeypatch):
    monkeypatch.setattr(proctitle, '_set_title', None)
    assert not proctitle.enable('app') and not proctitle.enabled()
    assert proctitle.become_worker(1) is None


# One process per backend: the titles are the process's own command line.
TITLES_SCRIPT = r'''
import ctypes, sys
import setproctitle
from flupfast.ops import proctitle
from tests.conftest import COMPILED, PURE

def cmdline():
    with open('/proc/self/cmdline', 'rb') as f:
        return f.read()

backend = COMPILED if sys.argv[1] == 'cy' else PURE
proctitle.enable('site.wsgi:app')
title = backend.WorkerTitle(3, 'site.wsgi:app', setproctitle.setproctitle)
# A comm of our own: setproctitle's prctl would put "flupfast: worke" back.
assert ctypes.CDLL(None, use_errno=True).prctl(15, b'marker', 0, 0, 0) == 0  # PR_SET_NAME
seen = [cmdline()]
for environ in ({'REQUEST_METHOD': 'GET', 'REQUEST_URI': '/caf\xc3\xa9?x=1'},
                {'REQUEST_METHOD': 'POST', 'REQUEST_URI': '/' + 'long' * 20000},
                {'PATH_INFO': '/p'}, {'REQUEST_METHOD': 'GET', 'REQUEST_URI': '/x'}):
    title.begin(environ)
    seen.append(cmdline())
    title.end(None, None, False)
    seen.append(cmdline())
with open('/proc/self/comm', 'rb') as f:
    seen.append(f.read().strip())
# A NUL, which setproctitle refuses, is left out (through set_title: last, it names the comm).
title.begin({'REQUEST_METHOD': 'GET', 'REQUEST_URI': '/nul\0x'})
seen.append(cmdline())
print(repr(seen))
'''


@pytest.mark.parametrize('name', ['py', 'cy'])
def test_the_compiled_twin_writes_what_setproctitle_writes_without_calling_it(name, tmp_path):
    """The compiled WorkerTitle writes setproctitle's area itself: the same command lines
    (cut where setproctitle cuts, the rest NUL), and no prctl per title (the comm set after
    the idle title stays)."""
    pytest.importorskip('setproctitle')
    if COMPILED is None:
        pytest.skip('flupfast._speedups is not built')
    root = pathlib.Path(__file__).resolve().parents[2]
    script = tmp_path / 'titles.py'
    script.write_text(TITLES_SCRIPT)

    def run(backend):
        out = subprocess.run([sys.executable, str(script), backend], cwd=str(root), timeout=60,
                             capture_output=True, env=dict(os.environ, PYTHONPATH=str(root)))
        assert out.returncode == 0, out.stderr.decode()
        return ast.literal_eval(out.stdout.decode())

    pure, other = run('py'), run(name)
    assert other[:-2] == pure[:-2] and other[-1] == pure[-1]
    assert pure[-1].rstrip(b'\0').endswith(b'busy GET /nulx')
    assert pure[1].rstrip(b'\0') == \
        'flupfast: worker 3 [site.wsgi:app] busy GET /caf\xc3\xa9?x=1'.encode('utf-8')
    assert len(pure[3].rstrip(b'\0')) < len(b'busy POST /' + b'long' * 20000)  # cut
    assert pure[-2] == b'flupfast: worke'
    assert other[-2] == (b'marker' if name == 'cy' else b'flupfast: worke')
