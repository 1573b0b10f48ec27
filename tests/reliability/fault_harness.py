"""What the fault-injection and access tests share: a flupfast server process running
tests/reliability/fault_app.py (its log in a file, so a flood of lines never blocks it), its
process tree as /proc shows it, and one-connection requests in FastCGI, SCGI or AJP13 that can
be sent in two steps (the head now, the body when the test says) to hold a request in the app.

Processes are stopped by PID (their own session, so a forked child is never left behind).
"""
import contextlib
import os
import signal
import socket
import subprocess
import sys

from tests import ajp_client, fcgi_client, scgi_client
from tests.integration.backend_process import ROOT, free_port
from tests.waiting import wait_until

from flupfast.protocols import fastcgi

APP = "tests.reliability.fault_app:app"
START_TIMEOUT = 30.0
WAIT = 30.0          # generous bound for wait_until on a loaded 2-core machine
IO_TIMEOUT = 30.0

PROTOCOLS = ("fcgi", "scgi", "ajp")


def long_tests():
    """FLUPFAST_LONG_TESTS=1 runs the full-size variants (1,000 clients per config...)."""
    return os.environ.get("FLUPFAST_LONG_TESTS", "") not in ("", "0")


# -- /proc ------------------------------------------------------------------------------------

def _stat_fields(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(")") + 2:].split()


def process_state(pid):
    """``pid``'s state letter (R, S, Z...), None when there is no such process."""
    fields = _stat_fields(pid)
    return None if fields is None else fields[0]


