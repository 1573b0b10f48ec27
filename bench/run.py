"""The FastCGI benchmark: flup 1.0.3, flupfast pure Python and flupfast compiled, side by side
in one run, each as its own server subprocess on a Unix socket.

    python -m bench [--quick]          (or: python bench/run.py [--quick])

It installs nothing: it says what is missing and skips what it cannot run. Every server and
every client run has a time limit; a server that does not start or hangs is reported, never
waited on forever, and stopped by its PID. Results: a table on stdout and
bench/results/latest.json and latest.md (git-ignored). bench/README.md explains the numbers.
"""
import argparse
import contextlib
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import apps  # noqa: E402  (after the sys.path fix for ``python bench/run.py``)

MIB = 1 << 20
KINDS = ("flup", "pure", "compiled")
# Hello runs: (key, connections (0: --conns), KEEP_CONN). One connection only in thread mode:
# it shows the per-request cost without flup's pool stalls (kept connections queued behind
# busy threads or children).
HELLO_RUNS = (("new", 0, False), ("keep", 0, True), ("new_1conn", 1, False),
              ("keep_1conn", 1, True))
HELLO_LABELS = {"new": "new connection per request", "keep": "KEEP_CONN",
                "new_1conn": "new connection per request", "keep_1conn": "KEEP_CONN"}
# All parts, and what --quick runs (under 3 minutes): the fronts and FastCGI's instruction
# counts.
PARTS = ("fronts", "callgrind", "hello", "upload", "download", "syscalls", "scgi", "ajp")
QUICK_PARTS = ("fronts", "callgrind")
KIND_LABEL = {"flup": "flup 1.0.3", "pure": "flupfast pure", "compiled": "flupfast compiled"}

# Every wait is bounded by one of these.
START_TIMEOUT = 20.0       # a server must accept a connection and answer hello within this
STOP_GRACE = 3.0           # SIGTERM -> this long -> poke the socket -> STOP_GRACE -> SIGKILL
CLIENT_SLACK = 15.0        # subprocess timeout beyond the client's own -T deadline


_T0 = time.monotonic()


def log(msg):
    print("[%6.1f s] %s" % (time.monotonic() - _T0, msg), file=sys.stderr, flush=True)


# -- FastCGI request bytes (FastCGI 1.0 spec sections 3.3-3.4, 5.1) ----------------------------

def _record(rtype, rid, content=b""):
    pad = -len(content) & 7
    return struct.pack("!BBHHBx", 1, rtype, rid, len(content), pad) + bytes(content) + bytes(pad)


def _pair(name, value):
    name, value = name.encode("latin-1"), value.encode("latin-1")
    enc = lambda n: bytes((n,)) if n < 128 else struct.pack("!L", n | 0x80000000)  # noqa: E731
    return enc(len(name)) + enc(len(value)) + name + value


def write_request(path, uri, body_size=0, stdin_record=65536 - 8):
    """Write one request's records to ``path``: BEGIN_REQUEST (responder; fcgi_load sets or
    clears KEEP_CONN), PARAMS as nginx's fastcgi_params would send them, and a body of
    ``body_size`` pattern bytes in STDIN records of ``stdin_record`` bytes (64 KiB records
    with their 8-byte header), then the empty STDIN record."""
    path_part, _, query = uri.partition("?")
    params = {
        "QUERY_STRING": query, "REQUEST_METHOD": "POST" if body_size else "GET",
        "CONTENT_TYPE": "application/octet-stream" if body_size else "",
        "CONTENT_LENGTH": str(body_size) if body_size else "",
        "SCRIPT_NAME": "", "PATH_INFO": path_part, "REQUEST_URI": uri,
        "DOCUMENT_URI": path_part, "DOCUMENT_ROOT": "/var/www", "SERVER_PROTOCOL": "HTTP/1.1",
        "REQUEST_SCHEME": "http", "GATEWAY_INTERFACE": "CGI/1.1", "SERVER_SOFTWARE": "nginx",
        "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "50000", "SERVER_ADDR": "127.0.0.1",
        "SERVER_PORT": "80", "SERVER_NAME": "localhost", "HTTP_HOST": "localhost",
        "HTTP_USER_AGENT": "fcgi_load", "HTTP_ACCEPT": "*/*",
    }
    pairs = b"".join(_pair(k, v) for k, v in params.items())
    with open(path, "wb") as out:
        out.write(_record(1, 1, struct.pack("!HB5x", 1, 0)))
        out.write(_record(4, 1, pairs) + _record(4, 1))
        if body_size:
            chunk = stdin_record
            # The pattern repeats every MiB; write record by record without building the body.
            block = apps.BLOCK * 2
            sent = 0
            while sent < body_size:
                n = min(chunk, body_size - sent)
                off = sent % len(apps.BLOCK)
                out.write(_record(5, 1, block[off:off + n]))
                sent += n
        out.write(_record(5, 1))
    return path


# -- /proc helpers ---------------------------------------------------------------------------

def _proc_status(pid):
    values = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    values[line[:5]] = int(line.split()[1]) * 1024
    except OSError:
        return None
    return values


