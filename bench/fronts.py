"""Behind real fronts: flup 1.0.3, uWSGI, flupfast pure and flupfast compiled, side by side in
one run, each behind the same web server (called by bench/run.py; bench/README.md explains
the numbers).

  FastCGI, thread mode   nginx 1.22 fastcgi_pass  (uWSGI: --fastcgi-socket, 1 process x 16 threads)
  FastCGI, fork mode     nginx 1.22 fastcgi_pass  (uWSGI: --fastcgi-socket, 16 processes)
  SCGI, fork mode        nginx 1.22 scgi_pass     (uWSGI: --scgi-socket, 16 processes)
  AJP13, thread mode     Apache 2.4 mod_proxy_ajp (uWSGI has no AJP13: flup vs flupfast only)

One nginx (one worker, no access log) serves every FastCGI/SCGI backend, each on its own
port, over a Unix socket; flup and flupfast get ``fastcgi_keep_conn on`` with an upstream
``keepalive 16`` pool; uWSGI closes the connection after each FastCGI request whatever the
flag says, so it gets ``fastcgi_keep_conn off`` (and so does a second flupfast compiled
column, to show what the kept connection is worth). AJP13 goes through the bench's Apache
(bench/protocols.py: event MPM, one child of 32 threads, ProxyIOBufferSize 65536, pooled
backend connections). The load is ``wrk`` (HTTP/1.1 keep-alive, 1 thread, 16 connections;
``ab -k`` when wrk is missing).

Per backend: hello, /sleep (50 ms: the requests/s show how many requests run at once, i.e.
whether the pool grows to the 16 connections), /cpu (about 2 ms of pure Python), a 100 MiB
upload (read(65536), sha256 checked by the app on the last run) and a 100 MiB download (one
bytes object; length and sha256 checked by the client), with the backend's memory: the
proportional set size (PSS) summed over its process tree, idle vs peak (PSS, not RSS, so a
fork pool's shared pages are counted once). The front's own cost is measured too: nginx and
Apache serving the 100 MiB as a static file, and nginx reading and discarding a 100 MiB POST.

Every wait is bounded (wrk -d and --timeout plus a subprocess timeout, socket timeouts on the
transfers, servers stopped by PID); a backend that dies during its runs is reported so.
"""
import contextlib
import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

from bench import apps
from bench.run import MIB, ROOT, START_TIMEOUT, Server, _connect, _fmt, log, process_tree
from bench import protocols

NGINX = "/usr/sbin/nginx"
WRK = shutil.which("wrk")
AB = shutil.which("ab")
GROUPS = (
    # key, protocol, mode, front
    ("fcgi-thread", "fcgi", "thread", "nginx"),
    ("fcgi-fork", "fcgi", "fork", "nginx"),
    ("scgi-fork", "scgi", "fork", "nginx"),
    ("ajp-thread", "ajp", "thread", "apache"),
)
GROUP_LABEL = {
    "fcgi-thread": "FastCGI, thread mode, nginx", "fcgi-fork": "FastCGI, fork mode, nginx",
    "scgi-fork": "SCGI, fork mode, nginx", "ajp-thread": "AJP13, thread mode, Apache",
}
# (variant, server kind, nginx fastcgi_keep_conn)
VARIANTS = (("flup", "flup", True), ("uwsgi", "uwsgi", False), ("pure", "pure", True),
            ("compiled", "compiled", True), ("compiled_nokeep", "compiled", False))
VARIANT_LABEL = {"flup": "flup 1.0.3", "uwsgi": "uWSGI", "pure": "flupfast pure",
                 "compiled": "flupfast compiled",
                 "compiled_nokeep": "flupfast compiled, keep_conn off"}
UWSGI_WORKERS = 16


