"""The operations features behind real nginx (FastCGI), thread and fork mode: the ping path
answers without the app, the access log has one well-formed line per request (and survives a
logrotate-style rename), and a request running past --slow-log leaves its Python stack.
"""
import http.client
import os
import re
import sys
import time

import pytest

from tests.integration.backend_process import free_port
from tests.integration.nginx import launch_nginx
from tests.integration.peers import (
    IO_TIMEOUT, NGINX, REPO, ManagedProcess, make_tempdir, nginx_config, remove_tempdir,
    require, require_root, wait_until_connectable)
from tests.waiting import wait_until

pytestmark = pytest.mark.peer
WAIT = 10.0  # for what the server logs or counts after an answer (these tests and others)

HTTP = """\
    server {{
        listen 127.0.0.1:{port};
        location / {{
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_NAME "";
            fastcgi_param PATH_INFO $fastcgi_script_name;
            fastcgi_pass unix:{sock};
        }}
    }}
"""

# The combined format, as nginx writes it: host, -, user, [time], "request", status, bytes,
# "referer", "user agent".
COMBINED = re.compile(r'^(\S+) - (\S+) \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\] '
                      r'"(\S+) (\S+) (HTTP/1\.[01])" (\d{3}) (\d+|-) "([^"]*)" "([^"]*)"$')


class Stack:
    def __init__(self, mode, options, app='tests.apps.probe:app'):
        require(NGINX, 'nginx')
        require_root()
        self.root = make_tempdir('ops')
        (self.root / 'tmp').mkdir()
        self.access_log = self.root / 'flupfast-access.log'  # nginx writes access.log
        sock = self.root / 'app.sock'
        self.port = free_port()
        self.processes = []
        self.backend = ManagedProcess(
            'backend', [sys.executable, '-m', 'flupfast', app, '--mode', mode,
                        '--bind', 'unix:%s' % sock, '--socket-mode', '666'] + [
                o.format(access_log=self.access_log) for o in options],
            env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=str(REPO), log_dir=self.root)
        self.processes.append(self.backend)
        wait_until_connectable(str(sock), self.backend)
        self.processes.append(launch_nginx(
            self.root, nginx_config(self.root, HTTP.format(port=self.port, sock=sock)),
            [self.port]))

    def get(self, path, headers=None):
        conn = http.client.HTTPConnection('127.0.0.1', self.port, timeout=IO_TIMEOUT)
        try:
            conn.request('GET', path, headers=dict({'Host': 'localhost'}, **(headers or {})))
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def log(self):
        return self.backend.output.read_text(errors='replace')

    def stop(self):
        for process in reversed(self.processes):
            process.stop()
        remove_tempdir(self.root)


def stack_fixture(app='tests.apps.probe:app'):
    """A test's ``stack``: ``stack(mode, *options)`` starts a Stack serving ``app``; every one
    started is stopped after the test."""
    @pytest.fixture
    def stack():
        made = []

        def start(mode, *options):
            made.append(Stack(mode, list(options), app=app))
            return made[-1]
        yield start
        for one in made:
            one.stop()
    return stack


stack = stack_fixture()


@pytest.mark.parametrize('mode', ['thread', 'fork'])
def test_ping_answers_pong_without_the_app(stack, mode):
    one = stack(mode, '--ping-path', '/ping')
    status, headers, body = one.get('/ping')
    assert (status, body) == (200, b'pong')
    assert headers['Cache-Control'].startswith('no-cache')
    assert one.get('/')[2] == b'Hello world!\n'  # everything else reaches the app
    assert one.get('/ping/more')[0] == 404       # the probe app's answer: not the ping


@pytest.mark.parametrize('mode', ['thread', 'fork'])
def test_access_log_has_one_combined_line_per_request(stack, mode):
    one = stack(mode, '--access-log', '{access_log}')
    requests = [('/', 200, '13'), ('/error', 500, None), ('/nothing-here', 404, None),
                ('/environ?x=1', 200, None)]
    for path, status, _ in requests:
        assert one.get(path, {'User-Agent': 'probe/1', 'Referer': 'http://r/'})[0] == status
    wait_until(lambda: one.access_log.read_text().count('\n') == len(requests), WAIT)
    # Fork mode: each child writes its lines in batches, so lines of different children may
    # come in another order than the requests (docs/deployment.md, "Access log").
    lines = {}
    for line in one.access_log.read_text().splitlines():
        match = COMBINED.match(line)
        assert match, line
        lines[match.group(4)] = match.groups()
    assert sorted(lines) == sorted(path for path, _, _ in requests)
    for path, status, size in requests:
        host, user, method, uri, proto, logged, sent, referer, agent = lines[path]
        assert (method, uri, int(logged), referer, agent) == ('GET', path, status, 'http://r/',
                                                                'probe/1')
        if size is not None:
            assert sent == size


def test_access_log_reopens_after_rotation(stack):
    one = stack('fork', '--access-log', '{access_log}', '--access-log-format', '%(U)s %(s)s %(D)s')
    assert one.get('/')[0] == 200
    wait_until(lambda: one.access_log.exists() and one.access_log.read_text(), WAIT)
    os.rename(one.access_log, one.access_log.with_suffix('.1'))  # logrotate's default move
    time.sleep(1.2)  # the server notices within a second
    for _ in range(3):
        assert one.get('/environ')[0] == 200
        time.sleep(0.4)
    wait_until(lambda: one.access_log.exists() and '/environ 200' in
               one.access_log.read_text(), WAIT)
    rotated = one.access_log.with_suffix('.1').read_text()
    assert rotated.startswith('/ 200 ') and re.fullmatch(r'/ 200 \d+\n(/environ 200 \d+\n)*',
                                                          rotated), rotated


@pytest.mark.parametrize('mode', ['thread', 'fork'])
def test_slow_log_shows_the_stack_of_a_slow_request(stack, mode):
    one = stack(mode, '--slow-log', '0.5')
    assert one.get('/sleep?ms=1500')[0] == 200
    assert one.get('/sleep?ms=10')[0] == 200  # a quick one is not logged
    wait_until(lambda: 'slow request' in one.log(), WAIT)
    log = one.log()
    assert log.count('slow request: ') == 1, log
    assert re.search(r'slow request: GET /sleep\?ms=1500 running for \d\.\d s \(pid \d+, thread '
                     r'\d+\)', log), log
    assert 'in app' in log and 'time.sleep' in log  # the app's frame, at the line it waits on
