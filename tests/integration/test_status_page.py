"""The status page (--status-path) served for real: behind nginx (FastCGI) in thread and fork
mode, every pool field, accepted conn counting the requests sent, one ?full entry per worker
(the fork children's pids, the pool threads' ids), the slow log's count across children; over
SCGI and AJP13 through the in-repo client; read by a PHP-FPM agent's parser (Datadog's php_fpm
check's FastCGI request and field reads); and the ?html page rendered by headless Chromium.
"""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from flupfast.ops.status import POOL_FIELDS, PROCESS_FIELDS
from tests.html_tables import Tables
from tests.integration.backend_process import free_port
from tests.integration.peers import (
    IO_TIMEOUT, REPO, ManagedProcess, make_tempdir, remove_tempdir, require,
    wait_until_connectable)
from tests.integration.test_ops import WAIT, Stack
from tests.waiting import wait_until

pytestmark = pytest.mark.peer

CHROMIUM = shutil.which('chromium') or '/usr/bin/chromium'


@pytest.fixture
def stack():
    made = []

    def start(mode, *options):
        made.append(Stack(mode, ['--status-path', '/fpm-status'] + list(options)))
        return made[-1]
    yield start
    for one in made:
        one.stop()


def status_json(one, query='json'):
    code, headers, body = one.get('/fpm-status?' + query)
    assert code == 200 and headers['Content-Type'] == 'application/json', body
    return json.loads(body)


def children_of(pid):
    out = subprocess.run(['ps', '-o', 'pid=', '--ppid', str(pid)], capture_output=True,
                         text=True, timeout=IO_TIMEOUT).stdout
    return {int(line) for line in out.split()}


def threads_of(pid):
    return {int(tid) for tid in os.listdir('/proc/%d/task' % pid)}


@pytest.mark.parametrize('mode', ['thread', 'fork'])
def test_pool_fields_and_accepted_conn_behind_nginx(stack, mode):
    one = stack(mode)
    sent = 12
    for _ in range(sent):
        assert one.get('/')[0] == 200
    data = status_json(one)
    assert list(data) == list(POOL_FIELDS)
    assert data['accepted conn'] >= sent
    assert data['pool'] == 'flupfast' and data['process manager'] == 'dynamic'
    assert data['active processes'] >= 1  # the status request itself, as PHP-FPM counts it
    assert data['total processes'] == data['idle processes'] + data['active processes'] >= 1
    assert data['max active processes'] >= 1
    assert data['start since'] >= 0 and data['start time'] <= time.time()
    # A Unix socket: PHP-FPM reads the listen queue from TCP_INFO, which it has not.
    assert (data['listen queue'], data['listen queue len']) == (0, 0)
    assert status_json(one)['accepted conn'] > data['accepted conn']
    # Prometheus scrapes ?openmetrics through the same route: PHP-FPM's metrics.
    parser = pytest.importorskip('prometheus_client.parser')
    code, headers, body = one.get('/fpm-status?openmetrics')
    assert code == 200 and headers['Content-Type'].startswith('application/openmetrics-text')
    metrics = {family.name: family.samples[0].value
               for family in parser.text_string_to_metric_families(body.decode())}
    assert metrics['phpfpm_up'] == 1 and metrics['phpfpm_accepted_connections'] >= sent + 2


@pytest.mark.parametrize('mode', ['thread', 'fork'])
def test_full_lists_one_process_per_worker(stack, mode):
    one = stack(mode)
    for _ in range(6):
        assert one.get('/')[0] == 200
    data = status_json(one, 'json&full')
    processes = data['processes']
    assert len(processes) == data['total processes'] >= 1
    for entry in processes:
        assert list(entry) == list(PROCESS_FIELDS)
        assert entry['state'] in ('Idle', 'Running')
    running = [p for p in processes if p['state'] == 'Running']
    assert [p['request uri'] for p in running] == ['/fpm-status?json&full']
    assert sum(p['requests'] for p in processes) + len(running) <= data['accepted conn']
    pids = {p['pid'] for p in processes}
    if mode == 'fork':
        assert pids <= children_of(one.backend.pid)  # the children themselves
    else:
        assert pids <= threads_of(one.backend.pid)   # the pool's threads (kernel ids)
    assert len(pids) == len(processes)
    served = [p for p in processes if p['requests']]
    assert served and all(p['request method'] == 'GET' and p['last request memory'] > 0
                          for p in served if p['state'] == 'Idle')


