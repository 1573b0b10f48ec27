"""The scale-out recipe of docs/deployment.md ("Several hosts", read from the page), for real: two flupfast hosts,
each in its own network namespace joined to this one by a veth pair (made by the test, removed
in a finally; root only), behind one nginx with ``upstream`` and ``fastcgi_next_upstream error
timeout``. Under load of 50 ms requests one host is SIGKILLed and the other reloaded (SIGHUP):
the only requests allowed to fail are those in flight on the killed host when it died (nginx's
$upstream_addr, sent back as a header, names the hosts each request tried), and there are
counted; every other request is answered 200.
"""
import http.client
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.integration.backend_process import free_port
from tests.integration.nginx import launch_nginx, nginx_config
from tests.integration.peers import (
    NGINX, REPO, ManagedProcess, make_tempdir, remove_tempdir, require, require_root)
from tests.integration.test_recipes import snippet
from tests.waiting import wait_until

pytestmark = pytest.mark.peer

CLIENTS = 8
PORT = 9000

SECTION = 'Several hosts (nginx upstream)'


def recipe_config(hosts, listen):
    """The page's nginx snippet with the test's addresses, plus a header naming the hosts each
    request tried ($upstream_addr)."""
    conf = snippet(SECTION, 'nginx')
    for i, host in enumerate(hosts, 1):
        conf = conf.replace('10.0.%d.2:9000' % i, '%s:%d' % (host, PORT))
    conf = conf.replace('listen 80;', 'listen 127.0.0.1:%d;' % listen)
    conf = conf.replace('include fastcgi_params;', 'include /etc/nginx/fastcgi_params;')
    conf = conf.replace('fastcgi_pass myapp;', 'fastcgi_pass myapp;\n'
                        '        add_header X-Upstream $upstream_addr always;')
    assert 'add_header' in conf and '127.0.0.1:%d' % listen in conf, conf
    return conf


def recipe_command(host, nginx_side):
    """The page's command line, for the probe app on ``host``."""
    (line,) = [text for text in snippet(SECTION, 'sh').splitlines() if 'flupfast' in text]
    argv = shlex.split(line.replace('10.0.1.2', host).replace('10.0.1.1', nginx_side))
    assert argv[:3] == ['python', '-m', 'flupfast'], argv
    return [sys.executable] + argv[1:3] + ['tests.apps.probe:app'] + argv[4:]


def ip(*args, check=True):
    return subprocess.run(['ip', *args], check=check, capture_output=True, text=True, timeout=30)


class Namespaces:
    """Two network namespaces, each with a veth pair to this one: host i is 10.N.i.2, this
    side 10.N.i.1. Unique names per test run; ``remove`` deletes all it made."""

    def __init__(self):
        tag = '%d%d' % (os.getpid() % 10000, random.randrange(100))
        used = ip('-4', 'addr').stdout
        self.net = next(n for n in random.sample(range(100, 250), 150)
                        if ' 10.%d.' % n not in used)
        self.names, self.links = [], []
        for i in (1, 2):
            ns, host, peer = 'ffs%s-%d' % (tag, i), 'vfh%s%d' % (tag, i), 'vfn%s%d' % (tag, i)
            ip('netns', 'add', ns)
            self.names.append(ns)
            ip('link', 'add', host, 'type', 'veth', 'peer', 'name', peer)
            self.links.append(host)
            ip('link', 'set', peer, 'netns', ns)
            ip('addr', 'add', '10.%d.%d.1/24' % (self.net, i), 'dev', host)
            ip('link', 'set', host, 'up')
            for args in (('addr', 'add', '10.%d.%d.2/24' % (self.net, i), 'dev', peer),
                         ('link', 'set', peer, 'up'), ('link', 'set', 'lo', 'up')):
                ip('netns', 'exec', ns, 'ip', *args)

    def host(self, i):
        return '10.%d.%d.2' % (self.net, i)

    def remove(self):
        for link in self.links:
            ip('link', 'del', link, check=False)  # takes its peer with it
        for ns in self.names:
            ip('netns', 'del', ns, check=False)