def find_uwsgi():
    """The uwsgi binary: $FLUPFAST_BENCH_UWSGI, PATH, or next to this Python."""
    for cand in (os.environ.get("FLUPFAST_BENCH_UWSGI"), shutil.which("uwsgi"),
                 os.path.join(os.path.dirname(sys.executable), "uwsgi")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def survey(info):
    """Add the fronts' peers to run.survey()'s ``info``: what is there, what is missing."""
    uwsgi = find_uwsgi()
    info["uwsgi"] = None
    if uwsgi:
        with contextlib.suppress(Exception):
            out = subprocess.run([uwsgi, "--version"], capture_output=True, timeout=20)
            info["uwsgi"] = out.stdout.decode().strip() or None
            info["uwsgi_path"] = uwsgi
    if not info["uwsgi"]:
        info["missing"].append("uWSGI (pip install uwsgi: builds from source, needs gcc and "
                               "the Python headers): no uWSGI columns")
    for key, path, what in (("nginx", NGINX, "nginx (apt-get install nginx): no FastCGI/"
                                              "SCGI rows behind nginx"),
                            ("apache2", protocols.APACHE, "apache2 (apt-get install "
                                                          "apache2): no AJP13 rows behind "
                                                          "Apache")):
        info[key] = path if os.access(path, os.X_OK) else None
        if not info[key]:
            info["missing"].append(what)
    if info["nginx"]:
        with contextlib.suppress(Exception):
            out = subprocess.run([NGINX, "-v"], capture_output=True, timeout=10)
            info["nginx_version"] = out.stderr.decode().strip().split("/")[-1]
    if info["apache2"]:
        with contextlib.suppress(Exception):
            out = subprocess.run([protocols.APACHE, "-v"], capture_output=True, timeout=10)
            m = re.search(r"Apache/([\d.]+)", out.stdout.decode())
            info["apache2_version"] = m.group(1) if m else None
    info["wrk"] = WRK
    info["ab"] = AB
    if not WRK:
        info["missing"].append("wrk (apt-get install wrk)%s" % (
            ": using ab -k instead" if AB else ", and ab (apache2-utils): no rows behind "
                                               "fronts"))
    try:
        import matplotlib
        info["matplotlib"] = matplotlib.__version__
    except Exception as exc:  # any failure: no chart
        info["matplotlib"] = None
        info["missing"].append("matplotlib (pip install -e '.[bench]'): no chart (%s)"
                               % type(exc).__name__)
    info["valgrind"] = shutil.which("valgrind")
    if not info["valgrind"]:
        info["missing"].append("valgrind (apt-get install valgrind): no instruction counts")
    if os.geteuid() != 0 and (info["nginx"] or info["apache2"]):
        info["missing"].append("root: nginx and Apache are started as root (they switch "
                               "their workers' user); no rows behind fronts")
        info["nginx"] = info["apache2"] = None
    return info


# -- uWSGI -----------------------------------------------------------------------------------

class UWSGIServer(Server):
    """uWSGI with the bench app: master (stopped by SIGTERM thanks to --die-on-term), no
    request log; thread mode is 1 process x 16 threads, fork mode 16 processes."""

    def __init__(self, *args, binary, **kw):
        super().__init__(*args, **kw)
        self.binary = binary

    def command(self):
        flag = {"fcgi": "--fastcgi-socket", "scgi": "--scgi-socket"}[self.protocol]
        workers = ["--processes", "1", "--threads", str(UWSGI_WORKERS)] \
            if self.mode == "thread" else ["--processes", str(UWSGI_WORKERS)]
        return [self.binary, "--master", "--die-on-term", "--need-app", "--disable-logging",
                "--pythonpath", str(ROOT), "--module", self.app, flag, self.sock_path,
                "--listen", "100", "--buffer-size", "32768"] + workers


# -- memory ----------------------------------------------------------------------------------

def _pss(pid):
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_pss(root):
    return sum(_pss(p) for p in process_tree(root))


class PSSSampler:
    """The PSS of a server's process tree, summed, every ``interval`` seconds: idle (at
    start) and peak."""

    def __init__(self, root, interval):
        self.root, self.interval = root, interval
        self.idle = self.peak = tree_pss(root)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, tree_pss(self.root))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)
        self.peak = max(self.peak, tree_pss(self.root))
        return False

    def as_dict(self):
        return {"idle_mib": round(self.idle / MIB, 1), "peak_mib": round(self.peak / MIB, 1),
                "peak_above_idle_mib": round((self.peak - self.idle) / MIB, 1),
                "processes": len(process_tree(self.root))}


# -- nginx -----------------------------------------------------------------------------------

NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 1;
user root root;
error_log {root}/error.log warn;
pid {root}/nginx.pid;
worker_rlimit_nofile 4096;

events {{
    worker_connections 2048;
}}

