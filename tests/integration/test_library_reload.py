"""flup's own reload loop, ``while server.run(): ...``, through the facade in a script (thread
and fork mode, FastCGI on a Unix socket): clients connecting all along get every answer, the
socket path is never unlinked (same inode), the loop's next run() serves the new generation,
and in thread mode a kept connection survives the reload (known_differences
'reload-keeps-listening-socket'). Also fork mode's --max-memory recycling, end to end.
"""
import os
import signal
import subprocess
import sys
import threading

import pytest

from tests.fcgi_client import read_response, request_bytes, roundtrip
from tests.integration.peers import REPO, ManagedProcess, wait_until_connectable
from tests.waiting import wait_until

SCRIPT = '''
import sys
from flupfast.server.%s import WSGIServer

generation = [0]


def app(environ, start_response):
    start_response('200 OK', [('Content-Type', 'text/plain')])
    return [b'generation %%d' %% generation[0]]


server = WSGIServer(app, bindAddress=sys.argv[1]%s)
while server.run():
    generation[0] += 1  # the app "reloaded"
    print('reloaded', generation[0], flush=True)
'''
MODES = {'thread': ('fcgi', ''), 'fork': ('fcgi_fork', ', maxSpare=3')}
RELOADS = 2
WAIT = 30.0


@pytest.mark.parametrize('mode', sorted(MODES))
def test_while_server_run_keeps_the_socket_and_refuses_nothing(tmp_path, mode):
    module, extra = MODES[mode]
    script = tmp_path / 'serve.py'
    script.write_text(SCRIPT % (module, extra))
    address = str(tmp_path / 'app.sock')
    env = dict(os.environ, PYTHONPATH=str(REPO))
    backend = ManagedProcess('backend', [sys.executable, str(script), address], env=env,
                             cwd=str(tmp_path), log_dir=tmp_path)
    stop = threading.Event()
    results = []

    def client():
        while not stop.is_set():
            try:
                results.append(roundtrip(address, '/').body)
            except Exception as exc:  # every failure is a result here
                results.append(type(exc).__name__)

    try:
        wait_until_connectable(address, backend)
        inode = os.stat(address).st_ino
        kept = None
        if mode == 'thread':
            import socket
            kept = socket.socket(socket.AF_UNIX)
            kept.settimeout(30)
            kept.connect(address)
            kept.sendall(request_bytes('/', keep_conn=True))
            assert read_response(kept, 1, timeout=30).body == b'generation 0'
        clients = [threading.Thread(target=client, daemon=True) for _ in range(4)]
        for thread in clients:
            thread.start()
        for reload_ in range(1, RELOADS + 1):
            wait_until(lambda: len(results) > 20 * reload_, WAIT,
                       what=lambda: 'answers\n' + backend.describe())
            os.kill(backend.pid, signal.SIGHUP)
            wait_until(lambda: backend.output.read_text().count('reloaded') >= reload_, WAIT,
                       what=lambda: 'reload %d\n%s' % (reload_, backend.describe()))
        wait_until(lambda: b'generation %d' % RELOADS in results, WAIT,
                   what=lambda: 'the new generation\n' + backend.describe())
        stop.set()
        for thread in clients:
            thread.join(30)
        failures = [r for r in results if not (isinstance(r, bytes) and r.startswith(b'generation '))]
        assert not failures, '%d of %d failed: %s\n%s' % (
            len(failures), len(results), sorted(set(map(str, failures))), backend.describe())
        assert os.stat(address).st_ino == inode  # never unlinked and made anew
        if kept is not None:  # the same connection, served by the next run()
            kept.sendall(request_bytes('/', keep_conn=True))
            assert read_response(kept, 1, timeout=30).body == b'generation %d' % RELOADS
            kept.close()
        assert backend.alive()
    finally:
        stop.set()
        backend.stop()


MEMORY_APP = '''
import os

hoard = []


def app(environ, start_response):
    if environ['PATH_INFO'] == '/grow':
        hoard.append(bytearray(48 << 20))  # touched: resident
        hoard[-1][::4096] = b'x' * len(hoard[-1][::4096])
    start_response('200 OK', [('Content-Type', 'text/plain')])
    return [str(os.getpid()).encode()]
'''


def test_max_memory_replaces_a_child_after_its_request(tmp_path):
    """``--max-memory 40`` in fork mode: the child that grew past it answers, then is replaced
    (a new pid answers); one that stays under keeps serving. Thread mode refuses the flag."""
    (tmp_path / 'memapp.py').write_text(MEMORY_APP)
    address = str(tmp_path / 'app.sock')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(tmp_path)]))
    command = [sys.executable, '-m', 'flupfast', 'memapp:app', '--bind', 'unix:' + address,
               '--max-memory', '40']
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and '--max-memory applies to --mode fork' in refused.stderr
    backend = ManagedProcess('backend', command + ['--mode', 'fork', '--min-spare', '1',
                                                   '--max-spare', '1', '--max-children', '1'],
                             env=env, cwd=str(tmp_path), log_dir=tmp_path)
    try:
        wait_until_connectable(address, backend)
        first = roundtrip(address, '/').body
        assert roundtrip(address, '/').body == first  # under the limit: the same child
        assert roundtrip(address, '/grow').body == first  # its request is answered
        wait_until(lambda: roundtrip(address, '/').body != first, WAIT, interval=0.05,
                   what=lambda: 'a new child\n' + backend.describe())
        assert 'resident memory over the limit of 40 MB' in backend.output.read_text()
    finally:
        backend.stop()


GENERATIONS_SCRIPT = '''
import gc
import sys
import weakref
from flupfast.server.fcgi_fork import WSGIServer


class App:
    """A generation of the app: a reference cycle, as any real app's object graph holds."""

    def __init__(self):
        self.me = self

    def __call__(self, environ, start_response):
        start_response('200 OK', [('Content-Type', 'text/plain')])
        return [b'served']


server = WSGIServer(App(), bindAddress=sys.argv[1], maxSpare=1)
old = []
while server.run():
    old.append(weakref.ref(server.application))
    server.application = App()  # the app "reloaded"
    gc.collect()
    print('reloaded; old generations alive:', sum(ref() is not None for ref in old),
          flush=True)
'''


def test_fork_mode_frees_the_generations_a_reload_loop_replaces(tmp_path):
    """The parent freezes its objects for each fork (a child's collection would otherwise
    unshare their pages) and thaws them afterwards: frozen for good, each app generation
    replaced by flup's reload loop stayed in memory (found in review)."""
    script = tmp_path / 'serve.py'
    script.write_text(GENERATIONS_SCRIPT)
    address = str(tmp_path / 'app.sock')
    backend = ManagedProcess('backend', [sys.executable, str(script), address],
                             env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=str(tmp_path),
                             log_dir=tmp_path)
    try:
        wait_until_connectable(address, backend)
        for reload_ in range(1, 3):
            assert roundtrip(address, '/').body == b'served'
            os.kill(backend.pid, signal.SIGHUP)
            wait_until(lambda: backend.output.read_text().count('reloaded') >= reload_, WAIT,
                       what=lambda: 'reload %d\n%s' % (reload_, backend.describe()))
        assert 'old generations alive: 0' in backend.output.read_text().splitlines()[-1], \
            backend.describe()
    finally:
        backend.stop()
