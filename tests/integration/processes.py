"""Peer-harness process control: the requirements a peer test checks (root, installed fronts),
world-traversable temp dirs, subprocesses started in their own session and stopped by PID
(SIGTERM, then SIGKILL after a bound; never by name), waiting for a socket or a log line, and
the server under test (flup 1.0.3 or flupfast on either backend) as a command line.

The bottom of the peer harness: it imports nothing else of it. It must not touch system
configs or services.
"""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
PROBE_SOURCE = REPO / "tests" / "apps" / "probe.py"
LAUNCHER = Path(__file__).resolve().with_name("flup_launcher.py")
PROBE_APP = "tests.apps.probe:app"
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's: readable by www-data, unlike pyenv's under /root
FLUP_VERSION = "1.0.3"

START_TIMEOUT = 30.0   # a front or backend that is not listening by then is broken
STOP_TIMEOUT = 10.0    # SIGTERM grace before SIGKILL (flup's prefork ignores TERM when idle)
IO_TIMEOUT = 120       # seconds; fronts' backend timeouts and the client's socket timeout
LOG_TAIL = 12000       # characters of each log shown in a failure report


# --------------------------------------------------------------------------------------------
# Environment checks

def require(path, what):
    """Skip when a front is missing locally; fail under CI, which must not skip silently."""
    if os.path.exists(path):
        return
    msg = "%s not found (%s); install it (see .ci/run)" % (what, path)
    if os.environ.get("CI"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


def require_root():
    if os.geteuid() != 0:
        msg = "peer tests start nginx/apache2 with User www-data and need root"
        if os.environ.get("CI"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)


# --------------------------------------------------------------------------------------------
# Ports, temp dirs

def make_tempdir(prefix):
    """A temp dir that www-data (nginx/apache workers, mod_fcgid apps) can traverse.

    pytest's tmp_path lives under a 0700 /tmp/pytest-of-root, so it cannot be used here.
    """
    path = Path(tempfile.mkdtemp(prefix="flupfast-%s-" % prefix))
    path.chmod(0o755)
    return path


def remove_tempdir(path):
    shutil.rmtree(str(path), ignore_errors=True)


def tail(path, limit=LOG_TAIL):
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return "<%s unreadable: %s>" % (path, exc)
    text = data[-limit:].decode("utf-8", "replace")
    return ("...\n" if len(data) > limit else "") + text


# --------------------------------------------------------------------------------------------
# Processes

class ManagedProcess:
    """A subprocess in its own session (so its pgid is its PID), with its log files."""

    def __init__(self, name, argv, env=None, cwd=None, logs=(), umask=-1, log_dir=None):
        self.name = name
        self.argv = list(argv)
        self.logs = [Path(p) for p in logs]
        log_dir = Path(log_dir or tempfile.gettempdir())
        self.output = log_dir / ("%s.out" % name)
        with open(self.output, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, umask=umask)
        self.pid = self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def log_sections(self):
        sections = [("%s output (pid %d, %s)" % (self.name, self.pid, self.status()),
                     tail(self.output))]
        for log in self.logs:
            if log.exists():
                sections.append(("%s %s" % (self.name, log.name), tail(log)))
        return sections

    def status(self):
        code = self.proc.poll()
        return "running" if code is None else "exited %s" % code

    def describe(self):
        return "\n".join("----- %s -----\n%s" % s for s in self.log_sections())

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM, wait up to ``timeout``, then SIGKILL; then reap leftovers of its group."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.proc.wait(timeout)
        # Workers or forked children left in the session's process group (pgid == our PID).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        return self.proc.returncode


def wait_until_connectable(address, proc, timeout=START_TIMEOUT):
    """Poll until ``address`` (path or (host, port)) accepts a connection."""
    family = socket.AF_UNIX if isinstance(address, (str, Path)) else socket.AF_INET
    target = str(address) if family == socket.AF_UNIX else address
    refused = [None]

    def connectable():
        if not proc.alive():
            raise RuntimeError("%s exited before listening on %s\n%s"
                               % (proc.name, target, proc.describe()))
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            try:
                s.connect(target)
                return True
            except OSError as exc:
                refused[0] = exc
                return False
    wait_until(connectable, timeout, interval=0.05, what=lambda: "%s listening on %s (%s)\n%s"
               % (proc.name, target, refused[0], proc.describe()))


# --------------------------------------------------------------------------------------------
# The FastCGI server under test

@dataclass(frozen=True)
class ServerSpec:
    """Which FastCGI server runs behind the fronts.

    name: ``flup`` (real flup 1.0.3 through flup_launcher.py), ``cy`` / ``py`` (flupfast with
    FLUPFAST_SPEEDUPS=1 / 0), ``uwsgi`` (real uWSGI on its own protocol, the reference of the
    uwsgi tests; ``uwsgi_command``).
    """
    name: str

    @property
    def is_flup(self):
        return self.name == "flup"

    @property
    def speedups(self):
        return {"cy": "1", "py": "0"}.get(self.name)

    def command(self, mode="thread", bind=None, app=PROBE_APP, protocol="fcgi", extra=()):
        """The server's command line: flupfast's CLI, or flup_launcher.py with the same one.

        ``protocol`` is fcgi, scgi or ajp; ``extra`` more options (``--allowed-servers``).
        """
        if self.name == "uwsgi":
            return uwsgi_command(mode, bind, app, extra)
        if self.is_flup:
            argv = [sys.executable, str(LAUNCHER), "--mode", mode]
        else:
            argv = [sys.executable, "-m", "flupfast", "--mode", mode]
        if protocol != "fcgi":
            argv += ["--protocol", protocol]
        if bind is not None:
            argv += ["--bind", bind]
        argv += list(extra)
        if app:
            argv.append(app)
        return argv

    def has_mode(self, protocol, mode):
        """flup 1.0.3 has no scgi_single or ajp_single, and no uwsgi; uWSGI serves uwsgi
        only, in thread and fork mode."""
        if self.name == "uwsgi":
            return protocol == "uwsgi" and mode != "single"
        return not (self.is_flup and (protocol == "uwsgi" or protocol != "fcgi"
                                      and mode == "single"))

    def environ(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env.pop("FLUPFAST_SPEEDUPS", None)
        if self.speedups is not None:
            env["FLUPFAST_SPEEDUPS"] = self.speedups
        env["PYTHONUNBUFFERED"] = "1"
        return env

    # --- mod_fcgid: the script imports the server itself, with fd 0 as its listening socket
    def fcgid_import(self):
        if self.is_flup:
            return "from flup.server.fcgi import WSGIServer"
        return "from flupfast.server.fcgi import WSGIServer"


def uwsgi_command(mode, bind, app=PROBE_APP, extra=()):
    """Real uWSGI serving ``app`` on the uwsgi protocol at ``bind`` (``unix:/path`` or
    ``HOST:PORT``): 4 threads in one process (thread mode) or 4 worker processes under a
    master (fork mode); 64 KiB of vars accepted, as flupfast does (uWSGI's default is 4 KiB)."""
    uwsgi = shutil.which("uwsgi")
    if uwsgi is None:
        pytest.skip("uWSGI is not installed (pip install uwsgi)")
    address = bind[len("unix:"):] if bind.startswith("unix:") else bind
    workers = ["--threads", "4"] if mode == "thread" else ["--master", "--processes", "4"]
    return [uwsgi, "--uwsgi-socket", address, "--wsgi", app, "--need-app", "--die-on-term",
            "--buffer-size", "65535", *workers, *extra]


def start_backend(spec, workdir, bind, mode="thread", name=None, protocol="fcgi", extra=()):
    """Start the server under test on ``bind`` (``unix:/path`` or ``HOST:PORT``), speaking
    ``protocol`` (fcgi, scgi, ajp); ``extra`` holds more command-line options.

    A Unix socket is made connectable for nginx's www-data workers (umask 0 while the server
    creates it, chmod afterwards in case the server sets its own umask).
    """
    workdir = Path(workdir)
    if not spec.has_mode(protocol, mode):
        pytest.skip("%s has no %s server in %s mode"
                    % ("flup 1.0.3" if spec.is_flup else spec.name, protocol, mode))
    proc = ManagedProcess(name or "backend-%s-%s%s" % (
                              spec.name, "" if protocol == "fcgi" else protocol + "-", mode),
                          spec.command(mode=mode, bind=bind, protocol=protocol, extra=extra),
                          env=spec.environ(), cwd=str(REPO), umask=0, log_dir=workdir)
    try:
        if bind.startswith("unix:"):
            path = bind[len("unix:"):]
            wait_until_connectable(path, proc)
            os.chmod(path, 0o777)
        else:
            host, _, port = bind.rpartition(":")
            wait_until_connectable((host, int(port)), proc)
    except BaseException:
        proc.stop()
        raise
    return proc


def wait_for_log(proc, needle, timeout=5.0):
    """Poll ``proc``'s output until it holds ``needle``; fails after ``timeout``."""
    wait_until(lambda: needle in tail(proc.output, 1 << 20), timeout, interval=0.05,
               what=lambda: "%r in the output of %s\n%s" % (needle, proc.name, proc.describe()))