def children_of(pid):
    """{child pid: state letter} of ``pid``'s children (Z: zombie)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and int(fields[1]) == pid:
                found[int(entry)] = fields[0]
    return found


def fd_count(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return 0


def thread_count(pid):
    try:
        return len(os.listdir("/proc/%d/task" % pid))
    except OSError:
        return 0


def fd_targets(pid):
    """{fd: readlink target} of ``pid``."""
    out = {}
    base = "/proc/%d/fd" % pid
    with contextlib.suppress(OSError):
        for fd in os.listdir(base):
            with contextlib.suppress(OSError):
                out[int(fd)] = os.readlink(os.path.join(base, fd))
    return out


# -- the server -------------------------------------------------------------------------------

class Backend:
    """``python -m flupfast --protocol P --mode M ... fault_app`` on a Unix socket (default) or
    loopback TCP, with FAULT_DIR = ``workdir``."""

    def __init__(self, workdir, protocol="fcgi", mode="thread", extra=(), tcp=False,
                 env=None, log_level="WARNING", speedups=None):
        self.workdir = workdir
        self.protocol = protocol
        self.mode = mode
        if tcp:
            self.address = ("127.0.0.1", free_port())
            bind = "127.0.0.1:%d" % self.address[1]
        else:
            self.address = str(workdir / "server.sock")
            bind = "unix:" + self.address
        self.log_path = workdir / "server.log"
        full_env = dict(os.environ, PYTHONPATH=ROOT, FAULT_DIR=str(workdir),
                        PYTHONUNBUFFERED="1")
        if speedups is not None:
            full_env["FLUPFAST_SPEEDUPS"] = speedups
        full_env.update(env or {})
        cmd = [sys.executable, "-m", "flupfast", "--protocol", protocol, "--mode", mode,
               "--bind", bind, "--log-level", log_level] + list(extra) + [APP]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.pid = self.proc.pid
        try:
            self._wait_listening()
        except BaseException:
            self.close()
            raise

    def _wait_listening(self):
        def listening():
            if self.proc.poll() is not None:
                raise AssertionError("server exited at start:\n" + self.log())
            try:
                with self.connect(timeout=1.0):
                    return True
            except OSError:
                return False
        wait_until(listening, START_TIMEOUT, interval=0.05,
                   what=lambda: "the server to listen:\n" + self.log())

    def connect(self, timeout=IO_TIMEOUT, source=None):
        if isinstance(self.address, str):
            sock = socket.socket(socket.AF_UNIX)
        else:
            sock = socket.socket(socket.AF_INET)
            if source is not None:
                sock.bind((source, 0))  # a second loopback address: a different peer
        sock.settimeout(timeout)
        try:
            sock.connect(self.address)
        except BaseException:
            sock.close()
            raise
        return sock

    def log(self):
        return self.log_path.read_text(errors="replace")

    def children(self):
        """Live (non-zombie) children."""
        return {pid for pid, state in children_of(self.pid).items() if state != "Z"}

    def zombies(self):
        return {pid for pid, state in children_of(self.pid).items() if state == "Z"}

    def tree(self):
        return [self.pid] + sorted(self.children())

    def held_pid(self, tag):
        """The pid of the process running ``/hold?tag=``, once the app got there."""
        path = self.workdir / (tag + ".pid")
        wait_until(lambda: path.exists() and path.read_text(), WAIT,
                   what=lambda: "request %s to reach the app\n%s" % (tag, self.log()))
        return int(path.read_text())

    def calls(self):
        path = self.workdir / "calls"
        return path.read_text().splitlines() if path.exists() else []

    def signal(self, signum):
        os.kill(self.pid, signum)

    def wait_exit(self, timeout=WAIT):
        """The exit status; the process must end within ``timeout``."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("server did not exit within %.0f s\n%s"
                                 % (timeout, self.log())) from None

    def close(self):
        """Teardown by PID and session: whatever happened, leave nothing running."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(WAIT)


# -- requests ---------------------------------------------------------------------------------

class Answer:
    """A parsed answer: ``status`` (int, None when the connection ended without one), ``body``,
    and for FastCGI the END_REQUEST ``protocol_status`` and FCGI_STDERR bytes."""

    def __init__(self, status=None, body=b"", protocol_status=None, stderr=b""):
        self.status = status
        self.body = body
        self.protocol_status = protocol_status
        self.stderr = stderr

    def __repr__(self):
        return "<Answer %s %r %s>" % (self.status, self.body[:80], self.protocol_status)


class Exchange:
    """One request on its own connection. ``hold=True`` sends everything but the body (the
    app then waits in wsgi.input.read); ``release()`` sends it. ``answer()`` reads the reply.
    Bodies of held AJP requests must fit the first chunk (8186 bytes)."""

    def __init__(self, backend, uri="/", body=b"", hold=False, source=None, keep_conn=False):
        self.backend = backend
        self.protocol = backend.protocol
        self.sock = backend.connect(source=source)
        self.body = body
        self.keep_conn = keep_conn
        head, self._rest = self._wire(uri, body)
        try:
            self.sock.sendall(head)
            if not hold:
                self.release()
        except OSError:
            pass  # refused: answer() says how

    def _wire(self, uri, body):
        method = "POST" if body or "hold" in uri else "GET"
        if self.protocol == "fcgi":
            return fcgi_client.request_bytes(uri, body=body, method=method, split=True,
                                             keep_conn=self.keep_conn,
                                             params={"CONTENT_LENGTH": str(len(body))})
        if self.protocol == "scgi":
            return scgi_client.request_bytes(uri, method=method, content_length=len(body)), body
        path, _, query = uri.partition("?")
        attrs = [("query_string", query)] if query else []
        head = ajp_client.packet(ajp_client.forward_request(
            method, path, headers=[("Content-Length", str(len(body)))], attributes=attrs))
        return head, ajp_client.body_packet(body[:8186]) if body else b""

    def release(self):
        if self._rest:
            self.sock.sendall(self._rest)
            self._rest = b""

    def answer(self, timeout=IO_TIMEOUT):
        self.sock.settimeout(timeout)
        try:
            if self.protocol == "fcgi":
                return self._fcgi_answer()
            if self.protocol == "scgi":
                raw = scgi_client.read_all(self.sock)
                if not raw:
                    return Answer()
                status, _, body = scgi_client.parse_response(raw)
                return Answer(int(status[:3]), body)
            return self._ajp_answer()
        except ConnectionResetError:
            return Answer()

    def _fcgi_answer(self):
        resp = fcgi_client.read_response(self.sock)
        if resp.end is None:
            return Answer(stderr=bytes(resp.stderr))
        status = resp.status if resp.stdout else None
        body = resp.body if resp.stdout else b""
        return Answer(status, body, resp.end[1], bytes(resp.stderr))

    def _ajp_answer(self):
        buf = b""
        packets = []
        rest = memoryview(self.body[8186:])
        while True:
            data = self.sock.recv(1 << 20)
            if not data:
                break
            buf += data
            new, buf = ajp_client.read_container_packets(buf)
            done = False
            for item in new:
                packets.append(item)
                if item[0] == "get_body":
                    n = min(item[1], len(rest))
                    self.sock.sendall(ajp_client.body_packet(bytes(rest[:n])))
                    rest = rest[n:]
                elif item[0] == "end":
                    done = True
            if done:
                break
        resp = ajp_client.Response(packets)
        if resp.reuse is None:
            return Answer()
        return Answer(resp.status, resp.body)

    def close(self):
        self.sock.close()


def ask(backend, uri="/", body=b"", **kw):
    """One whole request; its Answer."""
    exchange = Exchange(backend, uri, body, **kw)
    try:
        return exchange.answer()
    finally:
        exchange.close()


def is_overloaded(protocol, answer):
    """The protocol's explicit "overloaded" answer: 503, plus FCGI_OVERLOADED for FastCGI."""
    if protocol == "fcgi" and answer.protocol_status != fastcgi.FCGI_OVERLOADED:
        return False
    return answer.status == 503