def test_two_hosts_behind_nginx_lose_only_the_killed_hosts_requests_in_flight():
    require(NGINX, 'nginx')
    require_root()
    if subprocess.run(['ip', 'netns', 'list'], capture_output=True).returncode != 0:
        pytest.skip('no network namespaces here')
    root = make_tempdir('scale-out')
    (root / 'tmp').mkdir()
    processes = []
    namespaces = Namespaces()
    try:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        backends = []
        for i in (1, 2):
            backend = ManagedProcess(
                'backend%d' % i,
                ['ip', 'netns', 'exec', namespaces.names[i - 1]] + recipe_command(
                    namespaces.host(i), '10.%d.%d.1' % (namespaces.net, i)),
                env=env, cwd=str(REPO), log_dir=root)
            processes.append(backend)
            backends.append(backend)
        for i, backend in enumerate(backends, 1):

            def serving():
                assert backend.alive(), backend.describe()
                return 'serving' in backend.output.read_text(errors='replace')
            wait_until(serving, 30, interval=0.1,
                       what=lambda: "the 'serving' line\n" + backend.describe())
        listen = free_port()
        processes.append(launch_nginx(root, nginx_config(root, recipe_config(
            [namespaces.host(1), namespaces.host(2)], listen)), [listen]))

        stop = threading.Event()
        results = []  # (started, ended, status, upstream_addr)

        def client():
            conn = http.client.HTTPConnection('127.0.0.1', listen, timeout=60)
            while not stop.is_set():
                started = time.monotonic()
                try:
                    conn.request('GET', '/sleep?ms=50')
                    resp = conn.getresponse()
                    resp.read()
                    results.append((started, time.monotonic(), resp.status,
                                    resp.getheader('X-Upstream', '')))
                except (OSError, http.client.HTTPException) as exc:
                    results.append((started, time.monotonic(), type(exc).__name__, ''))
                    conn.close()
                    conn = http.client.HTTPConnection('127.0.0.1', listen, timeout=60)
            conn.close()

        threads = [threading.Thread(target=client, daemon=True) for _ in range(CLIENTS)]
        for thread in threads:
            thread.start()
        time.sleep(2)
        killed = namespaces.host(1)
        kill_time = time.monotonic()
        os.kill(backends[0].pid, signal.SIGKILL)
        time.sleep(1)
        os.kill(backends[1].pid, signal.SIGHUP)
        time.sleep(3)
        stop.set()
        for thread in threads:
            thread.join(60)

        in_flight = [r for r in results if r[0] < kill_time < r[1] and killed in r[3]]
        failed = [r for r in results if r[2] != 200]
        unexplained = [r for r in failed if r not in in_flight]
        served_by = {host: sum(r[3].endswith(host + ':%d' % PORT) for r in results
                               if r[2] == 200) for host in (killed, namespaces.host(2))}
        report = ('%d requests, %d in flight on the killed host, %d failed (%d beyond those); '
                  'answered by host: %s' % (len(results), len(in_flight), len(failed),
                                            len(unexplained), served_by))
        print(report)
        assert not unexplained, report + '\n%s' % unexplained[:5]
        assert len(failed) <= len(in_flight) <= CLIENTS, report
        assert served_by[killed] > 0 and served_by[namespaces.host(2)] > 0, report
        after = [r for r in results if r[0] > kill_time + 0.5]
        assert after and all(r[2] == 200 for r in after), report
        log = backends[1].output.read_text(errors='replace')
        assert 'reloading: ' in log and log.count(' serving ') == 2, backends[1].describe()
        assert backends[1].alive()
    finally:
        for process in reversed(processes):
            process.stop()
        namespaces.remove()
        remove_tempdir(root)
