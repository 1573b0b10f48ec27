"""Behind real fronts: flup 1.0.3, uWSGI, flupfast pure and flupfast compiled, side by side in
one run, each behind the same web server (called by bench/run.py; bench/README.md explains
the numbers). The configs are bench/fronts/'s, the loads bench/drivers/'s.

  FastCGI, thread mode   nginx 1.22 fastcgi_pass  (uWSGI: --fastcgi-socket, 1 process x 16 threads)
  FastCGI, fork mode     nginx 1.22 fastcgi_pass  (uWSGI: --fastcgi-socket, 16 processes)
  SCGI, thread mode      nginx 1.22 scgi_pass     (uWSGI: --scgi-socket, 1 process x 16 threads)
  SCGI, fork mode        nginx 1.22 scgi_pass     (uWSGI: --scgi-socket, 16 processes)
  AJP13, thread and fork Apache 2.4 mod_proxy_ajp (uWSGI has no AJP13: flup vs flupfast only)
  uwsgi, thread and fork nginx 1.22 uwsgi_pass    (uWSGI: --uwsgi-socket; flup has no uwsgi)

One nginx (one worker, no access log) serves every FastCGI/SCGI backend, each on its own
port, over a Unix socket; flup and flupfast get ``fastcgi_keep_conn on`` with an upstream
``keepalive 16`` pool; uWSGI closes the connection after each FastCGI request whatever the
flag says, so it gets ``fastcgi_keep_conn off`` (and so does a second flupfast compiled
column, to show what the kept connection is worth). AJP13 goes through the bench's Apache
(bench/fronts/apache.py: event MPM, one child of 128 threads, ProxyIOBufferSize 65536, pooled
backend connections). The load is ``wrk`` (HTTP/1.1 keep-alive, 1 thread, 16 connections;
``ab -k`` when wrk is missing).

Per backend: hello, seed 001's 71,453-byte POST echoed back at 100 clients (``wrk -c100``,
rounds interleaved: req/s and p99, where a slow tail shows), /sleep (50 ms: the requests/s show
how many requests run at once, i.e. whether the pool grows to the 16 connections), /cpu (about
2 ms of pure Python), a 100 MiB
upload (read(65536), sha256 checked by the app on the last run) and a 100 MiB download (one
bytes object; length and sha256 checked by the client), with the backend's memory: the
proportional set size (PSS) summed over its process tree, idle vs peak (PSS, not RSS, so a
fork pool's shared pages are counted once). The front's own cost is measured too: nginx and
Apache serving the 100 MiB as a static file, and nginx reading and discarding a 100 MiB POST.

Every wait is bounded (wrk -d and --timeout plus a subprocess timeout, socket timeouts on the
transfers, servers stopped by PID); a backend that dies during its runs is reported so.
"""

import hashlib
import os
import re
import socket
import threading

from bench import apps
from bench.base import MIB, log, rotated
from bench.drivers.ab import AB
from bench.drivers.http import http_request
from bench.drivers.wrk import WRK, post_script, run_wrk
from bench.fronts import GROUP_LABEL, GROUPS
from bench.fronts.apache import Apache
from bench.fronts.nginx import Nginx
from bench.procs import PSSSampler
from bench.scenarios.cells import APACHE_THREADS
from bench.scenarios.peers import ECHO_SIZE, check_echo
from bench.scenarios.transfers import check_upload_answer
from bench.servers import VARIANT_LABEL, VARIANTS
from bench.servers.server import Server
from bench.servers.uwsgi import UWSGIServer


