"""The chaos run: CHAOS_SECONDS (default 300) of load through nginx (FastCGI, fork
mode, 16 clients of 50 ms requests) while a random child of the backend gets SIGKILL every 1-3
s, the backend gets SIGHUP every 20 s, and nginx itself is reloaded once, half-way. Only the
requests in flight on a killed child may fail, at most one per SIGKILL (no kept connections:
a child runs one request at a time); the counts are printed. Not in every CI run: it takes
minutes, so it runs only with FLUPFAST_CHAOS=1 (``FLUPFAST_CHAOS=1 nice python -m pytest -s
tests/integration/test_chaos.py``).
"""
import os
import random
import signal
import threading
import time

import pytest

from tests.integration.nginx import start_nginx
from tests.integration.test_reload import backend_of, load

pytestmark = [pytest.mark.peer, pytest.mark.skipif(
    not os.environ.get('FLUPFAST_CHAOS'), reason='the chaos run takes minutes: FLUPFAST_CHAOS=1')]

CHAOS_SECONDS = float(os.environ.get('FLUPFAST_CHAOS_SECONDS', '300'))
CLIENTS = 16
RELOAD_EVERY = 20.0


def children(pid):
    try:
        with open('/proc/%d/task/%d/children' % (pid, pid)) as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


@pytest.mark.timeout(CHAOS_SECONDS + 180)  # beyond pyproject's 300 s per test
def test_chaos_loses_only_requests_on_killed_children(server):
    if server.is_flup:
        pytest.skip('flup 1.0.3 leaves reloading to the caller')
    front = start_nginx(server, keep_conn=False, mode='fork')
    try:
        backend = backend_of(front)
        (nginx,) = [p for p in front.processes if p.name.startswith('nginx')]
        assert front.request('GET', '/').status == 200
        stop = threading.Event()
        results, retried = [], []
        clients = [threading.Thread(target=load, args=(front, stop, results, retried),
                                    daemon=True)
                   for _ in range(CLIENTS)]
        for client in clients:
            client.start()
        kills = reloads = nginx_reloads = 0
        started = time.monotonic()
        next_reload = started + RELOAD_EVERY
        nginx_reload_at = started + CHAOS_SECONDS / 2
        while time.monotonic() - started < CHAOS_SECONDS:
            time.sleep(random.uniform(1, 3))
            pool = children(backend.pid)
            if pool:
                try:
                    os.kill(random.choice(pool), signal.SIGKILL)
                    kills += 1
                except ProcessLookupError:
                    pass  # it exited meanwhile (a reload's drain)
            now = time.monotonic()
            if now >= next_reload:
                os.kill(backend.pid, signal.SIGHUP)
                reloads += 1
                next_reload = now + RELOAD_EVERY
            if nginx_reloads == 0 and now >= nginx_reload_at:
                os.kill(nginx.pid, signal.SIGHUP)  # nginx -s reload
                nginx_reloads += 1
        stop.set()
        for client in clients:
            client.join(90)
        failures = [r for r in results if r != 200]
        report = ('chaos: %.0f s, %d requests, %d failed, %d SIGKILLs, %d SIGHUPs, %d nginx '
                  'reload(s), %d sent again after nginx closed a kept client connection; '
                  'failures: %s' % (CHAOS_SECONDS, len(results), len(failures), kills, reloads,
                                    nginx_reloads, len(retried),
                                    sorted(set(map(str, failures)))))
        print(report)
        assert len(failures) <= kills, report + '\n' + front.describe()
        assert len(results) > CLIENTS * 10, report
        front.assert_alive()
        assert front.request('GET', '/').status == 200
    finally:
        front.stop()