def _proc_stat(pid):
    """(ppid, utime+stime+cutime+cstime in clock ticks, starttime) or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(")") + 2:].split()
    return int(fields[1]), sum(int(x) for x in fields[11:15]), int(fields[19])


def process_tree(root):
    """``root`` and its descendants (no /proc/PID/task/*/children here: scan /proc)."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _proc_stat(int(name))
            if st:
                children.setdefault(st[0], []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def tree_cpu_seconds(pids):
    tick = os.sysconf("SC_CLK_TCK")
    return sum((_proc_stat(p) or (0, 0, 0))[1] for p in pids) / tick


def tree_rss(pids):
    return sum((_proc_status(p) or {}).get("VmRSS", 0) for p in pids)


class RSSSampler:
    """Samples the summed VmRSS of a server's process tree every ``interval`` seconds and,
    for each process, VmHWM after resetting it (clear_refs 5), so a peak between two samples
    is still seen. ``peak_above_idle`` is the larger of the two estimates."""

    def __init__(self, root, interval=0.005):
        self.root = root
        self.interval = interval
        self.pids = process_tree(root)
        self.idle = tree_rss(self.pids)
        self.idle_by_pid = {p: (_proc_status(p) or {}).get("VmRSS", 0) for p in self.pids}
        self.peak = self.idle
        self.hwm_ok = True
        for pid in self.pids:
            try:
                with open("/proc/%d/clear_refs" % pid, "w") as f:
                    f.write("5")
            except OSError:
                self.hwm_ok = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        tick = 0
        while not self._stop.is_set():
            if tick % 40 == 0:  # new prefork children
                self.pids = process_tree(self.root)
            tick += 1
            self.peak = max(self.peak, tree_rss(self.pids))
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(2)
        self.peak = max(self.peak, tree_rss(self.pids))
        hwm_delta = 0
        if self.hwm_ok:
            for pid in self.pids:
                st = _proc_status(pid) or {}
                base = self.idle_by_pid.get(pid, st.get("VmRSS", 0))
                hwm_delta = max(hwm_delta, st.get("VmHWM", 0) - base)
        self.hwm_delta = hwm_delta
        self.peak_above_idle = max(self.peak - self.idle, hwm_delta)
        return False

    def as_dict(self):
        return {"idle_rss_mib": round(self.idle / MIB, 1),
                "peak_rss_mib": round(max(self.peak, self.idle + self.hwm_delta) / MIB, 1),
                "peak_above_idle_mib": round(self.peak_above_idle / MIB, 1),
                "processes": len(self.pids)}


# -- servers ---------------------------------------------------------------------------------

def free_port():
    """A free TCP port on 127.0.0.1 (the kernel picks it; bound again at once by the server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _connect(address, timeout=1.0):
    """Connect to ``address`` (a Unix socket path, or "HOST:PORT") and close; raises OSError."""
    if address.startswith("/"):
        family, target = socket.AF_UNIX, address
    else:
        host, _, port = address.rpartition(":")
        family, target = socket.AF_INET, (host, int(port))
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(target)


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
        self.start_timeout = START_TIMEOUT   # longer under valgrind (bench/callgrind.py)
        self.stop_grace = STOP_GRACE

    def command(self):
        bind = "127.0.0.1:%d" % self.port if self.port else "unix:" + self.sock_path
        if self.kind == "flup":
            return [sys.executable, str(BENCH / "flup_server.py"), "--protocol", self.protocol,
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
                    _connect(self.address)
                    break
                except OSError:
                    pass
            time.sleep(0.05)
        else:
            self.error = "did not listen within %.0f s" % self.start_timeout
            return False
        res = client.run(self.address, "hello", count=1, proto=self.protocol,
                         deadline=max(1.0, deadline - time.monotonic()))
        if not res.get("requests") or res.get("bad_status"):
            self.error = "did not answer a hello request: %s %s" % (
                res.get("first_error") or res.get("first_bad_status") or res.get("error"),
                self.log_tail())
            return False
        time.sleep(0.3 if self.mode == "fork" else 0.1)  # let a prefork pool settle
        return True

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

    def stop(self):
        if self.proc is None:
            return
        proc = self.proc
        if proc.poll() is None:
            family = {p: (_proc_stat(p) or (0, 0, None))[2] for p in self.pids()}
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(self.stop_grace)
            except subprocess.TimeoutExpired:
                # flup's prefork parent sleeps in select() through SIGTERM until a connection
                # arrives (peers-and-protocols.md 1.5 #2): poke it once.
                with contextlib.suppress(OSError):
                    _connect(self.address)
                try:
                    proc.wait(self.stop_grace)
                except subprocess.TimeoutExpired:
                    self.notes.append("did not exit within %.0f s of SIGTERM: SIGKILL"
                                      % (2 * self.stop_grace))
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGKILL)
                    proc.wait(5)
            kill_orphans(family, self.notes, "child")
        self._log.close()
        self.proc = None


def kill_orphans(family, notes, label):
    """Processes of ``family`` ({pid: start time}) still alive after their parent went (or
    STOP_GRACE later): SIGKILL by PID, the start time checked so a reused PID is left alone;
    each noted in ``notes``."""
    end = time.monotonic() + STOP_GRACE
    for pid, started in family.items():
        while time.monotonic() < end and (_proc_stat(pid) or (0, 0, None))[2] == started:
            time.sleep(0.05)
        if (_proc_stat(pid) or (0, 0, None))[2] == started:
            notes.append("%s %d outlived its parent: SIGKILL" % (label, pid))
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# -- the load client -------------------------------------------------------------------------

class LoadClient:
    """Compiles bench/fcgi_load.c into ``workdir`` and runs it; requests are prebuilt files."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.binary = os.path.join(workdir, "fcgi_load")
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        subprocess.run([cc, "-O2", "-Wall", "-o", self.binary, str(BENCH / "fcgi_load.c")],
                       check=True, timeout=120)
        self.requests = {}

    def request(self, name, uri, body_size=0):
        if name not in self.requests:
            path = os.path.join(self.workdir, name + ".req")
            self.requests[name] = write_request(path, uri, body_size)
        return self.requests[name]

    def drop(self, name):
        path = self.requests.pop(name, None)
        if path:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def run(self, address, request, conns=1, keep=False, duration=None, warmup=0.0,
            count=None, deadline=60.0, save=None, save_hint=0, proto="fcgi"):
        """``address``: a Unix socket path or "HOST:PORT"; ``request``: a request file, or
        "hello" (the protocol's hello request)."""
        if request == "hello":
            if proto == "fcgi":
                request = self.request("hello", "/")
            else:
                from bench import protocols
                request = protocols.hello_request(self, proto)
        cmd = [self.binary, "-P", proto, "-u" if address.startswith("/") else "-t", address,
               "-r", request, "-c", str(conns), "-T", "%.3f" % deadline]
        if keep:
            cmd.append("-k")
        if duration:
            cmd += ["-d", "%.3f" % duration, "-w", "%.3f" % warmup]
        else:
            cmd += ["-n", str(count or 1)]
        if save:
            cmd += ["-o", save, "-O", str(save_hint)]
        try:
            out = subprocess.run(cmd, capture_output=True, timeout=deadline + CLIENT_SLACK)
        except subprocess.TimeoutExpired:
            return {"requests": 0, "error": "fcgi_load did not finish", "timed_out": True}
        if out.returncode != 0:
            return {"requests": 0, "error": out.stderr.decode("utf-8", "replace").strip()}
        return json.loads(out.stdout)


# -- environment -----------------------------------------------------------------------------

def _run_py(code, env_extra):
    env = dict(os.environ, PYTHONPATH=str(ROOT), **env_extra)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env,
                             cwd=str(ROOT), timeout=60)
    except subprocess.TimeoutExpired:
        return False, "timed out"
    text = (out.stdout or out.stderr).decode("utf-8", "replace").strip()
    return out.returncode == 0, text


def survey():
    """What is installed, what is missing, and the machine."""
    info = {"missing": [], "notes": []}
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    loadavg = ""
    with contextlib.suppress(OSError), open("/proc/loadavg") as f:
        loadavg = " ".join(f.read().split()[:3])
    info["machine"] = {
        "nproc": len(os.sched_getaffinity(0)), "cpu": cpu, "kernel": platform.release(),
        "python": platform.python_version(), "loadavg_at_start": loadavg,
    }
    try:
        import importlib.metadata as md
        info["flup"] = md.version("flup")
        import flup.server.fcgi  # noqa: F401
    except Exception as exc:  # any failure means: no flup to compare with
        info["flup"] = None
        info["missing"].append("flup 1.0.3 (pip install flup==1.0.3): %s" % exc)
    if info.get("flup") and info["flup"] != "1.0.3":
        info["notes"].append("flup %s is installed, not 1.0.3" % info["flup"])
    ok, text = _run_py("import flupfast; print(flupfast.__version__, flupfast.BACKEND)",
                       {"FLUPFAST_SPEEDUPS": "0"})
    info["flupfast"] = text.split()[0] if ok else None
    if not ok:
        info["missing"].append("flupfast does not import from %s: %s" % (ROOT, text[-300:]))
    ok, text = _run_py("import flupfast, flupfast._speedups as s; print(flupfast.BACKEND, "
                       "s.__file__)", {"FLUPFAST_SPEEDUPS": "1"})
    info["compiled"] = ok and text.startswith("cython")
    if info["compiled"]:
        so = Path(text.split(None, 1)[1])
        sources = [p for p in [ROOT / "flupfast" / "_speedups.pyx",
                               *(ROOT / "flupfast" / "_cython").glob("*.pxi")] if p.exists()]
        if sources and max(p.stat().st_mtime for p in sources) > so.stat().st_mtime:
            info["notes"].append("the compiled module %s is older than its .pyx/.pxi sources: "
                                 "rebuild with `pip install -e . --no-build-isolation`"
                                 % so.name)
        info["compiled_module"] = str(so.relative_to(ROOT)) if ROOT in so.parents else str(so)
    else:
        info["missing"].append(
            "the compiled backend (flupfast._speedups does not import: %s); build it with "
            "`pip install -e %s --no-build-isolation`" % (text.splitlines()[-1][:200] if text
                                                          else "?", ROOT))
    with contextlib.suppress(Exception):
        import Cython
        info["cython"] = Cython.__version__
    info["cc"] = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not info["cc"]:
        info["missing"].append("a C compiler (cc) for bench/fcgi_load.c")
    info["strace"] = shutil.which("strace")
    if not info["strace"]:
        info["missing"].append("strace (apt-get install strace): no syscall counts")
    with contextlib.suppress(Exception):
        info["git"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                     capture_output=True, timeout=10).stdout.decode().strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "flupfast"],
                               capture_output=True, timeout=10).stdout.decode().strip()
        if dirty:
            info["git"] += " (flupfast/ has uncommitted changes)"
    return info


# -- scenarios -------------------------------------------------------------------------------

def bench_hello(kinds, modes, client, workdir, cfg, results):
    """Hello world requests/s, 16 connections, new connection per request and KEEP_CONN.
    One server per (kind, mode), all started first; rounds interleave the configurations so
    that noise from the shared machine spreads over all of them; the median round is kept."""
    servers = {}
    out = results.setdefault("hello", {})
    try:
        for kind in kinds:
            for mode in modes:
                srv = Server(kind, mode, "bench.apps:hello", workdir)
                log("  starting %s (%s mode)" % (KIND_LABEL[kind], mode))
                if srv.start(client):
                    servers[kind, mode] = srv
                else:
                    out.setdefault(kind, {})[mode] = {"error": srv.error}
                    log("    FAILED: %s" % srv.error)
                    srv.stop()
        runs = {}
        for rnd in range(cfg.rounds):
            for (kind, mode), srv in servers.items():
                for conn, conns, keep in HELLO_RUNS:
                    if conns == 1 and mode != "thread":
                        continue
                    if srv.proc is None or srv.proc.poll() is not None:
                        continue
                    pids = srv.pids()
                    cpu0 = tree_cpu_seconds(pids)
                    res = client.run(srv.address, "hello", conns=conns or cfg.conns,
                                     keep=keep, duration=cfg.duration,
                                     warmup=cfg.warmup,
                                     deadline=cfg.duration + cfg.warmup + 20)
                    cpu = tree_cpu_seconds(list(set(pids) | set(srv.pids()))) - cpu0
                    total = res.get("requests", 0) / max(res.get("seconds", 1), 1e-9) * (
                        cfg.duration + cfg.warmup)
                    res["server_cpu_us_per_request"] = round(cpu / total * 1e6, 1) \
                        if total else None
                    runs.setdefault((kind, mode, conn), []).append(res)
                    log("  round %d %-18s %-6s %-4s %8.0f req/s  errors %d  stalled %d%s"
                        % (rnd + 1, KIND_LABEL[kind], mode, conn, res.get("rps", 0),
                           res.get("errors", 0), res.get("stalled_connections", 0),
                           "  " + res["error"] if res.get("error") else ""))
        for (kind, mode, conn), rs in runs.items():
            rs_sorted = sorted(rs, key=lambda r: r.get("rps", 0))
            best = dict(rs_sorted[len(rs_sorted) // 2])
            best["rps_rounds"] = [r.get("rps", 0) for r in rs]
            out.setdefault(kind, {}).setdefault(mode, {})[conn] = best
        for (kind, mode), srv in servers.items():
            if srv.proc is not None and srv.proc.poll() is not None:
                out.setdefault(kind, {}).setdefault(mode, {})["crashed"] = \
                    "exited with %s: %s" % (srv.proc.returncode, srv.log_tail())
    finally:
        for (kind, mode), srv in servers.items():
            srv.stop()
            if srv.notes:
                out.setdefault(kind, {}).setdefault(mode, {})["stop_notes"] = srv.notes


def _transfer(kind, client, workdir, runs, build, check, env_extra=None, timeout=120.0,
              proto="fcgi", server_opts=None):
    """One transfer on a fresh thread-mode server: idle RSS, then ``runs`` runs under the RSS
    sampler, each checked by ``check`` on the saved answer. ``server_opts``: more Server
    arguments (tcp, log_level, extra_args)."""
    srv = Server(kind, "thread", "bench.apps:app", workdir, env_extra, protocol=proto,
                 **(server_opts or {}))
    if not srv.start(client):
        srv.stop()
        return {"error": "server did not start: %s" % srv.error}
    result = {"runs": []}
    try:
        with RSSSampler(srv.proc.pid) as sampler:
            for _ in range(runs):
                req, save, hint = build()
                res = client.run(srv.address, req, count=1, deadline=timeout, save=save,
                                 save_hint=hint, proto=proto)
                res["check"] = check(res, save)
                result["runs"].append(res)
                if res.get("timed_out") or not res.get("requests"):
                    break
        result.update(sampler.as_dict())
        good = [r for r in result["runs"] if r.get("requests") and r["check"] == "ok"]
        if good:
            secs = sorted(r["seconds"] for r in good)
            result["seconds"] = secs[len(secs) // 2]
            result["best_seconds"] = secs[0]
            result["seconds_runs"] = [round(r["seconds"], 4) for r in result["runs"]]
        else:
            last = result["runs"][-1] if result["runs"] else {}
            if last.get("timed_out"):
                result["timed_out_after"] = timeout
            result["error"] = last.get("error") or last.get("first_error") or last.get("check")
        if srv.proc.poll() is not None:
            result["crashed"] = "exited with %s: %s" % (srv.proc.returncode, srv.log_tail())
    finally:
        srv.stop()
        if srv.notes:
            result["stop_notes"] = srv.notes
    return result


def _read_saved(path, proto="fcgi"):
    """(CGI-style head text, body) of a saved answer; AJP packets are decoded first."""
    with open(path, "rb") as f:
        data = f.read()
    if proto == "ajp":
        from bench import protocols
        return protocols.decode_ajp_answer(data)
    head, _, body = data.partition(b"\r\n\r\n")
    return head.decode("latin-1"), body


def bench_upload(kind, mode_name, client, workdir, cfg, proto="fcgi", size=None, runs=None,
                 timeout=None, server_opts=None, request_opts=None):
    """``request_opts``: protocols.request_file options (AJP: packet_size)."""
    size = cfg.upload_size if size is None else size
    runs = runs or cfg.transfer_runs
    expect = apps.pattern_sha256(size)
    if proto == "fcgi":
        timed = client.request("upload-%s-%d" % (mode_name, size),
                               "/upload?mode=%s&check=len" % mode_name, size)
        checked = client.request("upload-%s-%d-sha" % (mode_name, size),
                                 "/upload?mode=%s&check=sha256" % mode_name, size)
    else:
        from bench import protocols
        timed = protocols.request_file(client, proto, "/upload?mode=%s&check=len" % mode_name,
                                       size, **(request_opts or {}))
        checked = protocols.request_file(client, proto,
                                         "/upload?mode=%s&check=sha256" % mode_name, size,
                                         **(request_opts or {}))
    save = os.path.join(workdir, "upload.out")
    state = {"n": 0}

    def build():
        # The timed runs count bytes only; the last run hashes (sha256) to check the content.
        state["n"] += 1
        return (checked if state["n"] == runs else timed), save, 0

    body = apps.pattern_bytes(size)
    if mode_name == "readline":
        pieces = body.count(b"\n") + (not body.endswith(b"\n"))
        contract = "readline() returns one line"
    else:
        pieces = -(-size // 65536)
        contract = "read(65536) returns 65536 bytes until the end"
    del body

    def check(res, path):
        if not res.get("requests"):
            return "no answer"
        try:
            answer = json.loads(_read_saved(path, proto)[1])
        except (OSError, ValueError) as exc:
            return "bad answer: %s" % exc
        res["app"] = answer
        if answer["length"] != size:
            return "length %d != %d" % (answer["length"], size)
        if answer["sha256"] is not None and answer["sha256"] != expect:
            return "sha256 mismatch"
        if answer["pieces"] != pieces or answer.get("violations"):
            # The bytes are right but cut wrongly: a file-API bug in wsgi.input.
            return "contract broken (%s): %d pieces, expected %d; %s bad pieces" % (
                contract, answer["pieces"], pieces, answer.get("violations", "?"))
        return "ok"

    result = _transfer(kind, client, workdir, runs, build, check,
                       timeout=timeout or cfg.transfer_timeout, proto=proto,
                       server_opts=server_opts)
    # The check run hashes inside the request: its time is not a server number.
    usable = ("ok", "contract")
    timed_runs = [r for r in result.get("runs", [])[:-1]
                  if r.get("requests") and r.get("check", "").startswith(usable)] or \
        [r for r in result.get("runs", [])
         if r.get("requests") and r.get("check", "").startswith(usable)]
    broken = [r["check"] for r in result.get("runs", []) if r.get("check", "").startswith(
        "contract")]
    if broken:
        result["invalid"] = broken[-1]
    if timed_runs:
        result.pop("error", None)
        secs = sorted(r["seconds"] for r in timed_runs)
        result["seconds"] = secs[len(secs) // 2]
        result["best_seconds"] = secs[0]
        result["seconds_runs"] = [round(r["seconds"], 4) for r in timed_runs]
        result["mib_per_s"] = round(size / MIB / result["seconds"], 1)
        result["gb_per_s"] = round(size / 1e9 / result["seconds"], 3)
        result["checked"] = result["runs"][-1].get("check") == "ok" and \
            result["runs"][-1].get("app", {}).get("sha256") == expect
    result["size_mib"] = size / MIB
    for r in result.get("runs", []):
        r.pop("latency_ms", None)
    return result


def bench_download(kind, client, workdir, size, runs, timeout, proto="fcgi", server_opts=None):
    save = os.path.join(workdir, "download.out")
    if proto == "fcgi":
        req = client.request("download-%d" % size, "/download?size=%d" % size)
    else:
        from bench import protocols
        req = protocols.request_file(client, proto, "/download?size=%d" % size)
    expect = apps.pattern_sha256(size)

    def build():
        return req, save, size + 4096

    def check(res, path):
        if not res.get("requests"):
            return "no answer"
        head, body = _read_saved(path, proto)
        if len(body) != size:
            return "length %d != %d" % (len(body), size)
        if "X-Sha256: %s" % expect not in head:
            return "X-Sha256 header missing or wrong"
        if hashlib.sha256(body).hexdigest() != expect:
            return "sha256 mismatch"
        return "ok"

    try:
        result = _transfer(kind, client, workdir, runs, build, check,
                           {"FLUPFAST_BENCH_DOWNLOAD_SIZES": str(size)}, timeout=timeout,
                           proto=proto, server_opts=server_opts)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(save)
    result["size_mib"] = size / MIB
    if "seconds" in result:
        result["mib_per_s"] = round(size / MIB / result["seconds"], 1)
        # every run's answer is checked (length, X-Sha256, sha256 of what arrived)
        result["checked"] = all(r.get("check") == "ok" for r in result["runs"])
    for r in result.get("runs", []):
        r.pop("latency_ms", None)
    return result


def bench_syscalls(kind, client, workdir, cfg, mode="thread", keep=True, count=2000,
                   proto="fcgi", server_opts=None):
    """strace -c -f on the server while one connection sends ``count`` hello requests."""
    srv = Server(kind, mode, "bench.apps:hello", workdir, protocol=proto,
                 **(server_opts or {}))
    if not srv.start(client):
        srv.stop()
        return {"error": "server did not start: %s" % srv.error}
    out_path = os.path.join(workdir, "strace-%s-%s.txt" % (kind, mode))
    try:
        cmd = ["strace", "-c", "-f", "-o", out_path]
        for pid in srv.pids():
            cmd += ["-p", str(pid)]
        tracer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # attach
        res = client.run(srv.address, "hello", conns=1, keep=keep, count=count,
                         deadline=60, proto=proto)
        time.sleep(0.2)
        tracer.send_signal(signal.SIGINT)
        try:
            tracer.wait(15)
        except subprocess.TimeoutExpired:
            tracer.kill()
            tracer.wait(5)
            return {"error": "strace did not detach"}
        calls = {}
        with open(out_path) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 5 and parts[0].replace(".", "").isdigit() and \
                        parts[-1] not in ("total",):
                    name = parts[-1]
                    with contextlib.suppress(ValueError):
                        calls[name] = int(parts[3])
        n = res.get("requests") or count
        per = {k: round(v / n, 2) for k, v in sorted(calls.items(), key=lambda kv: -kv[1])
               if v / n >= 0.05}
        return {"requests": res.get("requests"), "mode": mode, "keep_conn": keep,
                "per_request": per, "total_per_request": round(sum(calls.values()) / n, 2)}
    finally:
        srv.stop()


# -- report ----------------------------------------------------------------------------------

def _fmt(value, unit=""):
    if value is None:
        return "n/a"
    if isinstance(value, str):
        return value
    if value >= 100:
        return "%.0f%s" % (value, unit)
    if value >= 10:
        return "%.1f%s" % (value, unit)
    return "%.3g%s" % (value, unit)


def _best(r):
    """' (best X s)' when several timed runs were made."""
    if len(r.get("seconds_runs", ())) > 2 and r.get("best_seconds"):
        return " (best %s)" % _fmt(r["best_seconds"], " s")
    return ""


def build_rows(results, kinds):
    """[(metric, {kind: display}, {kind: number}, higher_is_better)]"""
    rows = []
    for mode in results.get("modes", ()) if results.get("hello") else ():
        for conn, conns, _ in HELLO_RUNS:
            if conns == 1 and mode != "thread":
                continue
            label = HELLO_LABELS[conn]
            disp, num = {}, {}
            for kind in kinds:
                r = results.get("hello", {}).get(kind, {}).get(mode, {})
                c = r.get(conn)
                if c is None:
                    disp[kind] = "failed: %s" % (r.get("error") or r.get("crashed") or "?")[:60]
                    continue
                num[kind] = c.get("rps") or None
                extra = []
                if c.get("errors"):
                    extra.append("%d errors" % c["errors"])
                if c.get("stalled_connections"):
                    extra.append("%d/%d conns stalled" % (c["stalled_connections"],
                                                          c["connections"]))
                disp[kind] = _fmt(c.get("rps")) + (" (%s)" % ", ".join(extra) if extra else "")
            rows.append(("hello req/s, %s mode, %d conn%s, %s" % (
                mode, conns or results["config"]["conns"], "s" if conns != 1 else "", label),
                disp, num, True))
            disp, num = {}, {}
            for kind in kinds:
                c = results.get("hello", {}).get(kind, {}).get(mode, {}).get(conn)
                if c:
                    num[kind] = c.get("latency_ms", {}).get("p99")
                    disp[kind] = _fmt(num[kind], " ms")
            rows.append(("  p99 latency (%s, %s)" % (mode, conn), disp, num, False))
            disp, num = {}, {}
            for kind in kinds:
                c = results.get("hello", {}).get(kind, {}).get(mode, {}).get(conn)
                if c and c.get("server_cpu_us_per_request"):
                    num[kind] = c["server_cpu_us_per_request"]
                    disp[kind] = _fmt(num[kind], " us")
            rows.append(("  server CPU per request (%s, %s)" % (mode, conn), disp, num, False))
    tr = results.get("transfers", {})
    for key, label in (("upload_read65536", "upload, app read(65536)"),
                       ("upload_readline", "upload, app readline()")):
        disp, num, sdisp, snum, rdisp, rnum = {}, {}, {}, {}, {}, {}
        for kind in kinds:
            r = tr.get(kind, {}).get(key)
            if not r:
                continue
            if r.get("mib_per_s"):
                num[kind] = r["mib_per_s"]
                disp[kind] = _fmt(r["mib_per_s"], " MiB/s") + (
                    " (INVALID: wsgi.input cuts pieces wrongly)" if r.get("invalid") else
                    "" if r.get("checked") else " (UNCHECKED)")
                snum[kind] = r["seconds"]
                sdisp[kind] = _fmt(r["seconds"], " s") + _best(r)
            else:
                disp[kind] = "failed: %s" % str(r.get("error"))[:60]
            if "peak_above_idle_mib" in r:
                rnum[kind] = r["peak_above_idle_mib"]
                rdisp[kind] = _fmt(r["peak_above_idle_mib"], " MiB")
        size = results["config"]["upload_mib"]
        rows.append(("%d MiB %s" % (size, label), disp, num, True))
        rows.append(("  seconds", sdisp, snum, False))
        rows.append(("  peak RSS above idle", rdisp, rnum, False))
    disp, num, sdisp, snum, rdisp, rnum = {}, {}, {}, {}, {}, {}
    for kind in kinds:
        r = tr.get(kind, {}).get("download")
        if not r:
            continue
        if r.get("seconds"):
            snum[kind] = r["seconds"]
            num[kind] = r["mib_per_s"]
            sdisp[kind] = _fmt(r["seconds"], " s") + _best(r) + (
                " (%g MiB)" % r["size_mib"] if r["size_mib"] != results["config"][
                    "download_mib"] else "")
            disp[kind] = _fmt(r["mib_per_s"], " MiB/s") + (
                " (at %g MiB)" % r["size_mib"] if r["size_mib"] != results["config"][
                    "download_mib"] else "")
        else:
            sdisp[kind] = "failed: %s" % str(r.get("error"))[:60]
        if "peak_above_idle_mib" in r:
            rnum[kind] = r["peak_above_idle_mib"]
            rdisp[kind] = _fmt(r["peak_above_idle_mib"], " MiB") + (
                " (%g MiB)" % r["size_mib"] if r["size_mib"] != results["config"][
                    "download_mib"] else "")
        big = tr.get(kind, {}).get("download_full")
        if big:
            if big.get("seconds"):
                sdisp[kind] += "; %g MiB: %s" % (big["size_mib"], _fmt(big["seconds"], " s"))
            elif big.get("timed_out_after"):
                sdisp[kind] += "; %g MiB: > %.0f s (timeout)" % (big["size_mib"],
                                                                 big["timed_out_after"])
    size = results["config"]["download_mib"]
    rows.append(("%d MiB download, one bytes object: seconds" % size, sdisp, snum, False))
    rows.append(("  throughput", disp, num, True))
    rows.append(("  peak RSS above idle", rdisp, rnum, False))
    for key, label in (("syscalls", "syscalls per request, thread mode, KEEP_CONN"),
                       ("syscalls_fork_new_connection",
                        "syscalls per request, fork mode, new connections (all processes)")):
        sc = results.get(key, {})
        if sc:
            disp, num = {}, {}
            for kind in kinds:
                r = sc.get(kind)
                if r and "total_per_request" in r:
                    num[kind] = r["total_per_request"]
                    disp[kind] = "%s: %s" % (_fmt(r["total_per_request"]), ", ".join(
                        "%s %g" % kv for kv in list(r["per_request"].items())[:5]))
                elif r:
                    disp[kind] = "failed: %s" % r.get("error")
            rows.append((label, disp, num, False))
    return rows


def render_table(results, kinds):
    rows = build_rows(results, kinds)
    others = [k for k in kinds if k != "flup"]
    head = ["metric"] + [KIND_LABEL[k] for k in kinds] + \
        ["%s vs flup" % KIND_LABEL[k].replace("flupfast ", "") for k in others
         if "flup" in kinds]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for metric, disp, num, higher in rows:
        cells = [metric] + [disp.get(k, "n/a") for k in kinds]
        if "flup" in kinds:
            for k in others:
                a, b = num.get(k), num.get("flup")
                if a and b and "RSS" not in metric and "syscalls" not in metric and \
                        "(at " not in disp.get("flup", "") and \
                        "MiB)" not in disp.get("flup", ""):
                    cells.append("%.2fx" % (a / b if higher else b / a))
                else:
                    cells.append("")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def evaluate_targets(results):
    """The targets of the issue, for the compiled backend (pure when it is not built)."""
    kind = "compiled" if "compiled" in results["kinds"] else "pure"
    out = []
    hello = results.get("hello", {})
    for conn in ("new", "keep", "new_1conn", "keep_1conn"):
        f = hello.get("flup", {}).get("thread", {}).get(conn, {}).get("rps")
        m = hello.get(kind, {}).get("thread", {}).get(conn, {}).get("rps")
        if f and m:
            out.append({"target": "%s, thread mode, %s: >= 6x flup requests/s" % (kind, conn),
                        "value": "%.2fx (%.0f vs %.0f req/s)" % (m / f, m, f),
                        "met": m / f >= 6})
    tr = results.get("transfers", {}).get(kind, {})
    d = tr.get("download", {})
    if d.get("seconds"):
        out.append({"target": "%s: %d MiB download <= 0.5 s" % (kind, d["size_mib"]),
                    "value": "median %.3f s, best %.3f s" % (d["seconds"], d["best_seconds"]),
                    "met": d["seconds"] <= 0.5})
    u = tr.get("upload_readline", {})
    if u.get("gb_per_s"):
        out.append({"target": "%s: %d MiB upload via readline() >= 1 GB/s" % (kind,
                                                                               u["size_mib"]),
                    "value": "median %.2f GB/s (%.3f s), best %.2f GB/s (%.3f s)" % (
                        u["gb_per_s"], u["seconds"], u["size_mib"] * MIB / 1e9 /
                        u["best_seconds"], u["best_seconds"]),
                    "met": u["gb_per_s"] >= 1.0})
    peaks = [(k, tr[k]["peak_above_idle_mib"]) for k in ("upload_read65536", "upload_readline",
                                                          "download")
             if k in tr and "peak_above_idle_mib" in tr[k]]
    if peaks:
        worst = max(p for _, p in peaks)
        out.append({"target": "%s: peak RSS <= 32 MiB above idle during each transfer" % kind,
                    "value": ", ".join("%s %.1f MiB" % kv for kv in peaks),
                    "met": worst <= 32})
    sc = results.get("syscalls", {}).get(kind, {}).get("per_request")
    if sc:
        recv = sum(v for k, v in sc.items() if k.startswith("recv") or k == "read")
        send = sum(v for k, v in sc.items() if k.startswith("send") or k.startswith("write"))
        total = results["syscalls"][kind]["total_per_request"]
        out.append({"target": "%s: one recv and one send per small request on a kept "
                              "connection" % kind,
                    "value": "%.2f recv, %.2f send, %.2f syscalls in all" % (recv, send, total),
                    "met": recv <= 1.05 and send <= 1.05})
    return out


def all_targets(results):
    from bench import fronts, protocols
    return fronts.evaluate_targets(results) + evaluate_targets(results) + \
        protocols.evaluate_targets(results)


def render_markdown(results):
    kinds = results["kinds"]
    m = results["survey"]["machine"]
    lines = ["# flupfast benchmark: FastCGI, SCGI, AJP13", "",
             "Run %s, %s mode, in %.0f s." % (results["started"], "quick" if
                                               results["config"]["quick"] else "full",
                                               results["elapsed_seconds"]), "",
             "Machine: %d CPUs (%s), Linux %s, Python %s; load average (1, 5, 15 min) at "
             "start %s, at the end %s." % (
                 m["nproc"], m["cpu"], m["kernel"], m["python"], m["loadavg_at_start"],
                 m.get("loadavg_at_end", "?")),
             "uWSGI %s, nginx %s, Apache %s, load client %s." % (
                 results["survey"].get("uwsgi") or "missing",
                 results["survey"].get("nginx_version") or "missing",
                 results["survey"].get("apache2_version") or "missing",
                 "wrk" if results["survey"].get("wrk") else "ab -k" if
                 results["survey"].get("ab") else "missing"),
             "flup %s; flupfast %s (git %s); compiled backend: %s." % (
                 results["survey"].get("flup"), results["survey"].get("flupfast"),
                 results["survey"].get("git", "?"),
                 "built" if results["survey"].get("compiled") else "NOT BUILT"), "",
             ]
    from bench import callgrind, fronts, protocols
    lines += fronts.render_section(results)
    lines += callgrind.render_section(results, kinds)
    if results.get("hello") or any(results.get("transfers", {}).values()) or \
            results.get("syscalls"):
        lines += ["## FastCGI direct, no front (Unix socket, fcgi_load)", "",
                  render_table(results, kinds), ""]
    lines += protocols.render_sections(results)
    if results.get("targets"):
        lines += ["## Targets", ""]
        for t in results["targets"]:
            lines.append("- %s: **%s** (%s)" % (t["target"], "met" if t["met"] else "NOT met",
                                                t["value"]))
        lines.append("")
    notes = results["survey"]["missing"] + results["survey"]["notes"] + results["notes"]
    for kind, parts in results.get("transfers", {}).items():
        for part, r in parts.items():
            if r.get("invalid"):
                notes.append("%s, %s: %s" % (KIND_LABEL[kind], part, r["invalid"]))
            if r.get("timed_out_after"):
                notes.append("%s, %s (%g MiB): no answer within %.0f s (timeout)" % (
                    KIND_LABEL[kind], part, r.get("size_mib", 0), r["timed_out_after"]))
            elif r.get("error") and not r.get("seconds"):
                notes.append("%s, %s failed: %s" % (KIND_LABEL[kind], part, r["error"]))
    if notes:
        lines += ["## Notes", ""] + ["- " + n for n in notes] + [""]
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------

class Config:
    def __init__(self, quick, args):
        self.quick = quick
        self.conns = args.conns
        self.rounds = args.rounds or (1 if quick else 3)
        self.duration = args.duration or (2.0 if quick else 4.0)
        self.warmup = 0.5 if quick else 1.0
        self.upload_size = args.upload_mib * MIB
        self.download_size = args.download_mib * MIB
        self.flup_download_size = args.flup_download_mib * MIB
        self.transfer_runs = 2 if quick else 6   # the last one is the checked (sha256) run
        self.transfer_timeout = 60.0
        self.flup_full_download_timeout = args.flup_full_timeout
        self.modes = args.modes.split(",")
        # SCGI and AJP rows (bench/protocols.py)
        self.proto_levels = args.log_levels.split(",") if args.log_levels else ["INFO"]
        self.proto_duration = args.duration or (1.0 if quick else 3.0)
        # flup's AJP upload costs ~40 ms per body packet (Nagle): measured at these sizes
        # (MiB) and extrapolated to --upload-mib; a run longer than flup_ajp_timeout is cut.
        self.flup_ajp_upload_mib = {8192: 0.5 if quick else 10, 65536: 2 if quick else 20}
        self.flup_apache_upload_mib = 2 if quick else 20
        self.flup_ajp_timeout = 30.0 if quick else 150.0
        self.flup_ajp_syscall_requests = 50 if quick else 200
        # behind real fronts (bench/fronts.py)
        self.front_rounds = args.rounds or (1 if quick else 3)
        self.front_duration = args.duration or (1.0 if quick else 2.0)
        self.front_app_duration = 1.0 if quick else 2.0
        self.front_warmup = 0 if quick else 1.0
        self.front_transfer_size = (20 if quick else 100) * MIB
        self.front_transfer_runs = 1 if quick else 3   # the last one is sha256-checked
        self.front_nokeep = not quick   # the "compiled, keep_conn off" column
        self.front_transfer_timeout = 20.0 if quick else 60.0
        # flup's quadratic FastCGI download and Nagle-bound AJP upload, measured smaller
        self.front_flup_slow_size = (2 if quick else 10) * MIB
        # instruction counts (bench/callgrind.py)
        self.callgrind_n = args.callgrind_n or (300 if quick else 500)
        self.callgrind_protocols = ("fcgi",) if quick else ("fcgi", "scgi", "ajp")

    def as_dict(self):
        return {"quick": self.quick, "conns": self.conns, "rounds": self.rounds,
                "duration": self.duration, "warmup": self.warmup,
                "upload_mib": self.upload_size // MIB, "download_mib": self.download_size // MIB,
                "flup_download_mib": self.flup_download_size // MIB,
                "transfer_runs": self.transfer_runs, "modes": self.modes,
                "proto_levels": self.proto_levels, "proto_duration": self.proto_duration,
                "flup_ajp_upload_mib": self.flup_ajp_upload_mib,
                "flup_apache_upload_mib": self.flup_apache_upload_mib,
                "flup_ajp_timeout": self.flup_ajp_timeout,
                "front_rounds": self.front_rounds, "front_duration": self.front_duration,
                "front_app_duration": self.front_app_duration,
                "front_transfer_runs": self.front_transfer_runs,
                "front_transfer_mib": self.front_transfer_size // MIB,
                "front_flup_slow_mib": self.front_flup_slow_size // MIB,
                "callgrind_n": self.callgrind_n,
                "callgrind_protocols": list(self.callgrind_protocols)}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (< 3 minutes)")
    parser.add_argument("--full", action="store_true",
                        help="the whole matrix (the default; see bench/README.md)")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="which servers (default flup,pure,compiled)")
    parser.add_argument("--modes", default="thread,fork", help="hello modes (thread,fork)")
    parser.add_argument("--only", default="",
                        help="which parts to run: fronts (behind nginx/Apache, vs flup and "
                        "uWSGI), callgrind (instructions per request), and the direct ones: "
                        "FastCGI hello,upload,download,syscalls; scgi; ajp (default: all; "
                        "--quick: %s)" % ",".join(QUICK_PARTS))
    parser.add_argument("--log-levels", default="",
                        help="direct SCGI/AJP servers' log levels (default INFO, as flup "
                        "runs by default; e.g. INFO,WARNING; the fronts run at WARNING)")
    parser.add_argument("--groups", default="",
                        help="fronts: which of fcgi-thread,fcgi-fork,scgi-fork,ajp-thread")
    parser.add_argument("--callgrind-n", type=int, default=0,
                        help="callgrind: N (and 2N) requests per count (default 300 in "
                        "--quick, 500)")
    parser.add_argument("--chart", default="",
                        help="also write the chart here (the full run: bench/chart.png)")
    parser.add_argument("--conns", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=0)
    parser.add_argument("--duration", type=float, default=0)
    parser.add_argument("--upload-mib", type=int, default=100)
    parser.add_argument("--download-mib", type=int, default=100)
    parser.add_argument("--flup-download-mib", type=int, default=20,
                        help="flup's download is quadratic: measured at this size")
    parser.add_argument("--flup-full-timeout", type=float, default=30.0,
                        help="full mode also tries flup at the full download size, this long")
    parser.add_argument("--output", default=str(BENCH / "results"))
    parser.add_argument("--render", metavar="JSON",
                        help="only print the Markdown report of an earlier run's JSON")
    args = parser.parse_args(argv)
    if args.render:
        with open(args.render) as f:
            results = json.load(f)
        results["targets"] = all_targets(results)
        print(render_markdown(results))
        return 0
    if args.quick and args.full:
        parser.error("--quick or --full, not both")
    cfg = Config(args.quick, args)
    only = set(args.only.split(",")) if args.only else set(QUICK_PARTS if args.quick
                                                            else PARTS)
    started = time.time()

    from bench import callgrind, fronts, protocols
    info = fronts.survey(survey())
    for item in info["missing"]:
        log("missing: " + item)
    for note in info["notes"]:
        log("note: " + note)
    if not info["cc"] or not info["flupfast"]:
        log("cannot run the benchmark without a C compiler and an importable flupfast")
        return 2
    kinds = [k for k in args.kinds.split(",") if k in KINDS]
    notes = []
    absent = {}   # kind -> why it is not run, shown in the fronts' cells
    if "flup" in kinds and not info["flup"]:
        kinds.remove("flup")
        absent["flup"] = "flup 1.0.3 is not installed"
        notes.append("flup is not installed: no comparison (pip install flup==1.0.3)")
    if "compiled" in kinds and not info["compiled"]:
        kinds.remove("compiled")
        absent["compiled"] = "the compiled backend is not built"
        notes.append("compiled backend skipped: flupfast._speedups is not built "
                     "(pip install -e . --no-build-isolation)")
    results = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "survey": info,
               "config": cfg.as_dict(), "kinds": kinds, "modes": cfg.modes, "notes": notes}

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)

    def save(final=False):
        # after every part, so an interrupted run keeps what it measured
        results["elapsed_seconds"] = round(time.time() - started, 1)
        results["complete"] = final
        (out / "latest.json").write_text(json.dumps(results, indent=2, default=str) + "\n")

    workdir = tempfile.mkdtemp(prefix="flupfast-bench-")
    try:
        client = LoadClient(workdir)
        if "fronts" in only:
            log("behind real fronts (nginx, Apache), vs flup and uWSGI")
            fronts.run_fronts(info, kinds, absent, client, workdir, cfg, results,
                              args.groups.split(",") if args.groups else None)
            save()
        if "callgrind" in only:
            callgrind.run_callgrind(kinds, cfg.callgrind_protocols, cfg.callgrind_n, client,
                                    workdir, results)
            save()
        if "hello" in only:
            log("hello world, %d connections, %d round(s) of %.1f s" % (
                cfg.conns, cfg.rounds, cfg.duration))
            bench_hello(kinds, cfg.modes, client, workdir, cfg, results)
        tr = results.setdefault("transfers", {})
        if "upload" in only:
            for mode_name in ("read65536", "readline"):
                for kind in kinds:
                    log("upload %d MiB, %s, %s" % (cfg.upload_size // MIB, mode_name,
                                                   KIND_LABEL[kind]))
                    r = bench_upload(kind, mode_name, client, workdir, cfg)
                    tr.setdefault(kind, {})["upload_" + mode_name] = r
                    log("    %s s, %s MiB/s, peak RSS +%s MiB %s" % (
                        r.get("seconds"), r.get("mib_per_s"), r.get("peak_above_idle_mib"),
                        r.get("error") or ""))
                client.drop("upload-%s-%d" % (mode_name, cfg.upload_size))
                client.drop("upload-%s-%d-sha" % (mode_name, cfg.upload_size))
        if "download" in only:
            for kind in kinds:
                size = cfg.flup_download_size if kind == "flup" else cfg.download_size
                log("download %d MiB, %s" % (size // MIB, KIND_LABEL[kind]))
                # flup's download is quadratic in the body size: one run of it is enough.
                runs = 1 if kind == "flup" else cfg.transfer_runs
                r = bench_download(kind, client, workdir, size, runs, cfg.transfer_timeout)
                tr.setdefault(kind, {})["download"] = r
                log("    %s s, %s MiB/s, peak RSS +%s MiB %s" % (
                    r.get("seconds"), r.get("mib_per_s"), r.get("peak_above_idle_mib"),
                    r.get("error") or ""))
                if kind == "flup" and not cfg.quick and size != cfg.download_size:
                    log("download %d MiB, flup, capped at %.0f s" % (
                        cfg.download_size // MIB, cfg.flup_full_download_timeout))
                    r = bench_download(kind, client, workdir, cfg.download_size, 1,
                                       cfg.flup_full_download_timeout)
                    tr[kind]["download_full"] = r
                    log("    %s" % (r.get("seconds") or "> %.0f s (timeout)" %
                                    cfg.flup_full_download_timeout))
        if "syscalls" in only and info["strace"]:
            sc = results.setdefault("syscalls", {})
            for kind in kinds:
                log("syscalls per request (strace -c -f), %s" % KIND_LABEL[kind])
                sc[kind] = bench_syscalls(kind, client, workdir, cfg)
                log("    %s" % sc[kind])
            if "fork" in cfg.modes:
                scf = results.setdefault("syscalls_fork_new_connection", {})
                for kind in kinds:
                    log("syscalls per request, fork mode, new connections, %s"
                        % KIND_LABEL[kind])
                    scf[kind] = bench_syscalls(kind, client, workdir, cfg, mode="fork",
                                               keep=False, count=1000)
                    log("    %s" % scf[kind])
        save()
        if "scgi" in only or "ajp" in only:
            strace = "syscalls" in only and bool(info["strace"])
            if "scgi" in only:
                protocols.run_scgi(kinds, client, workdir, cfg, results, strace)
            if "ajp" in only:
                protocols.run_ajp(kinds, client, workdir, cfg, results, strace)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    with contextlib.suppress(OSError), open("/proc/loadavg") as f:
        results["survey"]["machine"]["loadavg_at_end"] = " ".join(f.read().split()[:3])
    results["targets"] = all_targets(results)
    save(final=True)
    md = render_markdown(results)
    (out / "latest.md").write_text(md)
    print(md)
    from bench import chart
    charts = [out / "chart.png"] + ([Path(args.chart)] if args.chart else [])
    made = chart.draw(results, charts)
    log("wrote %s" % ", ".join(str(p) for p in [out / "latest.json", out / "latest.md"] +
                               (charts if made is True else [])))
    if made is not True:
        log("no chart: %s" % made)
    log("done in %.0f s" % results["elapsed_seconds"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