http {{
    access_log off;
    client_body_temp_path {root}/tmp/client_body;
    fastcgi_temp_path {root}/tmp/fastcgi;
    proxy_temp_path {root}/tmp/proxy;
    uwsgi_temp_path {root}/tmp/uwsgi;
    scgi_temp_path {root}/tmp/scgi;
    client_max_body_size 0;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
{servers}
    # The front's own cost: a static file, and a POST read and thrown away; /fwd/ the same
    # through nginx's own proxy (buffered as the backends' bodies are): nginx forwarding
    # 100 MiB to and from a backend that costs nothing.
    server {{
        listen 127.0.0.1:{static_port};
        root {root}/static;
        location = /discard {{
            return 204;
        }}
        location /fwd/ {{
            proxy_pass http://127.0.0.1:{static_port}/;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""

NGINX_FCGI_SERVER = """
    upstream b{n} {{
        server unix:{sock};
        {keepalive}
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_NAME "";
            fastcgi_param PATH_INFO $uri;
            fastcgi_pass b{n};
            fastcgi_keep_conn {keep};
            fastcgi_read_timeout {timeout}s;
            fastcgi_send_timeout {timeout}s;
        }}
    }}
"""

NGINX_SCGI_SERVER = """
    server {{
        listen 127.0.0.1:{port};
        location / {{
            include /etc/nginx/scgi_params;
            scgi_param SCRIPT_NAME "";
            scgi_param PATH_INFO $uri;
            scgi_pass unix:{sock};
            scgi_read_timeout {timeout}s;
            scgi_send_timeout {timeout}s;
        }}
    }}
"""


class Nginx:
    """nginx in the foreground from its own config; ``backends`` maps a key to (protocol,
    Unix socket path, keep_conn); ``ports[key]`` is where each is served, ``ports["static"]``
    the static server (``static_root``)."""

    def __init__(self, workdir, backends, timeout, static_root):
        self.root = os.path.join(workdir, "nginx")
        os.makedirs(os.path.join(self.root, "tmp"), exist_ok=True)
        if os.path.lexists(os.path.join(self.root, "static")):
            os.unlink(os.path.join(self.root, "static"))
        os.symlink(static_root, os.path.join(self.root, "static"))
        self.ports = {}
        servers = []
        for n, (key, (proto, sock, keep)) in enumerate(backends.items()):
            self.ports[key] = protocols.free_port()
            template = NGINX_FCGI_SERVER if proto == "fcgi" else NGINX_SCGI_SERVER
            servers.append(template.format(n=n, sock=sock, port=self.ports[key],
                                           keep="on" if keep else "off",
                                           keepalive="keepalive 16;" if keep else "",
                                           timeout=int(timeout)))
        self.ports["static"] = protocols.free_port()
        self.conf = os.path.join(self.root, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(NGINX_CONF.format(root=self.root, servers="".join(servers),
                                      static_port=self.ports["static"]))
        self.proc = None
        self.error = None
        self.notes = []

    def start(self):
        self._log = open(os.path.join(self.root, "stdout.log"), "wb")
        self.proc = subprocess.Popen(
            [NGINX, "-p", self.root, "-c", self.conf, "-e", os.path.join(self.root,
                                                                        "error.log")],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.error = "nginx exited with %s: %s" % (self.proc.returncode,
                                                           self.log_tail())
                return False
            with contextlib.suppress(OSError):
                _connect("127.0.0.1:%d" % self.ports["static"])
                return True
            time.sleep(0.05)
        self.error = "nginx did not listen within %.0f s" % START_TIMEOUT
        return False

    def log_tail(self, size=800):
        text = ""
        for name in ("stdout.log", "error.log"):
            with contextlib.suppress(OSError), open(os.path.join(self.root, name), "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - size))
                text += f.read().decode("utf-8", "replace").strip() + " "
        return text.strip()

    def stop(self):
        protocols.stop_front(self, "nginx")


# -- load --------------------------------------------------------------------------------------

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def run_wrk(port, path, conns, duration):
    """wrk (1 thread, ``conns`` keep-alive connections) for ``duration`` s -> dict with rps,
    requests, p99_ms, errors (socket errors), non_2xx; ``error`` when it did not run.
    Falls back to ``ab -k`` (whole seconds) when wrk is missing."""
    url = "http://127.0.0.1:%d%s" % (port, path)
    if not WRK:
        return _run_ab(url, conns, duration)
    duration = max(1, int(round(duration)))  # wrk takes whole seconds
    cmd = [WRK, "-t1", "-c%d" % conns, "-d%ds" % duration, "--timeout", "10s", "--latency",
           url]
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=duration + 30)
    except subprocess.TimeoutExpired:
        return {"error": "wrk did not finish within %.0f s" % (duration + 30)}
    text = out.stdout.decode("utf-8", "replace")
    res = parse_wrk(text)
    if out.returncode != 0 or res is None:
        return {"error": (out.stderr.decode("utf-8", "replace") or text).strip()[-300:]}
    return res


def parse_wrk(text):
    """wrk's report -> dict (rps, requests, p99_ms, errors, non_2xx), None without a rate."""
    m = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if not m:
        return None
    res = {"rps": float(m.group(1))}
    m = re.search(r"(\d+) requests in ([\d.]+)(\w+),", text)
    if m:
        res["requests"] = int(m.group(1))
    m = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s|m)\s*$", text, re.M)
    if m:
        res["p99_ms"] = round(float(m.group(1)) * _UNITS[m.group(2)], 3)
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    res["errors"] = sum(int(x) for x in m.groups()) if m else 0
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    res["non_2xx"] = int(m.group(1)) if m else 0
    if res["non_2xx"] and res.get("requests"):
        # only the answers that succeeded count (a 502 from the front is fast)
        res["rps_all"] = res["rps"]
        res["rps"] = round(res["rps"] * max(0, res["requests"] - res["non_2xx"]) /
                           res["requests"], 2)
    return res


def _run_ab(url, conns, duration):
    duration = max(1, int(round(duration)))
    cmd = [AB, "-q", "-k", "-c", str(conns), "-t", str(duration), "-n",
           str(30000 * duration), url]
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=duration + 30)
    except subprocess.TimeoutExpired:
        return {"error": "ab did not finish within %.0f s" % (duration + 30)}
    text = out.stdout.decode("utf-8", "replace")
    m = re.search(r"^Requests per second:\s+([\d.]+)", text, re.M)
    if not m:
        return {"error": (out.stderr.decode("utf-8", "replace") or text).strip()[-300:]}
    res = {"rps": float(m.group(1)), "errors": 0, "non_2xx": 0}
    for key, label in (("requests", "Complete requests"), ("errors", "Failed requests"),
                       ("non_2xx", "Non-2xx responses")):
        m = re.search(r"^%s:\s+(\d+)" % label, text, re.M)
        if m:
            res[key] = int(m.group(1))
    m = re.search(r"^\s+99%\s+(\d+)", text, re.M)
    if m:
        res["p99_ms"] = float(m.group(1))
    return res


# -- one group ---------------------------------------------------------------------------------

class _Group:
    """The backends of one (protocol, mode, front) and their results."""

    def __init__(self, key, proto, mode, front, variants, info, workdir, download_size,
                 kinds, absent):
        self.key, self.proto, self.mode, self.front = key, proto, mode, front
        self.servers = {}
        self.out = {"label": GROUP_LABEL[key], "protocol": proto, "mode": mode,
                    "front": front, "servers": {}}
        env = {"FLUPFAST_BENCH_DOWNLOAD_SIZES": str(download_size)}
        for variant, kind, keep in variants:
            if proto != "fcgi" and variant == "compiled_nokeep":
                continue
            res = self.out["servers"].setdefault(variant, {})
            if kind != "uwsgi" and kind not in kinds:
                res["not_run"] = absent.get(kind, "not selected (--kinds)")
                continue
            if kind == "uwsgi":
                if proto == "ajp":
                    res["not_run"] = "uWSGI has no AJP13"
                    continue
                if not info.get("uwsgi"):
                    res["not_run"] = "uWSGI is not installed (pip install uwsgi)"
                    continue
                srv = UWSGIServer(kind, mode, "bench.apps:app", workdir, env, protocol=proto,
                                  binary=info["uwsgi_path"])
            else:
                extra = ["--ajp-packet-size", "65536"] if proto == "ajp" else []
                srv = Server(kind, mode, "bench.apps:app", workdir, env, protocol=proto,
                             tcp=proto == "ajp", log_level="WARNING", extra_args=extra)
            srv.keep = keep
            self.servers[variant] = srv

    def backends(self):
        """What the front's config needs: key -> (protocol, socket, keep) or AJP port."""
        if self.front == "nginx":
            return {(self.key, v): (self.proto, s.sock_path, s.keep)
                    for v, s in self.servers.items()}
        return {(self.key, v): s.port for v, s in self.servers.items()}

    def alive(self, variant):
        srv = self.servers.get(variant)
        res = self.out["servers"][variant]
        if srv is None or res.get("not_run") or res.get("error"):
            return False
        if srv.proc is None or srv.proc.poll() is not None:
            if not res.get("died"):
                res["died"] = "died mid-run (exit status %s): %s" % (
                    srv.proc.returncode if srv.proc else "?", srv.log_tail(300))
                log("    %s %s: %s" % (self.key, variant, res["died"]))
            return False
        return True

    def stop(self):
        """Stop every backend, all at once (flup's prefork parent alone takes a grace period
        and a poke; one after the other they would add up)."""
        for variant, srv in self.servers.items():
            res = self.out["servers"][variant]
            if srv.proc is not None and srv.proc.poll() is not None and not res.get("died") \
                    and not res.get("error"):
                res["died"] = "exited with %s: %s" % (srv.proc.returncode, srv.log_tail(300))
        threads = [threading.Thread(target=srv.stop) for srv in self.servers.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for variant, srv in self.servers.items():
            if srv.notes:
                self.out["servers"][variant]["stop_notes"] = srv.notes


def _median(runs, key):
    vals = sorted((r for r in runs if r.get(key)), key=lambda r: r[key])
    if not vals:
        return dict(runs[-1]) if runs else {}
    best = dict(vals[len(vals) // 2])
    best[key + "_rounds"] = [r.get(key) for r in runs]
    return best


def _load_phase(group, ports, cfg):
    """hello (rounds interleaved over the backends), then /sleep and /cpu."""
    variants = [v for v in group.servers if group.alive(v)]
    samplers = {}
    for v in variants:
        if cfg.front_warmup:
            run_wrk(ports[v], "/", cfg.conns, cfg.front_warmup)  # connections, pools
        samplers[v] = PSSSampler(group.servers[v].proc.pid, 0.2).__enter__()
    runs = {}
    try:
        for rnd in range(cfg.front_rounds):
            for v in variants:
                if not group.alive(v):
                    continue
                res = run_wrk(ports[v], "/", cfg.conns, cfg.front_duration)
                runs.setdefault(v, []).append(res)
                log("  round %d %-11s %-32s %8.0f req/s  p99 %s ms  errors %s  non-2xx %s%s"
                    % (rnd + 1, group.key, VARIANT_LABEL[v], res.get("rps") or 0,
                       res.get("p99_ms"), res.get("errors"), res.get("non_2xx"),
                       "  " + res["error"] if res.get("error") else ""))
        for name, path in (("sleep", "/sleep"), ("cpu", "/cpu")):
            for v in variants:
                if not group.alive(v):
                    continue
                res = run_wrk(ports[v], path, cfg.conns, cfg.front_app_duration)
                if name == "sleep" and res.get("rps"):
                    # Little's law: requests in the app at once = rate x time in the app
                    res["concurrency"] = round(res["rps"] * apps.SLEEP_SECONDS, 1)
                group.out["servers"][v][name] = res
                log("  %-5s %-11s %-32s %8.0f req/s%s%s" % (
                    name, group.key, VARIANT_LABEL[v], res.get("rps") or 0,
                    "  concurrency %s of %d" % (res.get("concurrency"), cfg.conns)
                    if name == "sleep" else "", "  " + res["error"] if res.get("error")
                    else ""))
    finally:
        for v, s in samplers.items():
            s.__exit__(None, None, None)
            group.out["servers"][v]["memory_load"] = s.as_dict()
    for v, rs in runs.items():
        group.out["servers"][v]["hello"] = _median(rs, "rps")
    for v in variants:
        group.alive(v)


def _transfer_size(group, variant, what, cfg):
    """flup's known-slow transfers are measured smaller (and said so): FastCGI download
    (quadratic copy, inventory), AJP upload and download (a Nagle + delayed-ACK wait per
    packet: 20 MiB down took 12 s)."""
    if variant == "flup" and ((group.proto == "fcgi" and what == "download") or
                              group.proto == "ajp"):
        return cfg.front_flup_slow_size
    return cfg.front_transfer_size


def _http(port, method, path, body, timeout):
    """(dict with the error, or None), (status, head, answer, seconds)."""
    try:
        return None, protocols.http_request(port, method, path, body, timeout=timeout)
    except OSError as exc:
        timed_out = isinstance(exc, socket.timeout)
        return {"error": "no answer within %.0f s (timeout)" % timeout if timed_out
                else repr(exc), "timed_out": timed_out}, None


def upload_once(port, size, body, expect, check, timeout):
    """One POST of ``body`` to /upload; -> dict (seconds, check: "ok" or what is wrong)."""
    failed, answer = _http(port, "POST", "/upload?mode=read65536&check=%s" % check, body,
                           timeout)
    if failed:
        return dict(failed, check_mode=check)
    status, _, data, secs = answer
    return {"check_mode": check, "seconds": round(secs, 4),
            "check": protocols.check_upload_answer(status, data, size, check, expect)}


def download_once(port, path, size, expect, timeout):
    failed, answer = _http(port, "GET", path, None, timeout)
    if failed:
        return failed
    status, head, body, secs = answer
    m = re.search(r"^X-Sha256:\s*(\w+)", head, re.M | re.I)
    got = hashlib.sha256(body).hexdigest()
    if status != 200:
        check = "status %d" % status
    elif len(body) != size:
        check = "length %d != %d" % (len(body), size)
    elif got != expect or (m is not None and m.group(1) != expect):
        check = "sha256 mismatch"
    else:
        check = "ok"
    return {"seconds": round(secs, 4), "check": check}


def _summarise(runs, size):
    r = {"size_mib": size / MIB, "runs": runs}
    good = [x for x in runs if x.get("check") == "ok"]
    timed = [x for x in good if x.get("check_mode") != "sha256"] or good
    if timed:
        secs = sorted(x["seconds"] for x in timed)
        r["seconds"] = secs[len(secs) // 2]
        r["best_seconds"] = secs[0]
        r["mib_per_s"] = round(size / MIB / r["seconds"], 1)
        r["checked"] = all(x.get("check") == "ok" for x in runs)
    else:
        last = runs[-1] if runs else {}
        r["error"] = last.get("error") or last.get("check") or "no run"
        if last.get("timed_out"):
            r["timed_out"] = True
    return r


def _transfer_phase(group, ports, cfg, bodies):
    for v in list(group.servers):
        for what in ("upload", "download"):
            if not group.alive(v):
                continue
            srv = group.servers[v]
            size = _transfer_size(group, v, what, cfg)
            timeout = cfg.front_transfer_timeout
            runs = []
            # flup's slow transfers (measured smaller): one sha256-checked run
            count = 1 if size != cfg.front_transfer_size else cfg.front_transfer_runs
            with PSSSampler(srv.proc.pid, 0.02) as sampler:
                for i in range(count):
                    if what == "upload":
                        body, expect = bodies(size)
                        check = "sha256" if i == count - 1 else "len"
                        one = upload_once(ports[v], size, body, expect, check, timeout)
                    else:
                        expect = bodies(size)[1]
                        one = download_once(ports[v], "/download?size=%d" % size, size,
                                            expect, timeout)
                    runs.append(one)
                    if one.get("error") or one.get("check") != "ok" or not group.alive(v):
                        break
            r = _summarise(runs, size)
            r["memory"] = sampler.as_dict()
            group.out["servers"][v][what] = r
            log("  %-8s %-11s %-32s %s MiB: %s s, peak PSS +%s MiB %s" % (
                what, group.key, VARIANT_LABEL[v], size // MIB, r.get("seconds"),
                r["memory"]["peak_above_idle_mib"], r.get("error") or ""))


def _check_front(group, ports):
    """Every backend answers hello through the front (status and body checked)."""
    for v, srv in group.servers.items():
        res = group.out["servers"][v]
        if not group.alive(v):
            continue
        try:
            status, _, body, _ = protocols.http_request(ports[v], "GET", "/", timeout=20)
        except OSError as exc:
            status, body = 0, repr(exc).encode()
        if status != 200 or body != apps.HELLO:
            res["error"] = "hello through %s: status %d, body %r" % (group.front, status,
                                                                    body[:100])
            log("    %s %s: %s" % (group.key, v, res["error"]))


def run_group(group, front, cfg, client, bodies):
    for v, srv in group.servers.items():
        log("  starting %s (%s)" % (VARIANT_LABEL[v], GROUP_LABEL[group.key]))
        if not srv.start(client):
            group.out["servers"][v]["error"] = "did not start: %s" % srv.error
            log("    FAILED: %s" % srv.error)
    ports = {v: front.ports[group.key, v] for v in group.servers}
    _check_front(group, ports)
    _load_phase(group, ports, cfg)
    _transfer_phase(group, ports, cfg, bodies)


def _front_cost(port, cfg, bodies, static_name, upload_path, prefix=""):
    """The front alone: ``prefix + static_name`` downloaded, ``prefix + upload_path`` (a
    location that answers 204 without a backend) uploaded to."""
    out = {}
    size = cfg.front_transfer_size
    runs = [download_once(port, prefix + "/" + static_name, size, bodies(size)[1],
                          cfg.front_transfer_timeout) for _ in range(cfg.front_transfer_runs)]
    out["download"] = _summarise(runs, size)
    if upload_path:
        size = cfg.front_transfer_size
        body = bodies(size)[0]
        runs = []
        for _ in range(cfg.front_transfer_runs):
            failed, answer = _http(port, "POST", prefix + upload_path, body,
                                   cfg.front_transfer_timeout)
            runs.append(failed or {"seconds": round(answer[3], 4), "check": "ok" if
                                   answer[0] == 204 else "status %d" % answer[0]})
        out["upload"] = _summarise(runs, size)
    return out


def run_fronts(info, kinds, absent, client, workdir, cfg, results, only_groups=None):
    """Fill results["fronts"]. ``kinds``: the flup/flupfast kinds to run; ``absent``: kind ->
    why it is not run (shown in its cells)."""
    out = results.setdefault("fronts", {"groups": {}, "front_cost": {}})
    groups = [g for g in GROUPS if only_groups is None or g[0] in only_groups]
    cache = {}

    def bodies(size):
        if size not in cache:
            if len(cache) > 1:
                cache.clear()
            cache[size] = (apps.pattern_bytes(size), apps.pattern_sha256(size))
        return cache[size]

    static_root = os.path.join(workdir, "static")
    os.makedirs(static_root, exist_ok=True)
    os.chmod(static_root, 0o755)
    static_name = "big.bin"
    with open(os.path.join(static_root, static_name), "wb") as f:
        f.write(bodies(cfg.front_transfer_size)[0])
    os.chmod(os.path.join(static_root, static_name), 0o644)
    load_ok = bool(WRK or AB)
    built = []
    for key, proto, mode, front in groups:
        g = _Group(key, proto, mode, front, VARIANTS if cfg.front_nokeep else
                   [v for v in VARIANTS if v[0] != "compiled_nokeep"], info, workdir,
                   cfg.front_transfer_size, kinds, absent)
        out["groups"][key] = g.out
        why = None
        if not load_ok:
            why = "no HTTP load client (apt-get install wrk)"
        elif front == "nginx" and not info.get("nginx"):
            why = "nginx is not installed or not usable (run as root)"
        elif front == "apache" and not info.get("apache2"):
            why = "apache2 is not installed or not usable (run as root)"
        if why:
            for res in g.out["servers"].values():
                res.setdefault("not_run", why)
            continue
        built.append(g)
    nginx_groups = [g for g in built if g.front == "nginx"]
    ajp_groups = [g for g in built if g.front == "apache"]
    if nginx_groups:
        backends = {}
        for g in nginx_groups:
            backends.update(g.backends())
        nginx = Nginx(workdir, backends, cfg.front_transfer_timeout + 30, static_root)
        log("fronts: starting nginx (1 worker) for %s" % ", ".join(g.key for g in
                                                                    nginx_groups))
        try:
            if not nginx.start():
                log("    FAILED: %s" % nginx.error)
                for g in nginx_groups:
                    for res in g.out["servers"].values():
                        res.setdefault("not_run", "nginx did not start: %s" % nginx.error)
            else:
                log("fronts: nginx's own cost (static %d MiB file, discarded POST)"
                    % (cfg.front_transfer_size // MIB))
                out["front_cost"]["nginx"] = _front_cost(nginx.ports["static"], cfg, bodies,
                                                         static_name, "/discard", "/fwd")
                if not cfg.quick:
                    out["front_cost"]["nginx_static"] = _front_cost(
                        nginx.ports["static"], cfg, bodies, static_name, "/discard")
                for g in nginx_groups:
                    log("fronts: %s" % GROUP_LABEL[g.key])
                    try:
                        run_group(g, nginx, cfg, client, bodies)
                    finally:
                        g.stop()
                    if nginx.proc.poll() is not None:
                        out["front_error"] = "nginx died: %s" % nginx.log_tail()
                        break
        finally:
            nginx.stop()
    for g in ajp_groups:
        log("fronts: %s" % GROUP_LABEL[g.key])
        try:
            for v, srv in g.servers.items():
                log("  starting %s (%s)" % (VARIANT_LABEL[v], GROUP_LABEL[g.key]))
                if not srv.start(client):
                    g.out["servers"][v]["error"] = "did not start: %s" % srv.error
                    log("    FAILED: %s" % srv.error)
            apache = protocols.Apache(workdir, g.backends(), cfg.front_transfer_timeout + 30,
                                      static_root=static_root)
            log("  starting apache2 (mod_proxy_ajp)")
            try:
                if not apache.start():
                    for res in g.out["servers"].values():
                        res.setdefault("not_run", "apache2 did not start: %s" % apache.error)
                    continue
                log("fronts: Apache's own cost (static %d MiB file)" % (
                    cfg.front_transfer_size // MIB))
                out["front_cost"]["apache"] = _front_cost(apache.ports["static"], cfg,
                                                          bodies, static_name, None, "/fwd")
                if not cfg.quick:
                    out["front_cost"]["apache_static"] = _front_cost(
                        apache.ports["static"], cfg, bodies, static_name, None)
                ports = {v: apache.ports[g.key, v] for v in g.servers}
                _check_front(g, ports)
                _load_phase(g, ports, cfg)
                _transfer_phase(g, ports, cfg, bodies)
            finally:
                # flup's AJP backends first (Apache's children otherwise outlive SIGTERM),
                # then Apache, then the rest (see protocols.run_apache).
                flup = g.servers.get("flup")
                if flup is not None:
                    flup.stop()
                apache.stop()
        finally:
            g.stop()
    cache.clear()
    return out


# -- report ------------------------------------------------------------------------------------

def _cell(res, what, fmt):
    if res.get("not_run"):
        return "not run: " + res["not_run"]
    r = res.get(what)
    if r is None:
        why = res.get("error") or res.get("died")
        return ("failed: " + why[:80]) if why else "n/a"
    return fmt(r)


def _value(res, what, key):
    r = res.get(what) or {}
    return r.get(key) or None


def rows_for(group, size_mib):
    """[(metric, {variant: display}, {variant: number}, higher_is_better)]; transfers of
    ``size_mib`` (flup's slow ones may be smaller: shown, and no ratio)."""
    servers = group["servers"]
    rows = []

    def hello_fmt(r):
        if r.get("error"):
            return "failed: " + r["error"][:80]
        extra = []
        if r.get("errors"):
            extra.append("%d socket errors" % r["errors"])
        if r.get("non_2xx"):
            extra.append("%d non-2xx" % r["non_2xx"])
        return _fmt(r.get("rps")) + (" (%s)" % ", ".join(extra) if extra else "")

    def died_suffix(res):
        return " (%s)" % res["died"][:60] if res.get("died") else ""

    disp = {v: _cell(res, "hello", hello_fmt) + died_suffix(res) for v, res in servers.items()}
    num = {v: _value(res, "hello", "rps") for v, res in servers.items()}
    rows.append(("hello req/s", disp, num, True))
    disp = {v: _cell(res, "hello", lambda r: _fmt(r.get("p99_ms"), " ms"))
            for v, res in servers.items()}
    num = {v: _value(res, "hello", "p99_ms") for v, res in servers.items()}
    rows.append(("  p99 latency", disp, num, False))
    disp = {v: _cell(res, "sleep", lambda r: "%s (%s at once)" % (
        _fmt(r.get("rps")), r.get("concurrency")) if r.get("rps") else
        "failed: %s" % r.get("error", "?")[:60]) for v, res in servers.items()}
    num = {v: _value(res, "sleep", "rps") for v, res in servers.items()}
    rows.append(("sleep 50 ms: req/s (requests at once)", disp, num, True))
    disp = {v: _cell(res, "cpu", lambda r: _fmt(r.get("rps")) if r.get("rps") else
                     "failed: %s" % r.get("error", "?")[:60]) for v, res in servers.items()}
    num = {v: _value(res, "cpu", "rps") for v, res in servers.items()}
    rows.append(("~2 ms CPU: req/s", disp, num, True))
    disp = {v: _cell(res, "memory_load", lambda r: "%s -> %s MiB (%d proc)" % (
        r["idle_mib"], r["peak_mib"], r["processes"])) for v, res in servers.items()}
    rows.append(("  memory (PSS of the tree) idle -> peak under load", disp, {}, False))
    for what in ("upload", "download"):
        def tr_fmt(r):
            if r.get("seconds") is None:
                return "failed: %s" % str(r.get("error"))[:70]
            text = _fmt(r["seconds"], " s")
            if len(r.get("runs", ())) > 2:
                text += " (best %s)" % _fmt(r["best_seconds"], " s")
            if r["size_mib"] != size_mib:
                text += " at %g MiB" % r["size_mib"]
            if not r.get("checked"):
                text += " (UNCHECKED)"
            return text
        disp = {v: _cell(res, what, tr_fmt) for v, res in servers.items()}
        # ratios only between equal sizes
        num = {v: res[what]["seconds"] for v, res in servers.items()
               if res.get(what, {}).get("seconds") and res[what]["size_mib"] == size_mib}
        rows.append(("%g MiB %s: seconds" % (size_mib, what), disp, num, False))
        disp = {v: _cell(res, what, lambda r: "+%s MiB" % r["memory"]["peak_above_idle_mib"]
                         if r.get("memory") else "n/a") for v, res in servers.items()}
        num = {v: res[what]["memory"]["peak_above_idle_mib"] for v, res in servers.items()
               if res.get(what, {}).get("memory")}
        rows.append(("  peak PSS above idle (%s)" % what, disp, num, False))
    return rows


def render_section(results):
    fr = results.get("fronts")
    if not fr:
        return []
    size_mib = results["config"]["front_transfer_mib"]
    lines = ["## Behind real fronts: vs flup and uWSGI", ""]
    for key, group in fr["groups"].items():
        variants = list(group["servers"])
        head = ["%s" % group["label"]] + [VARIANT_LABEL[v] for v in variants]
        ratio_cols = [(a, b) for a, b in (("compiled", "flup"), ("compiled", "uwsgi"),
                                          ("pure", "flup"), ("pure", "uwsgi"))
                      if a in variants and b in variants]
        head += ["%s vs %s" % (VARIANT_LABEL[a].replace("flupfast ", ""), VARIANT_LABEL[b])
                 for a, b in ratio_cols]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for metric, disp, num, higher in rows_for(group, size_mib):
            cells = [metric] + [disp.get(v, "") for v in variants]
            for a, b in ratio_cols:
                x, y = num.get(a), num.get(b)
                if x and y and "PSS" not in metric:
                    cells.append("%.2fx" % (x / y if higher else y / x))
                else:
                    cells.append("")
            lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
        lines.append("")
    cost = fr.get("front_cost", {})
    names = {"nginx": "nginx forwarding through its own proxy (the 2x target's reference)",
             "nginx_static": "nginx alone (static file; POST discarded)",
             "apache": "Apache forwarding through its own proxy (mod_proxy_http)",
             "apache_static": "Apache alone (static file)"}
    if cost:
        lines += ["The front's own cost, %g MiB, no Python backend: " % size_mib + "; ".join(
            "%s: %s" % (names.get(name, name), ", ".join(
                "%s %s" % (what, _fmt(r.get("seconds"), " s") if r.get("seconds") else
                           "failed: %s" % r.get("error")) for what, r in parts.items()))
            for name, parts in cost.items()) + ".", ""]
    return lines


def evaluate_targets(results):
    """Issue 6's targets that the fronts part measures."""
    fr = results.get("fronts")
    if not fr:
        return []
    out = []
    groups = fr["groups"]
    size_mib = results["config"]["front_transfer_mib"]

    def rps(key, variant):
        return (groups.get(key, {}).get("servers", {}).get(variant, {}).get("hello") or
                {}).get("rps")

    for key, factor, other in (("fcgi-thread", 1.0, "uwsgi"), ("fcgi-fork", 1.0, "uwsgi"),
                               ("scgi-fork", 1.2, "uwsgi"), ("ajp-thread", 10.0, "flup")):
        m, o = rps(key, "compiled"), rps(key, other)
        target = "%s: flupfast compiled hello >= %gx %s req/s" % (
            GROUP_LABEL[key], factor, VARIANT_LABEL[other])
        if m and o:
            out.append({"target": target, "value": "%.2fx (%.0f vs %.0f req/s)" % (
                m / o, m, o), "met": m / o >= factor})
        else:
            out.append({"target": target, "value": "not measured", "met": False})
    cost = fr.get("front_cost", {})
    for key, group in groups.items():
        s = group["servers"]
        front = "nginx" if group["front"] == "nginx" else "apache"
        for what in ("upload", "download"):
            mine = (s.get("compiled", {}).get(what) or {}).get("seconds")
            if not mine:
                continue
            parts = []
            met = True
            other = "uwsgi" if "uwsgi" in s and not s["uwsgi"].get("not_run") else "flup"
            theirs = (s.get(other, {}).get(what) or {})
            if theirs.get("seconds"):
                # flup's slow transfers were measured smaller: scaled linearly (kind to flup,
                # whose FastCGI download is quadratic)
                scaled = theirs["seconds"] * size_mib / theirs["size_mib"]
                parts.append("%.3f s vs %s %.3f s%s" % (
                    mine, VARIANT_LABEL[other], scaled, "" if theirs["size_mib"] == size_mib
                    else " (%.3g s at %g MiB, scaled)" % (theirs["seconds"],
                                                          theirs["size_mib"])))
                met &= mine <= scaled * 1.1
            alone = (cost.get(front, {}).get(what) or {}).get("seconds")
            if alone:
                parts.append("%.1fx the front alone (%.3f s)" % (mine / alone, alone))
                met &= mine <= 2 * alone
            out.append({"target": "%s: %g MiB %s no slower than %s, within 2x of the "
                                  "front's own cost" % (GROUP_LABEL[key], size_mib, what,
                                                        VARIANT_LABEL[other]),
                        "value": "; ".join(parts) or "%.3f s" % mine, "met": met})
    worst = []
    for key, group in groups.items():
        for what in ("upload", "download"):
            mem = (group["servers"].get("compiled", {}).get(what) or {}).get("memory")
            if mem and "peak_above_idle_mib" in mem:
                worst.append((mem["peak_above_idle_mib"], "%s %s" % (key, what)))
    if worst:
        peak = max(worst)
        out.append({"target": "flupfast compiled: peak PSS no more than 32 MiB above idle "
                              "during each %g MiB transfer" % size_mib,
                    "value": "worst +%.1f MiB (%s)" % peak, "met": peak[0] <= 32})
    slower = []
    for key, group in groups.items():
        for metric, disp, num, higher in rows_for(group, size_mib):
            p, f = num.get("pure"), num.get("flup")
            if p and f and "PSS" not in metric and (p < f / 1.1 if higher else p > f * 1.1):
                slower.append("%s %s (%.2fx)" % (key, metric.strip(),
                                                 (p / f if higher else f / p)))
    out.append({"target": "flupfast pure no slower than flup anywhere behind a front "
                          "(10% noise allowed)",
                "value": "; ".join(slower) if slower else "nowhere slower",
                "met": not slower})
    return out
