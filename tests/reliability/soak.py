"""Soak: mixed traffic through real web servers for a long time, watching the backend for leaks.

    nice -n 10 python -m tests.reliability.soak --minutes 10            # every config
    nice -n 10 python -m tests.reliability.soak --minutes 3 --configs fcgi:thread,scgi:fork

Opt-in (not collected by pytest, not run in CI); needs root (nginx/Apache run as www-data).
For each protocol:mode config it starts the probe app under flupfast (compiled backend) behind
nginx (``fastcgi_pass`` with KEEP_CONN, ``scgi_pass``) or Apache (``ProxyPass ajp://``), then
drives client threads with a weighted mix: hello, 10 MiB uploads, 1 MiB downloads, streamed
4 MiB downloads, app errors (a 500 is the expected answer), and clients that disconnect
mid-download or mid-upload (deliberately broken: their outcome is not checked). Every few
seconds it samples the backend's process tree: RSS, open fds, threads, children.

The backend runs with MALLOC_ARENA_MAX=2 and MALLOC_MMAP_THRESHOLD_=1 MiB (``--malloc-*``), so
that RSS tracks what the process holds rather than glibc's per-thread arenas and heap
fragmentation.
A config fails on any failed request that was not deliberately broken, or on a growth trend:
the least-squares slope over the second half of the samples, times that half's duration,
above a tolerance (RSS 4 MiB + 10%, fds 3, threads 3, children 2). Prints one summary line
per config and, with ``--json``, writes every sample.
"""
import argparse
import contextlib
import hashlib
import json
import os
import random
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from tests.apps import probe
from tests.integration import peers
from tests.reliability.fault_harness import children_of

MIB = 1 << 20
UPLOAD_SIZE = 10 * MIB
DOWNLOAD_SIZE = 1 * MIB
STREAM_CHUNKS, STREAM_CHUNK_SIZE = 64, 65536
ABORT_DOWNLOAD_SIZE = 8 * MIB
CLIENT_TIMEOUT = 60

# (name, weight): the traffic mix.
MIX = (("hello", 50), ("download", 10), ("stream", 10), ("upload", 3), ("error", 5),
       ("abort_download", 5), ("abort_upload", 3))
DELIBERATELY_BROKEN = {"abort_download", "abort_upload"}

# Growth over the second half that counts as a leak: (absolute, relative to the half's mean).
TOLERANCE = {"rss_parent_kib": (4096, 0.10), "rss_child_mean_kib": (4096, 0.10),
             "fds_max": (3, 0.0), "threads": (3, 0.0), "children": (2, 0.0)}

ALL_CONFIGS = ("fcgi:thread", "fcgi:fork", "scgi:thread", "scgi:fork", "ajp:thread",
               "ajp:fork")


# -- the backend's process tree -------------------------------------------------------------

def _rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _count(path):
    try:
        return len(os.listdir(path))
    except OSError:
        return 0


def sample(pid):
    """One reading of the backend ``pid`` and its children."""
    children = sorted(p for p, state in children_of(pid).items() if state != "Z")
    procs = [pid] + children
    rss = {}
    for p in procs:
        with contextlib.suppress(OSError):
            rss[p] = _rss_kib(p)
    child_rss = [rss[p] for p in children if p in rss]
    fds = [_count("/proc/%d/fd" % p) for p in procs]
    return {
        "t": time.monotonic(),
        "rss_parent_kib": rss.get(pid, 0),
        "rss_child_mean_kib": sum(child_rss) / len(child_rss) if child_rss else 0,
        "fds_total": sum(fds),
        "fds_max": max(fds),
        "threads": sum(_count("/proc/%d/task" % p) for p in procs),
        "children": len(children),
    }


def slope(points):
    """Least-squares slope of [(t, value)]."""
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    return 0.0 if den == 0 else sum((t - mt) * (v - mv) for t, v in points) / den