class _Group:
    """The backends of one (protocol, mode, front) and their results."""

    def __init__(self, key, proto, mode, front, variants, info, workdir, download_size,
                 kinds, absent):
        self.key, self.proto, self.mode, self.front = key, proto, mode, front
        self.workdir = workdir
        self.servers = {}
        self.out = {"label": GROUP_LABEL[key], "protocol": proto, "mode": mode,
                    "front": front, "servers": {}}
        env = {"FLUPFAST_BENCH_DOWNLOAD_SIZES": str(download_size)}
        for variant, kind, keep in variants:
            if proto != "fcgi" and variant == "compiled_nokeep":
                continue
            res = self.out["servers"].setdefault(variant, {})
            if kind == "flup" and proto == "uwsgi":
                res["not_run"] = "flup has no uwsgi protocol"
                continue
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
    """The round with the median ``key``; its p99 is the median of the rounds' p99s (one
    round's p99 follows its few slowest answers, and wrk's correction multiplies those)."""
    vals = sorted((r for r in runs if r.get(key)), key=lambda r: r[key])
    if not vals:
        return dict(runs[-1]) if runs else {}
    best = dict(vals[len(vals) // 2])
    best[key + "_rounds"] = [r.get(key) for r in runs]
    tails = sorted(r["p99_ms"] for r in vals if r.get("p99_ms") is not None)
    if tails:
        best["p99_ms"] = tails[len(tails) // 2]
        best["p99_ms_rounds"] = [r.get("p99_ms") for r in runs]
    return best


def _load_phase(group, ports, cfg):
    """hello (rounds interleaved over the backends), then /sleep and /cpu."""
    variants = [v for v in group.servers if group.alive(v)]
    samplers = {}
    for v in variants:
        if cfg.front_warmup:
            run_wrk(ports[v], "/", cfg.conns, cfg.front_warmup)  # connections, pools
        samplers[v] = PSSSampler(group.servers[v].proc.pid, 0.2).__enter__()
    try:
        _wrk_rounds(group, ports, variants, "hello", "/", cfg.conns, cfg.front_rounds, cfg)
        _echo_rounds(group, ports, cfg, variants)
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
    for v in variants:
        group.alive(v)


ECHO_CONNS = 100
ECHO_ROUNDS = 3


def _wrk_rounds(group, ports, variants, name, path, conns, rounds, cfg, script=None):
    """``rounds`` rounds of wrk on ``path``, interleaved over ``variants`` (each round starting
    one further on); each backend's median round (``_median``) kept under ``name``."""
    runs = {}
    for rnd in range(rounds):
        for v in rotated(variants, rnd):
            if not group.alive(v):
                continue
            res = run_wrk(ports[v], path, conns, cfg.front_duration, script)
            runs.setdefault(v, []).append(res)
            log("  %s %d %-11s %-32s %8.0f req/s  p99 %s ms  errors %s  non-2xx %s%s"
                % (name, rnd + 1, group.key, VARIANT_LABEL[v], res.get("rps") or 0,
                   res.get("p99_ms"), res.get("errors"), res.get("non_2xx"),
                   "  " + res["error"] if res.get("error") else ""))
    for v, rs in runs.items():
        group.out["servers"][v][name] = _median(rs, "rps")


def _echo_rounds(group, ports, cfg, variants):
    """Seed 001's echo at 100 clients, rounds interleaved over the backends (at most
    ECHO_ROUNDS: each round is 100 clients' worth of 71 KB bodies both ways)."""
    script = post_script(group.workdir, "echo", apps.pattern_bytes(ECHO_SIZE))
    for v in variants:
        problem = check_echo(ports[v]) if group.alive(v) else None
        if problem:
            group.out["servers"][v]["echo"] = {"error": problem}
    ready = [v for v in variants if "echo" not in group.out["servers"][v]]
    _wrk_rounds(group, ports, ready, "echo", "/echo", ECHO_CONNS,
                min(cfg.front_rounds, ECHO_ROUNDS), cfg, script)


def _transfer_size(group, variant, what, cfg):
    """flup's known-slow transfers are measured smaller (and said so): FastCGI download
    (quadratic copy, compat/known_differences.py 'linear-streams'), AJP upload and download
    (a Nagle + delayed-ACK wait per packet, 'ajp-upload-speed': 20 MiB down took 12 s)."""
    if variant == "flup" and ((group.proto == "fcgi" and what == "download") or
                              group.proto == "ajp"):
        return cfg.front_flup_slow_size
    return cfg.front_transfer_size


def _http(port, method, path, body, timeout):
    """(dict with the error, or None), (status, head, answer, seconds)."""
    try:
        return None, http_request(port, method, path, body, timeout=timeout)
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
            "check": check_upload_answer(status, data, size, check, expect)}


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
            status, _, body, _ = http_request(ports[v], "GET", "/", timeout=20)
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
            # As many threads as the peers' Apache: with 32, flup's slow AJP13 rounds (40 ms a
            # request) leave requests queued on its backend after wrk stops, and the next
            # backend's round found every thread taken (MaxRequestWorkers: wrk read errors).
            apache = Apache(workdir, g.backends(), cfg.front_transfer_timeout + 30,
                            static_root=static_root, threads=APACHE_THREADS)
            log("  starting apache2 (mod_proxy_ajp)")
            try:
                if not apache.start():
                    for res in g.out["servers"].values():
                        res.setdefault("not_run", "apache2 did not start: %s" % apache.error)
                    continue
                if "apache" not in out["front_cost"]:  # once, by the first Apache group
                    log("fronts: Apache's own cost (static %d MiB file)" % (
                        cfg.front_transfer_size // MIB))
                    out["front_cost"]["apache"] = _front_cost(
                        apache.ports["static"], cfg, bodies, static_name, None, "/fwd")
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
