"""Process titles behind real nginx (FastCGI): while a request is held inside the app (a FIFO
it blocks on: the proof is an event, not a sleep), /proc/PID/cmdline of the fork-mode child
serving it says ``busy GET /hold...``, its idle siblings ``idle`` and the parent ``master``;
thread mode's one process is the master. ``--no-proctitle`` leaves the command line alone.
"""
import os
import threading

import pytest

from tests.integration.test_ops import WAIT, stack_fixture
from tests.waiting import wait_until

pytestmark = pytest.mark.peer
pytest.importorskip('setproctitle')

APP = 'tests.apps.stuck:app'


stack = stack_fixture(APP)


def title(pid):
    with open('/proc/%d/cmdline' % pid, 'rb') as f:
        return f.read().rstrip(b'\0').decode('utf-8', 'replace')


def children(pid):
    found = []
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                with open('/proc/%s/stat' % entry) as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(')', 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


class Held:
    """A request held in the app until ``release()``."""

    def __init__(self, one):
        self.folder = one.root / 'hold'
        self.folder.mkdir()
        os.mkfifo(self.folder / 'release')
        self.answer = []
        self.path = '/hold?dir=%s' % self.folder
        self.thread = threading.Thread(
            target=lambda: self.answer.append(one.get(self.path)), daemon=True)
        self.thread.start()

    def arrived(self):
        """The pid of the process holding it, once it is inside the app."""
        wait_until(lambda: any(n.startswith('arrived-') for n in os.listdir(self.folder)), WAIT)
        [name] = [n for n in os.listdir(self.folder) if n.startswith('arrived-')]
        return int(name.split('-')[1])

    def release(self):
        with open(self.folder / 'release', 'w') as fifo:
            fifo.write('go\n')
        self.thread.join(30)
        assert self.answer and self.answer[0][2] == b'released\n'


def test_fork_mode_titles(stack):
    one = stack('fork', '--min-spare', '2', '--max-spare', '3')
    master = one.backend.pid
    held = Held(one)
    try:
        worker = held.arrived()
        assert title(master) == 'flupfast: master [%s]' % APP
        busy = title(worker)
        assert busy.startswith('flupfast: worker ') and busy.endswith(
            ' [%s] busy GET %s' % (APP, held.path)), busy
        wait_until(lambda: any(title(pid).endswith(' [%s] idle' % APP)
                               for pid in children(master) if pid != worker), WAIT)
    finally:
        held.release()
    wait_until(lambda: title(worker) == busy.split(' busy ')[0] + ' idle', WAIT)


def test_thread_mode_title_is_the_master(stack):
    one = stack('thread')
    held = Held(one)
    try:
        assert held.arrived() == one.backend.pid
        assert title(one.backend.pid) == 'flupfast: master [%s]' % APP
    finally:
        held.release()


def test_no_proctitle_leaves_the_command_line(stack):
    one = stack('fork', '--no-proctitle')
    held = Held(one)
    try:
        worker = held.arrived()
        for pid in (worker, one.backend.pid):
            assert title(pid).split('\0')[1:3] == ['-m', 'flupfast'], title(pid)
    finally:
        held.release()