def trends(samples):
    """{metric: (growth over the second half, tolerance, mean)} from the samples."""
    half = samples[len(samples) // 2:]
    if len(half) < 3:
        return {}
    span = half[-1]["t"] - half[0]["t"]
    out = {}
    for metric, (absolute, relative) in TOLERANCE.items():
        values = [(s["t"], s[metric]) for s in half]
        mean = sum(v for _, v in values) / len(values)
        out[metric] = (slope(values) * span, absolute + relative * mean, mean)
    return out


# -- traffic ------------------------------------------------------------------------------

class Traffic:
    def __init__(self, front, seed):
        self.front = front
        self.rng = random.Random(seed)
        self.counts = {name: 0 for name, _ in MIX}
        self.failures = []
        self._names = [name for name, _ in MIX]
        self._weights = [weight for _, weight in MIX]
        self.download_sha = hashlib.sha256(probe.pattern_bytes(DOWNLOAD_SIZE)).hexdigest()
        self.upload_sha = probe.pattern_sha256(UPLOAD_SIZE)
        self.stream_sha = probe.pattern_sha256(STREAM_CHUNKS * STREAM_CHUNK_SIZE)

    def run(self, deadline):
        client = None
        while time.monotonic() < deadline:
            name = self.rng.choices(self._names, self._weights)[0]
            if client is None:
                client = self.front.client(timeout=CLIENT_TIMEOUT)
            try:
                getattr(self, "do_" + name)(client)
            except Exception as exc:  # a failure of a request that should have worked
                self.failures.append("%s: %r" % (name, exc))
                client.close()
                client = None
            self.counts[name] += 1
        if client is not None:
            client.close()

    def _check(self, ok, what):
        if not ok:
            raise AssertionError(what)

    def do_hello(self, client):
        resp = client.request("GET", self.front.url("/"))
        self._check(resp.status == 200 and resp.body == probe.HELLO, "hello %d" % resp.status)

    def do_download(self, client):
        resp, length, digest = client.download("GET", self.front.url(
            "/download?size=%d" % DOWNLOAD_SIZE))
        self._check(resp.status == 200 and length == DOWNLOAD_SIZE
                    and digest == self.download_sha, "download %d %d" % (resp.status, length))

    def do_stream(self, client):
        resp, length, digest = client.download("GET", self.front.url(
            "/stream?chunks=%d&size=%d" % (STREAM_CHUNKS, STREAM_CHUNK_SIZE)))
        self._check(resp.status == 200 and digest == self.stream_sha,
                    "stream %d %d" % (resp.status, length))

    def do_upload(self, client):
        resp = client.request("POST", self.front.url("/upload?mode=read65536"),
                              body=probe.pattern_chunks(UPLOAD_SIZE),
                              headers={"Content-Length": str(UPLOAD_SIZE)})
        self._check(resp.status == 200, "upload %d" % resp.status)
        answer = resp.json()
        self._check(answer["length"] == UPLOAD_SIZE and answer["sha256"] == self.upload_sha,
                    "upload %r" % answer)

    def do_error(self, client):
        resp = client.request("GET", self.front.url("/error"))
        self._check(resp.status == 500, "error route answered %d" % resp.status)

    def _raw(self):
        sock = socket.create_connection((self.front.host, self.front.port), timeout=10)
        return sock

    def do_abort_download(self, client):
        with contextlib.suppress(OSError), self._raw() as sock:
            sock.sendall(b"GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n"
                         % self.front.url("/download?size=%d" % ABORT_DOWNLOAD_SIZE).encode())
            sock.recv(self.rng.randrange(1, 65536))

    def do_abort_upload(self, client):
        with contextlib.suppress(OSError), self._raw() as sock:
            sock.sendall(b"POST %s HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n\r\n"
                         % (self.front.url("/upload?mode=read65536").encode(), UPLOAD_SIZE))
            sock.sendall(probe.pattern_bytes(self.rng.randrange(1, 2 * MIB)))


# -- one config ---------------------------------------------------------------------------

def start_front(protocol, mode):
    spec = peers.ServerSpec("cy")
    if protocol == "fcgi":
        return peers.start_nginx(spec, mode=mode, name="soak-nginx-fcgi-%s" % mode)
    if protocol == "scgi":
        return peers.start_nginx_scgi(spec, mode=mode, name="soak-nginx-scgi-%s" % mode)
    return peers.start_apache_proxy_ajp(spec, mode=mode, name="soak-apache-ajp-%s" % mode)


def backend_of(front):
    return next(p for p in front.processes if p.name.startswith("backend-"))


def soak_one(config, minutes, clients, every):
    protocol, mode = config.split(":")
    front = start_front(protocol, mode)
    backend = backend_of(front)
    try:
        deadline = time.monotonic() + minutes * 60
        workers = [Traffic(front, seed=i) for i in range(clients)]
        threads = [threading.Thread(target=w.run, args=(deadline,), daemon=True)
                   for w in workers]
        for t in threads:
            t.start()
        samples = []
        while time.monotonic() < deadline:
            samples.append(sample(backend.pid))
            time.sleep(min(every, max(0.0, deadline - time.monotonic())))
        for t in threads:
            t.join(CLIENT_TIMEOUT * 2)
        samples.append(sample(backend.pid))
        alive = backend.alive()
        log = backend.output.read_text(errors="replace") if backend.output.exists() else ""
    finally:
        front.stop()
    counts = {}
    failures = []
    for w in workers:
        failures += w.failures
        for name, n in w.counts.items():
            counts[name] = counts.get(name, 0) + n
    found = trends(samples)
    grew = {m: g for m, (g, tol, _) in found.items() if g > tol}
    ok = alive and not failures and not grew
    result = {
        "config": config, "minutes": minutes, "clients": clients, "ok": ok,
        "backend_alive": alive, "requests": counts, "total": sum(counts.values()),
        "failures": failures[:20], "failure_count": len(failures),
        "first": samples[0], "last": samples[-1], "samples": len(samples),
        "trend": {m: {"growth": round(g, 1), "tolerance": round(tol, 1), "mean": round(mean, 1)}
                  for m, (g, tol, mean) in found.items()},
        "grew": grew,
        "log_tracebacks": log.count("Traceback"),
        "log_lines": log.count("\n"),
        "all_samples": samples,
    }
    return result


def summary_line(r):
    first, last = r["first"], r["last"]
    return ("%-12s %s  %d requests (%s)  failed %d  rss parent %d->%d KiB, child mean "
            "%d->%d KiB  fds max %d->%d  threads %d->%d  children %d->%d  trend %s"
            % (r["config"], "PASS" if r["ok"] else "FAIL", r["total"],
               ", ".join("%s %d" % kv for kv in sorted(r["requests"].items())),
               r["failure_count"], first["rss_parent_kib"], last["rss_parent_kib"],
               first["rss_child_mean_kib"], last["rss_child_mean_kib"], first["fds_max"],
               last["fds_max"], first["threads"], last["threads"], first["children"],
               last["children"],
               ", ".join("%s %+.1f/%.1f" % (m, t["growth"], t["tolerance"])
                         for m, t in sorted(r["trend"].items()))))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0,
                        help="traffic per config (default 10)")
    parser.add_argument("--configs", default=",".join(ALL_CONFIGS),
                        help="comma list of protocol:mode (default: %s)" % ",".join(ALL_CONFIGS))
    parser.add_argument("--clients", type=int, default=6, help="client threads (default 6)")
    parser.add_argument("--sample-seconds", type=float, default=5.0,
                        help="seconds between samples (default 5)")
    parser.add_argument("--json", type=Path, help="write every result and sample here")
    parser.add_argument("--malloc-arena-max", type=int, default=2,
                        help="MALLOC_ARENA_MAX for the backend (default 2; 0: glibc's own)")
    parser.add_argument("--malloc-mmap-threshold", type=int, default=1 << 20,
                        help="MALLOC_MMAP_THRESHOLD_ for the backend (default 1 MiB; 0: "
                        "glibc's own, which rises after each large free)")
    args = parser.parse_args(argv)
    if args.malloc_mmap_threshold:
        # A fixed threshold keeps every block of 1 MiB or more (response bodies, the probe's
        # 4 MiB stream) in its own mapping, returned to the system when freed; glibc's
        # adaptive one moves them into the heap, where they fragment it in 4 MiB steps
        # (measured: SCGI thread mode +13 MiB in 2.5 minutes with it, +2.5 MiB without).
        os.environ["MALLOC_MMAP_THRESHOLD_"] = str(args.malloc_mmap_threshold)
    if args.malloc_arena_max:
        # glibc gives each thread its own arena (up to 8 per core) and keeps freed memory in
        # it: a thread-mode server's RSS then wanders by tens of MiB as threads come and go,
        # which hides a leak or fakes one (measured: AJP thread mode +19 MiB in 5 minutes
        # uncapped, flat capped). With few arenas, RSS follows what Python holds.
        os.environ["MALLOC_ARENA_MAX"] = str(args.malloc_arena_max)
    # SIGTERM unwinds like Ctrl-C, so every front started so far is stopped by its PID.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    for config in configs:
        if config not in ALL_CONFIGS:
            parser.error("unknown config %r (known: %s)" % (config, ", ".join(ALL_CONFIGS)))
    results = []
    for config in configs:
        result = soak_one(config, args.minutes, args.clients, args.sample_seconds)
        results.append(result)
        print(summary_line(result), flush=True)
        for failure in result["failures"]:
            print("    failure: %s" % failure, flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
