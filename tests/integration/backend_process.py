"""Servers under test as subprocesses: a free port, waiting until they listen, and stopping
them by PID (SIGTERM, SIGKILL after a bound), with their stderr for assertions."""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def wait_connectable(address, proc, timeout=15):
    if isinstance(address, str):
        family = socket.AF_UNIX
    else:
        family = socket.AF_INET6 if ':' in address[0] else socket.AF_INET
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError('server exited: %s' % proc.stderr.read().decode())
        try:
            with socket.socket(family) as sock:
                sock.connect(address)
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError('server did not listen on %r' % (address,))


class Server:
    """A server subprocess, stopped by PID with SIGTERM (SIGKILL after a bound)."""

    def __init__(self, args, address, env=None, script=None):
        full_env = dict(os.environ, PYTHONPATH=ROOT)
        full_env.update(env or {})
        cmd = [sys.executable] + (['-c', script] if script else ['-m', 'flupfast']) + args
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stderr=subprocess.PIPE)
        self.address = address
        try:
            wait_connectable(address, self.proc)
        except BaseException:
            self.proc.kill()  # never leave a server behind when it fails to start
            self.proc.wait(10)
            self.proc.stderr.close()
            raise

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
