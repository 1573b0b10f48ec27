"""A profile of the path most sites use: a new backend connection per request
(nginx ``fastcgi_keep_conn off``, ``scgi_pass``, Apache without ``enablereuse``), flupfast
compiled vs uWSGI, thread and fork mode, FastCGI, SCGI and uwsgi. Only noise-free counts: callgrind
instructions per request (a life of N requests and one of 2N, every process counted),
strace calls per request, voluntary context switches per request, and one strace transcript
of a few requests; and one that is not (the cpu16 part: CPU time per request of the first
process and of the rest, to see what a prefork parent costs). Findings:
bench/profile-new-connection.md.

    python -m bench.scenarios.new_connection [--only fcgi-thread,...] [--kinds compiled,uwsgi]
        [--parts callgrind,syscalls,syscalls16,perf16,cpu16,transcript,window,tail] [-n 300]
        [--keep-dir DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from bench.base import log
from bench.drivers.callgrind import (
    control, dumped_files, file_total, final_files, top_functions, under_callgrind)
from bench.drivers.fcgi_load import LoadClient
from bench.drivers.perf_count import count_events
from bench.drivers.strace import count_syscalls
from bench.drivers.strace_tail import analyse
from bench.procs import process_tree, tree_ctxt_switches, user_system_ticks
from bench.servers.server import Server
from bench.servers.uwsgi import UWSGIServer, find_uwsgi

# The settings compared: flup-style pools for flupfast, uWSGI 1x16 threads or 8 processes.
POOL_ARGS = {"thread": ["--min-spare", "4", "--max-spare", "16", "--max-threads", "64"],
             "fork": ["--min-spare", "2", "--max-spare", "4", "--max-children", "8"]}
UWSGI_SETTINGS = {"thread": {"processes": 1, "threads": 16}, "fork": {"processes": 8}}
GROUPS = ("fcgi-thread", "fcgi-fork", "scgi-thread", "scgi-fork", "uwsgi-thread", "uwsgi-fork")
# Under callgrind the fork pool is pinned to two children forked at start: a child forked in
# mid-run would carry the parent's counts of that moment into its total (callgrind does not
# zero at fork), and one request at a time never needs more. What the parent costs with the
# issue's pool (woken when the idle count leaves [min_spare, max_spare]) is the syscall part's.
CALLGRIND_POOL_ARGS = dict(POOL_ARGS, fork=["--min-spare", "1", "--max-spare", "2",
                                            "--max-children", "2"])


def make_server(kind, mode, proto, workdir, cls=None, pool_args=POOL_ARGS, **kw):
    """A flupfast compiled or uWSGI server (``cls``: a callgrind-wrapped class, or None)."""
    if kind == "uwsgi":
        base = cls or UWSGIServer
        return base(kind, mode, "bench.apps:hello", workdir, protocol=proto,
                    binary=find_uwsgi(), settings=UWSGI_SETTINGS[mode], **kw)
    base = cls or Server
    return base(kind, mode, "bench.apps:hello", workdir, protocol=proto,
                extra_args=pool_args[mode], **kw)


def _load(client, srv, proto, count, conns=1):
    return client.run(srv.address, "hello", conns=conns, keep=False, count=count, proto=proto,
                      deadline=max(60.0, count * 0.2))


def _callgrind_life(kind, mode, proto, client, workdir, count, warm):
    """One server life under callgrind: ``warm`` + ``count`` requests, stopped, every
    process's final file -> ({pid: total}, root pid, files)."""
    pattern = os.path.join(workdir, "cg-%s-%s-%s-%d.%%p" % (kind, mode, proto, count))
    cls = under_callgrind(UWSGIServer if kind == "uwsgi" else Server)
    srv = make_server(kind, mode, proto, workdir, cls=cls, out_file=pattern,
                      pool_args=CALLGRIND_POOL_ARGS)
    try:
        if not srv.start(client):
            return {"error": "did not start: %s" % srv.error}
        _load(client, srv, proto, warm)
        time.sleep(1.0)  # a fork pool settles (spares spawned) before the counted requests
        root = srv.proc.pid
        res = _load(client, srv, proto, count)
        if res.get("requests") != count:
            return {"error": "answered %s of %d: %s" % (res.get("requests"), count, res)}
    finally:
        srv.stop()
    files = final_files(pattern)
    return {"totals": {f.rsplit(".", 1)[1]: file_total(f) for f in files},
            "root": str(root), "files": files}


