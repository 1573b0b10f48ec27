"""Syscalls per request: strace -c -f on a fresh server while one connection sends ``count``
hello requests (kept or new connections), divided by the requests answered."""
import os

from bench.base import log
from bench.drivers.strace import count_syscalls
from bench.servers import KIND_LABEL
from bench.servers.server import Server


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
        res, calls = count_syscalls(srv.pids(), out_path, lambda: client.run(
            srv.address, "hello", conns=1, keep=keep, count=count, deadline=60, proto=proto))
        if calls is None:
            return {"error": "strace did not detach"}
        n = res.get("requests") or count
        per = {k: round(v / n, 2) for k, v in sorted(calls.items(), key=lambda kv: -kv[1])
               if v / n >= 0.05}
        return {"requests": res.get("requests"), "mode": mode, "keep_conn": keep,
                "per_request": per, "total_per_request": round(sum(calls.values()) / n, 2)}
    finally:
        srv.stop()


def syscalls_per_kind(out, what, kinds, client, workdir, cfg, **opts):
    """``out[kind]``: ``bench_syscalls`` with ``opts`` for each kind, logged as ``what``."""
    for kind in kinds:
        log("%s, %s" % (what, KIND_LABEL[kind]))
        out[kind] = bench_syscalls(kind, client, workdir, cfg, **opts)
        log("    %s" % out[kind])
