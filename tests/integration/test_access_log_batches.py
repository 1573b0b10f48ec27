"""The access log's batches through a real server (``python -m flupfast``, FastCGI, our
client): every line is written, whole and in each process's order, after a burst that then
idles, and when the process that kept them ends: a child recycled by --max-requests, a
graceful stop, a child's SIGTERM, the request timeout's exit. The exit cases run with a flush
delay no test waits for, so only the exit's own write can bring the lines."""
import os
import re
import signal
import socket
import subprocess

import pytest

from tests.fcgi_client import read_response, request_bytes, roundtrip
from tests.integration.backend_process import server_factory  # noqa: F401  (a fixture)
from tests.waiting import wait_until

TIMEOUT = 15.0
# python -c SCRIPT DELAY ARGS...: the CLI with access_log.FLUSH_DELAY set to DELAY.
SCRIPT = ('import sys; from flupfast.ops import access_log; '
          'access_log.FLUSH_DELAY = float(sys.argv.pop(1)); '
          'from flupfast.__main__ import main; sys.exit(main(sys.argv[1:]))')
NEVER = '3600'


def children_of(pid):
    out = subprocess.run(['ps', '-o', 'pid=', '--ppid', str(pid)], capture_output=True,
                         text=True, timeout=TIMEOUT).stdout
    return {int(line) for line in out.split()}


class Logged:
    """A server with ``--access-log`` (format ``<pid> URI``) and a flush delay."""

    def __init__(self, factory, tmp_path, backend, delay, mode, *extra):
        self.path = tmp_path / 'access.log'
        self.address = str(tmp_path / 'fcgi.sock')
        speedups = '1' if backend.name == 'cy' else '0'
        self.server = factory([delay, 'tests.apps.probe:app', '--mode', mode, '--bind',
                               'unix:' + self.address, '--no-proctitle', '--access-log',
                               str(self.path), '--access-log-format', '%(p)s %(U)s']
                              + list(extra), self.address, script=SCRIPT,
                              env={'FLUPFAST_SPEEDUPS': speedups},
                              log_path=str(tmp_path / 'server.log'))

    def lines(self):
        if not self.path.exists():
            return []
        text = self.path.read_text()
        assert text == '' or text.endswith('\n')  # whole lines only
        lines = text.splitlines()
        for line in lines:
            assert re.fullmatch(r'<\d+> /\S*', line), line
        return lines

    def uris(self):
        return [line.split(' ', 1)[1] for line in self.lines()]

    def by_process(self):
        """{pid: [uri, ...]} in the order each process wrote them."""
        seen = {}
        for line in self.lines():
            pid, uri = line.split(' ', 1)
            seen.setdefault(pid, []).append(uri)
        return seen


def in_order(logged, expected):
    """Every expected URI once, and each process's in the order they were sent."""
    if sorted(logged.uris()) != sorted(expected):
        return False
    rank = {uri: n for n, uri in enumerate(expected)}
    return all([rank[u] for u in uris] == sorted(rank[u] for u in uris)
               for uris in logged.by_process().values())


def send(address, uris):
    for uri in uris:
        assert roundtrip(address, uri).end is not None


def send_kept(address, uris):
    """The requests on one FastCGI KEEP_CONN connection, one after another."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(TIMEOUT)
        sock.connect(address)
        for uri in uris:
            sock.sendall(request_bytes(uri, keep_conn=True))
            assert read_response(sock).end is not None


@pytest.mark.parametrize('mode', ['thread', 'fork'])
def test_a_burst_is_written_once_the_server_idles(server_factory, tmp_path, backend, mode):
    one = Logged(server_factory, tmp_path, backend, '0.2', mode)
    uris = ['/n%d' % n for n in range(300)]
    send_kept(one.address, uris)
    wait_until(lambda: len(one.lines()) >= len(uris), TIMEOUT)  # no stop, no further request
    assert one.uris() == uris


def test_children_recycled_by_max_requests_write_every_line(server_factory, tmp_path,
                                                            backend):
    one = Logged(server_factory, tmp_path, backend, NEVER, 'fork', '--max-requests', '3',
                 '--max-children', '2', '--min-spare', '1', '--max-spare', '2')
    uris = ['/n%d' % n for n in range(12)]
    send(one.address, uris)
    # Every child but the ones still serving has ended: their lines are there, in order.
    wait_until(lambda: len(one.lines()) >= 9, TIMEOUT)
    one.server.stop()
    assert in_order(one, uris), one.lines()
    assert len(one.by_process()) >= 4  # four children served three each


@pytest.mark.parametrize('mode', ['thread', 'fork'])
def test_a_graceful_stop_writes_every_line(server_factory, tmp_path, backend, mode):
    one = Logged(server_factory, tmp_path, backend, NEVER, mode)
    uris = ['/n%d' % n for n in range(20)]
    send(one.address, uris)
    send_kept(one.address, ['/k%d' % n for n in range(20)])
    assert one.lines() == []  # kept in the processes
    one.server.stop()  # SIGTERM to the server
    assert in_order(one, uris + ['/k%d' % n for n in range(20)]), one.lines()


def test_a_child_ended_by_sigterm_writes_its_lines(server_factory, tmp_path, backend):
    one = Logged(server_factory, tmp_path, backend, NEVER, 'fork', '--max-children', '1',
                 '--min-spare', '1', '--max-spare', '1')
    uris = ['/n%d' % n for n in range(10)]
    send(one.address, uris)
    (child,) = children_of(one.server.proc.pid)
    assert one.lines() == []
    os.kill(child, signal.SIGTERM)
    wait_until(lambda: len(one.lines()) == len(uris), TIMEOUT)
    assert one.uris() == uris and one.lines()[0].startswith('<%d> ' % child)
    # The child died of SIGTERM as before (the parent says so and replaces it).
    wait_until(lambda: 'killed by signal %d' % signal.SIGTERM in one.server.log(), TIMEOUT)
    wait_until(lambda: len(children_of(one.server.proc.pid) - {child}) == 1, TIMEOUT)


def test_the_request_timeout_exit_writes_the_lines_before(server_factory, tmp_path, backend):
    one = Logged(server_factory, tmp_path, backend, NEVER, 'fork', '--max-children', '1',
                 '--min-spare', '1', '--max-spare', '1', '--request-timeout', '1')
    send(one.address, ['/a', '/b'])
    assert roundtrip(one.address, '/sleep?ms=8000').end is None  # the child ended under it
    wait_until(lambda: one.uris() == ['/a', '/b'], TIMEOUT)
    wait_until(lambda: 'ended by the request timeout' in one.server.log(), TIMEOUT)


@pytest.mark.parametrize('mode', ['thread', 'fork'])
def test_a_sighup_reload_writes_the_lines_before_it(server_factory, tmp_path, backend, mode):
    """SIGHUP executes the command again: the lines the old image kept are written first."""
    one = Logged(server_factory, tmp_path, backend, NEVER, mode)
    uris = ['/n%d' % n for n in range(10)]
    send(one.address, uris)
    assert one.lines() == []
    one.server.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: one.server.log().count('serving') == 2, TIMEOUT)  # the new image listens
    assert in_order(one, uris), one.lines()
    send(one.address, ['/after'])  # the new image logs (its flush delay is the default)
    wait_until(lambda: one.uris()[-1:] == ['/after'], TIMEOUT)