def _function_costs(files, inclusive):
    return {name: v for v, name in top_functions(files, inclusive, None)}


def instructions(kind, mode, proto, client, workdir, n=300, warm=50):
    """Instructions per new-connection request: a server life of ``n`` requests and one of
    ``2n`` (after ``warm`` each), every process's total at exit (forked children carry their
    parent's counts from the fork: the same in both lives, so the difference cancels them),
    (total(2n) - total(n)) / n; per function the same difference of callgrind_annotate."""
    found = {}

    def life(count):
        found[count] = _callgrind_life(kind, mode, proto, client, workdir, count, warm)

    threads = [threading.Thread(target=life, args=(c,)) for c in (n, 2 * n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    one, two = found[n], found[2 * n]
    for r in (one, two):
        if "error" in r:
            return r
    parent = {"one": one["totals"].get(one["root"], 0), "two": two["totals"].get(two["root"], 0)}
    total_one, total_two = sum(one["totals"].values()), sum(two["totals"].values())
    out = {"n": n, "per_request": round((total_two - total_one) / n),
           "processes": [len(one["totals"]), len(two["totals"])],
           "root_process": round((parent["two"] - parent["one"]) / n),
           "process_totals": [sorted(one["totals"].values()), sorted(two["totals"].values())]}
    for inclusive, key, limit in ((True, "inclusive", 80), (False, "self", 50)):
        a, b = _function_costs(one["files"], inclusive), _function_costs(two["files"], inclusive)
        diff = sorted(((round((b.get(k, 0) - a.get(k, 0)) / n), k) for k in set(a) | set(b)),
                      reverse=True)
        out[key] = [d for d in diff[:limit] if d[0] > 0]
    for f in one["files"] + two["files"]:
        os.unlink(f)
    return out


def window(kind, mode, proto, client, workdir, n=300, warm=50):
    """One callgrind file of exactly ``n`` requests (zeroed after ``warm``, dumped after ``n``
    with callgrind_control), kept in ``workdir`` for ``callgrind_annotate --inclusive=yes``
    (threads: ``thread_run`` is the workers, ``(below main)`` the accept loop). Only the
    server's first process answers callgrind_control (forked children have no vgdb), so this
    is for thread mode."""
    pattern = os.path.join(workdir, "window-%s-%s-%s.%%p" % (kind, mode, proto))
    cls = under_callgrind(UWSGIServer if kind == "uwsgi" else Server)
    srv = make_server(kind, mode, proto, workdir, cls=cls, out_file=pattern,
                      pool_args=CALLGRIND_POOL_ARGS)
    try:
        if not srv.start(client):
            return {"error": "did not start: %s" % srv.error}
        _load(client, srv, proto, warm)
        time.sleep(1.0)
        zeroed = control(srv.pids(), "-z")
        res = _load(client, srv, proto, n)
        control(zeroed, "-d")
    finally:
        srv.stop()
    files = dumped_files(pattern)
    return {"n": res.get("requests"), "files": files,
            "per_request": round(sum(file_total(f) for f in files) / n)}


def syscalls(kind, mode, proto, client, workdir, n=500, conns=1):
    """strace -c -f calls per request, and context switches per request (without strace),
    with ``conns`` concurrent new connections (the syscalls16 part: 16, 3,000 requests)."""
    srv = make_server(kind, mode, proto, workdir)
    try:
        if not srv.start(client):
            return {"error": "did not start: %s" % srv.error}
        _load(client, srv, proto, 100, conns)
        time.sleep(0.5)
        before = tree_ctxt_switches(srv.pids())
        res = _load(client, srv, proto, 2000, conns)
        after = tree_ctxt_switches(srv.pids())
        done = res.get("requests") or 1
        ctxt = {"voluntary": round((after[0] - before[0]) / done, 2),
                "involuntary": round((after[1] - before[1]) / done, 2), "requests": done}
        res, calls = count_syscalls(srv.pids(), os.path.join(workdir, "strace.txt"),
                                    lambda: _load(client, srv, proto, n, conns))
        if calls is None:
            return {"error": "strace did not detach", "ctxt_switches": ctxt}
        done = res.get("requests") or n
        per = {k: round(v / done, 2) for k, v in sorted(calls.items(), key=lambda kv: -kv[1])
               if v / done >= 0.01}
        return {"per_request": per, "total": round(sum(calls.values()) / done, 2),
                "ctxt_switches": ctxt}
    finally:
        srv.stop()


def perf_counts(kind, mode, proto, client, workdir, n=3000, conns=16):
    """``perf stat`` per request with ``conns`` concurrent new connections (the perf16 part):
    futex calls, all syscalls and context switches of the server's threads, and voluntary /
    involuntary switches from /proc, all without strace's slowdown (strace serialises the
    threads' syscalls and so multiplies the GIL's futex traffic)."""
    srv = make_server(kind, mode, proto, workdir)
    try:
        if not srv.start(client):
            return {"error": "did not start: %s" % srv.error}
        _load(client, srv, proto, 500, conns)
        time.sleep(0.5)
        pids = srv.pids()
        before = tree_ctxt_switches(pids)
        res, counts = count_events(pids, os.path.join(workdir, "perf.txt"),
                                   lambda: _load(client, srv, proto, n, conns))
        after = tree_ctxt_switches(pids)
        done = res.get("requests") or n
        out = {"voluntary": round((after[0] - before[0]) / done, 2),
               "involuntary": round((after[1] - before[1]) / done, 2), "requests": done}
        if counts is None:
            out["error"] = "perf stat gave no counts"
        else:
            out.update({name.split(":")[-1]: round(count / done, 2)
                        for name, count in counts.items()})
        return out
    finally:
        srv.stop()


def cpu_split(kind, mode, proto, client, workdir, seconds=4.0, conns=16):
    """CPU time per request (microseconds, user and system) of the server's first process and
    of the rest (prefork children, uWSGI's workers), ``conns`` new connections at once for
    ``seconds`` (the cpu16 part): what the prefork parent costs, which callgrind's fork rows
    leave out. Children that exit meanwhile take their time with them."""
    srv = make_server(kind, mode, proto, workdir)
    try:
        if not srv.start(client):
            return {"error": "did not start: %s" % srv.error}
        client.run(srv.address, "hello", conns=conns, keep=False, duration=1.0, proto=proto)
        time.sleep(0.5)
        root = srv.proc.pid
        before = {pid: user_system_ticks(pid) for pid in process_tree(root)}
        res = client.run(srv.address, "hello", conns=conns, keep=False, duration=seconds,
                         proto=proto)
        after = {pid: user_system_ticks(pid) for pid in process_tree(root)}
    finally:
        srv.stop()
    done = res.get("requests") or 0
    if not done:
        return {"error": "no request answered: %s" % res.get("error")}
    scale = 1e6 / os.sysconf("SC_CLK_TCK") / done

    def spent(pids, which):
        return round(sum(after[p][which] - (before.get(p) or (0, 0))[which]
                         for p in pids if after.get(p)) * scale, 2)
    rest = [pid for pid in after if pid != root]
    return {"requests_per_s": round(done / seconds), "first_user_us": spent([root], 0),
            "first_system_us": spent([root], 1), "rest_user_us": spent(rest, 0),
            "rest_system_us": spent(rest, 1)}


def transcript(kind, mode, proto, client, workdir, out_path, n=3):
    """``strace -f -tt -T`` of ``n`` requests (after a warm-up) into ``out_path``."""
    srv = make_server(kind, mode, proto, workdir)
    try:
        if not srv.start(client):
            return {"error": "did not start: %s" % srv.error}
        _load(client, srv, proto, 20)
        time.sleep(0.5)
        cmd = ["strace", "-f", "-tt", "-T", "-o", out_path]
        for pid in srv.pids():
            cmd += ["-p", str(pid)]
        tracer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        _load(client, srv, proto, n)
        time.sleep(0.3)
        tracer.terminate()
        tracer.wait(15)
        return {"file": out_path}
    finally:
        srv.stop()


def tail(client, workdir, conns=16, count=3000):
    """The persistent-connection tail (FastCGI KEEP_CONN, thread mode, ``conns`` connections):
    ``strace -f -tt -T`` on every thread while ``count`` requests run, then where the slow
    ones waited (drivers/strace_tail.py). strace slows everything; what counts is the share
    of the slowest requests' time spent waiting for the GIL, not the times themselves."""
    srv = make_server("compiled", "thread", "fcgi", workdir)
    path = os.path.join(workdir, "strace-tail.txt")
    try:
        if not srv.start(client):
            return {"error": "did not start: %s" % srv.error}
        client.run(srv.address, "hello", conns=conns, keep=True, count=2000, deadline=60)
        cmd = ["strace", "-f", "-tt", "-T", "-o", path]
        for pid in srv.pids():
            for tid in os.listdir("/proc/%d/task" % pid):
                cmd += ["-p", tid]
        tracer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.5)
        res = client.run(srv.address, "hello", conns=conns, keep=True, count=count,
                         deadline=120)
        time.sleep(0.3)
        tracer.terminate()
        tracer.wait(15)
    finally:
        srv.stop()
    out = analyse(path)
    out["client_latency_ms_under_strace"] = res.get("latency_ms")
    return out


def _save(path, results):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(GROUPS))
    ap.add_argument("--kinds", default="compiled,uwsgi")
    ap.add_argument("--parts", default="callgrind,syscalls,transcript")
    ap.add_argument("-n", type=int, default=300, help="requests in the callgrind window")
    ap.add_argument("--out", default="bench/results/new-connection.json")
    ap.add_argument("--keep-dir", default=None, help="work directory (transcripts stay)")
    args = ap.parse_args(argv)
    workdir = args.keep_dir or tempfile.mkdtemp(prefix="flupfast-newconn-")
    os.makedirs(workdir, exist_ok=True)
    client = LoadClient(workdir)
    results = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            results = json.load(f)
    parts = args.parts.split(",")
    if "tail" in parts:
        log("the persistent-connection tail under strace")
        results["tail"] = tail(client, workdir)
        log("    %s" % {k: results["tail"].get(k) for k in (
            "futex_per_request", "gil_timeouts_per_request", "error")})
        _save(args.out, results)
    for group in filter(None, args.only.split(",")):
        if group not in GROUPS:
            ap.error("unknown group %r (one of %s)" % (group, ", ".join(GROUPS)))
        proto, mode = group.split("-")
        for kind in args.kinds.split(","):
            key = "%s/%s" % (group, kind)
            row = results.setdefault(key, {})
            if "callgrind" in parts:
                log("callgrind %s" % key)
                row["callgrind"] = instructions(kind, mode, proto, client, workdir, args.n)
                log("    %s" % row["callgrind"].get("per_request", row["callgrind"]))
            if "window" in parts:
                row["window"] = window(kind, mode, proto, client, workdir, args.n)
                log("    window: %s" % row["window"])
            if "syscalls" in parts:
                log("strace -c %s" % key)
                row["syscalls"] = syscalls(kind, mode, proto, client, workdir)
                log("    %s" % row["syscalls"])
            if "syscalls16" in parts:
                log("strace -c %s, 16 connections at once" % key)
                row["syscalls16"] = syscalls(kind, mode, proto, client, workdir, n=3000,
                                             conns=16)
                log("    %s" % row["syscalls16"])
            if "perf16" in parts:
                log("perf stat %s, 16 connections at once" % key)
                row["perf16"] = perf_counts(kind, mode, proto, client, workdir)
                log("    %s" % row["perf16"])
            if "cpu16" in parts:
                log("CPU per request by process %s, 16 connections at once" % key)
                row["cpu16"] = cpu_split(kind, mode, proto, client, workdir)
                log("    %s" % row["cpu16"])
            if "transcript" in parts:
                path = os.path.join(workdir, "strace-%s-%s-%s.txt" % (kind, mode, proto))
                row["transcript"] = transcript(kind, mode, proto, client, workdir, path)
            _save(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