def test_replaced_children_keep_their_counts_and_leave_the_list(stack):
    one = stack('fork', '--max-requests', '2')
    sent = 10
    for _ in range(sent):
        assert one.get('/')[0] == 200
    assert status_json(one)['accepted conn'] >= sent + 1  # the gone children's too
    # Only live children are listed. The child that answers may leave right after (its
    # second request): asked again, another answers.
    wait_until(lambda: {p['pid'] for p in status_json(one, 'json&full')['processes']}
               <= children_of(one.backend.pid), WAIT, interval=0.05)


@pytest.mark.parametrize('mode', ['thread', 'fork'])
def test_slow_requests_come_from_the_slow_log(stack, mode):
    one = stack(mode, '--slow-log', '0.5')
    assert one.get('/sleep?ms=1500')[0] == 200
    assert one.get('/sleep?ms=10')[0] == 200
    wait_until(lambda: status_json(one)['slow requests'] == 1, WAIT, interval=0.05)


class Backend:
    """flupfast alone on TCP (no web server), for the in-repo client and agents' parsers."""

    def __init__(self, protocol, mode):
        self.root = make_tempdir('status')
        self.port = free_port()
        self.proc = ManagedProcess(
            'backend', [sys.executable, '-m', 'flupfast', 'tests.apps.probe:app', '--protocol',
                        protocol, '--mode', mode, '--bind', '127.0.0.1:%d' % self.port,
                        '--status-path', '/fpm-status'],
            env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=str(REPO), log_dir=self.root)
        wait_until_connectable(('127.0.0.1', self.port), self.proc)
        self.protocol = protocol

    def client(self, path):
        """``python -m flupfast.client``'s answer: (status line, body)."""
        out = subprocess.run([sys.executable, '-m', 'flupfast.client', self.protocol,
                              '127.0.0.1:%d' % self.port, path], capture_output=True,
                             timeout=IO_TIMEOUT * 2, cwd=str(REPO),
                             env=dict(os.environ, PYTHONPATH=str(REPO)))
        assert out.returncode == 0, out.stderr
        head, _, body = out.stdout.partition(b'\r\n\r\n')
        return head.split(b'\r\n')[0], body

    def stop(self):
        self.proc.stop()
        remove_tempdir(self.root)


@pytest.fixture
def backend():
    made = []

    def start(protocol, mode):
        made.append(Backend(protocol, mode))
        return made[-1]
    yield start
    for one in made:
        one.stop()


@pytest.mark.parametrize('protocol', ['scgi', 'ajp'])
@pytest.mark.parametrize('mode', ['thread', 'fork'])
def test_scgi_and_ajp_answer_the_status_page(backend, protocol, mode):
    one = backend(protocol, mode)
    for _ in range(4):
        assert one.client('/')[0] == b'Status: 200 OK'
    status_line, body = one.client('/fpm-status?json&full')
    assert status_line == b'Status: 200 OK'
    data = json.loads(body)
    assert list(data) == list(POOL_FIELDS) + ['processes']
    assert data['accepted conn'] >= 5
    assert len(data['processes']) == data['total processes']
    # TCP: the listen queue is read (TCP_INFO); its length is the listen() backlog.
    assert data['listen queue len'] > 0


# Datadog's php_fpm check (integrations-core php_fpm/datadog_checks/php_fpm/php_fpm.py): with
# use_fastcgi it sends this environ through flup's FCGIApp and reads these fields with int().
DATADOG_GAUGES = ('listen queue', 'idle processes', 'active processes', 'total processes')
DATADOG_COUNTS = ('accepted conn', 'max children reached', 'slow requests')


