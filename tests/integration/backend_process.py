"""Servers under test as subprocesses: a free port, waiting until they listen, and stopping
them by PID (SIGTERM, SIGKILL after a bound), with their stderr for assertions."""
import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile

import pytest

from tests.waiting import wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# Ports this test process has handed out. The kernel may give a port that was free a moment ago
# to the next bind(0) as well: servers started together (their ports picked before any of them
# binds) would then collide with "Address already in use".
_given_ports = set()
_random = random.SystemRandom()  # not the seeded ``random``: parallel runs must not agree
# Test runs side by side on one machine (CI's repeat-under-load, several checkouts) claim each
# port they hand out with a lock on that byte of one shared file: held until the process ends
# (the kernel drops a dead process's record locks), so no other run hands it out meanwhile.
_CLAIMS_PATH = os.path.join(tempfile.gettempdir(), 'flupfast-test-ports.lock')
_claims_fd = None  # the claims file, opened at the first claim and kept open (it holds them)


def _claim(port):
    """Whether this process now holds ``port`` against other test processes."""
    global _claims_fd
    if _claims_fd is None:
        _claims_fd = os.open(_CLAIMS_PATH, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.lockf(_claims_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
        return True
    except OSError:
        return False


def _ephemeral_low():
    """The lowest port of the kernel's ephemeral range, or None."""
    try:
        with open('/proc/sys/net/ipv4/ip_local_port_range') as ports:
            return int(ports.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def free_port(host='127.0.0.1'):
    """A TCP port free on ``host`` now, not handed out before by this process nor held by
    another test process. Picked below the kernel's ephemeral range: a port in it can be
    taken, between our check and the server's bind, as the source port of any process's
    outgoing connection (a front's to its backend, a client's)."""
    low = _ephemeral_low()
    family = socket.AF_INET6 if ':' in host else socket.AF_INET
    for _ in range(500):
        if low is not None and low > 4096:
            port = _random.randrange(max(1024, low - 12000), low)
        else:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                port = sock.getsockname()[1]
        if port in _given_ports or not _claim(port):
            continue
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            # As the servers bind (all set SO_REUSEADDR): a TIME_WAIT left on it is no obstacle.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _given_ports.add(port)
        return port
    raise RuntimeError('no free TCP port on %s' % host)


def wait_connectable(address, proc, timeout=15):
    if isinstance(address, str):
        family = socket.AF_UNIX
    else:
        family = socket.AF_INET6 if ':' in address[0] else socket.AF_INET

    def connectable():
        if proc.poll() is not None:
            raise AssertionError('server exited: %s' % proc.stderr.read().decode())
        try:
            with socket.socket(family) as sock:
                sock.connect(address)
                return True
        except OSError:
            return False
    wait_until(connectable, timeout, interval=0.05, what='the server to listen on %r' % (address,))


class Server:
    """A server subprocess, stopped by PID with SIGTERM (SIGKILL after a bound).

    ``command`` replaces the whole command line (``python -m flupfast`` + ``args`` by default),
    run in ``cwd`` (the repository by default);
    ``log_path`` sends stderr to that file instead of a pipe, so a long-lived, chatty server
    cannot block on a full pipe, and ``log()`` can be read while it runs (``proc.stderr`` then
    reads the file). ``wait=False`` returns at once; call ``wait_ready()`` later (to start
    several servers side by side).
    """

    def __init__(self, args, address, env=None, script=None, command=None, log_path=None,
                 wait=True, cwd=ROOT):
        full_env = dict(os.environ, PYTHONPATH=ROOT)
        full_env.update(env or {})
        cmd = command or [sys.executable] + (
            ['-c', script] if script else ['-m', 'flupfast']) + args
        self.log_path = log_path
        if log_path:
            with open(log_path, 'wb') as log_file:
                self.proc = subprocess.Popen(cmd, cwd=cwd, env=full_env, stderr=log_file)
            self.proc.stderr = open(log_path, 'rb')  # what stop() returns: the log from its start
        else:
            self.proc = subprocess.Popen(cmd, cwd=cwd, env=full_env, stderr=subprocess.PIPE)
        self.address = address
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout=15):
        try:
            wait_connectable(self.address, self.proc, timeout)
        except BaseException:
            self.proc.kill()  # never leave a server behind when it fails to start
            self.proc.wait(10)
            self.proc.stderr.close()
            raise

    def log(self):
        """With ``log_path``: everything the server wrote to stderr so far."""
        with open(self.log_path, 'rb') as log_file:
            return log_file.read().decode(errors='replace')

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError('server ignored SIGTERM for 10 s') from None
        return self.proc.stderr.read().decode()


@pytest.fixture
def server_factory():
    servers = []

    def start(*args, **kw):
        server = Server(*args, **kw)
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.stop()
