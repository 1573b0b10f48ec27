"""One server under test as a subprocess on a Unix socket (or TCP loopback): flupfast
(``python -m flupfast``, pure or compiled by FLUPFAST_SPEEDUPS) or flup 1.0.3 (flup_server.py
beside this file). It owns the bounded start (listening, then one hello answered) and the stop
by PID; what is asked of the server is the scenarios' business, not this module's."""
import contextlib
import os
import subprocess
import sys
import time

from bench.base import BENCH, ROOT, START_TIMEOUT, STOP_GRACE, connect, free_port
from bench.procs import process_tree, terminate


class Server:
    """One server subprocess on a Unix socket (or TCP loopback: ``tcp=True``, AJP); ``start``
    is bounded, ``stop`` by PID. ``protocol`` is fcgi, scgi or ajp; ``log_level`` is given to
    both flup (SCGI/AJP loggingLevel) and flupfast."""

    def __init__(self, kind, mode, app, workdir, env_extra=None, protocol="fcgi", tcp=False,
                 log_level="WARNING", extra_args=()):
        self.kind, self.mode, self.app = kind, mode, app
        self.protocol, self.log_level, self.extra_args = protocol, log_level, list(extra_args)
        self.sock_path = os.path.join(workdir, "%s-%s-%s-%d.sock" % (
            protocol, kind, mode, id(self) % 10000))
        self.log_path = self.sock_path[:-5] + ".log"
        self.port = free_port() if tcp else None
        # what the load client and start() connect to: a path, or "127.0.0.1:PORT"
        self.address = "127.0.0.1:%d" % self.port if tcp else self.sock_path
        self.env_extra = env_extra or {}
        self.proc = None
        self.error = None
        self.notes = []
        self.start_timeout = START_TIMEOUT   # longer under valgrind (drivers/callgrind.py)
        self.stop_grace = STOP_GRACE

    def command(self):
        bind = "127.0.0.1:%d" % self.port if self.port else "unix:" + self.sock_path
        if self.kind == "flup":
            return [sys.executable, str(BENCH / "servers" / "flup_server.py"), "--protocol", self.protocol,
                    "--mode", self.mode, "--bind", bind, "--log-level", self.log_level,
                    self.app]
        return [sys.executable, "-m", "flupfast", "--protocol", self.protocol, "--mode",
                self.mode, "--bind", bind, "--log-level", self.log_level] + \
            (self.extra_args if self.kind != "flup" else []) + [self.app]

    def env(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        env["FLUPFAST_SPEEDUPS"] = {"pure": "0", "compiled": "1"}.get(self.kind, "auto")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.update(self.env_extra)
        return env

    def start(self, client):
        """Start and wait until it answers a hello request; False (and ``error``) otherwise."""
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.command(), cwd=str(ROOT), env=self.env(),
                                     stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.error = "exited with status %s before answering: %s" % (
                    self.proc.returncode, self.log_tail())
                return False
            if self.port or os.path.exists(self.sock_path):
                try:
                    connect(self.address)
                    break
                except OSError:
                    pass
            time.sleep(0.05)
        else:
            self.error = "did not listen within %.0f s" % self.start_timeout
            return False
        problem = self.hello_problem(client, max(1.0, deadline - time.monotonic()))
        if problem:
            self.error = "did not answer a hello request: %s %s" % (problem, self.log_tail())
            return False
        time.sleep(0.3 if self.mode == "fork" else 0.1)  # let a prefork pool settle
        return True

    def hello_problem(self, client, timeout):
        """One hello request on the server's own protocol: None, or what went wrong."""
        res = client.run(self.address, "hello", count=1, proto=self.protocol,
                         deadline=timeout)
        if not res.get("requests") or res.get("bad_status"):
            return res.get("first_error") or res.get("first_bad_status") or \
                res.get("error") or "no answer"
        return None

    def log_tail(self, size=600):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - size))
                return f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def pids(self):
        return process_tree(self.proc.pid) if self.proc and self.proc.poll() is None else []

    def _poke(self):
        with contextlib.suppress(OSError):
            connect(self.address)

    def stop(self):
        if self.proc is None:
            return
        proc = self.proc
        if proc.poll() is None:
            # flup's prefork parent sleeps in select() through SIGTERM until a connection
            # arrives (compat/known_differences.py 'prefork-signals'): poke it once.
            terminate(proc, [self.stop_grace, self.stop_grace], self.notes, "", "child",
                      poke=self._poke)
        self._log.close()
        self.proc = None