def datadog_request_fastcgi(port, route, query=''):
    """The check's ``request_fastcgi`` for a TCP url: flup's FCGIApp (flupfast's, here), its
    environ, the first chunk of the answer."""
    from io import StringIO

    from flupfast.client.fcgi_app import FCGIApp
    fcgi = FCGIApp(host='127.0.0.1', port=str(port))
    fcgi._environPrefixes.extend(('DOCUMENT_', 'SCRIPT_'))
    env = {'CONTENT_LENGTH': '0', 'CONTENT_TYPE': '', 'DOCUMENT_ROOT': '/',
           'GATEWAY_INTERFACE': 'FastCGI/1.1', 'QUERY_STRING': query, 'REDIRECT_STATUS': '200',
           'REMOTE_ADDR': '127.0.0.1', 'REMOTE_PORT': '80', 'REQUEST_METHOD': 'GET',
           'REQUEST_URI': route, 'SCRIPT_FILENAME': route, 'SCRIPT_NAME': route,
           'SERVER_ADDR': '127.0.0.1', 'SERVER_NAME': '127.0.0.1', 'SERVER_PORT': str(port),
           'SERVER_PROTOCOL': 'HTTP/1.1', 'SERVER_SOFTWARE': 'datadog-php-fpm',
           'wsgi.errors': StringIO(), 'wsgi.input': StringIO()}
    return b''.join(fcgi(env, lambda *args, **kwargs: ''))


def parse_text_status(text):
    """PHP-FPM's plain page as its exporters read it: "name: value" lines; the pool first,
    then one block per process after each line of 24 asterisks."""
    blocks = text.split('\n' + '*' * 24 + '\n')
    parsed = []
    for block in blocks:
        fields = {}
        for line in block.strip('\n').split('\n'):
            name, sep, value = line.partition(':')
            assert sep and line[22:23] != ' ' and len(name) < 22, line
            fields[name] = value.strip()
        parsed.append(fields)
    return parsed[0], parsed[1:]


@pytest.mark.parametrize('mode', ['thread', 'fork'])
def test_a_php_fpm_agent_reads_the_page(backend, mode):
    one = backend('fcgi', mode)
    for _ in range(3):
        assert one.client('/')[0] == b'Status: 200 OK'
    data = json.loads(datadog_request_fastcgi(one.port, '/fpm-status', 'json'))
    metrics = {key: int(data[key]) for key in DATADOG_GAUGES + DATADOG_COUNTS}
    assert metrics['accepted conn'] >= 4 and metrics['total processes'] >= 1
    assert data.get('pool', 'default') == 'flupfast'
    pool, processes = parse_text_status(
        datadog_request_fastcgi(one.port, '/fpm-status', 'full').decode())
    assert list(pool) == list(POOL_FIELDS)
    assert int(pool['accepted conn']) >= metrics['accepted conn'] + 1
    assert len(processes) == int(pool['total processes'])
    for entry in processes:
        assert [n.lower() for n in entry] == list(PROCESS_FIELDS)
        float(entry['last request cpu'])
        int(entry['request duration'])


def chromium(*args, home):
    return subprocess.run([CHROMIUM, '--headless', '--no-sandbox', '--disable-gpu',
                           '--user-data-dir=%s' % (home / 'profile')] + list(args),
                          capture_output=True, timeout=90, env=dict(os.environ, HOME=str(home)))


@pytest.mark.parametrize('mode', ['thread', 'fork'])
def test_html_page_renders_in_headless_chromium(stack, mode, tmp_path):
    require(CHROMIUM, 'chromium')
    one = stack(mode)
    assert one.get('/')[0] == 200
    url = 'http://127.0.0.1:%d/fpm-status?html&full' % one.port
    dom = chromium('--dump-dom', url, home=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = Tables()
    page.feed(dom.stdout.decode('utf-8', 'replace'))
    assert len(page.tables) == 2, dom.stdout[:2000]
    pool, processes = page.tables
    assert [row[0] for row in pool] == list(POOL_FIELDS)
    assert int(dict(pool)['accepted conn']) >= 2
    assert processes[0] == list(PROCESS_FIELDS)
    assert len(processes) - 1 == int(dict(pool)['total processes'])
    assert any(row[PROCESS_FIELDS.index('request uri')] == '/fpm-status?html&amp;full' or
               row[PROCESS_FIELDS.index('request uri')] == '/fpm-status?html&full'
               for row in processes[1:])
    shot = tmp_path / ('fpm-status-%s.png' % mode)
    done = chromium('--screenshot=%s' % shot, '--window-size=1400,900', url, home=tmp_path)
    assert done.returncode == 0 and shot.stat().st_size > 1000, done.stderr[-2000:]
