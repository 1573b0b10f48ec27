"""Hello world requests/s direct (no front, fcgi_load): FastCGI with new or kept connections,
16 or 1 of them (``bench_hello``), SCGI and AJP13 per log level (``hello_matrix``); with the
server's CPU time per request. One server per configuration, all started first; rounds
interleave the configurations so that noise from the shared machine spreads over all of them;
the median round is kept."""
from bench.base import log
from bench.procs import tree_cpu_seconds
from bench.servers import KIND_LABEL
from bench.servers.server import Server


# Hello runs: (key, connections (0: --conns), KEEP_CONN). One connection only in thread mode:
# it shows the per-request cost without flup's pool stalls (kept connections queued behind
# busy threads or children).
HELLO_RUNS = (("new", 0, False), ("keep", 0, True), ("new_1conn", 1, False),
              ("keep_1conn", 1, True))


HELLO_LABELS = {"new": "new connection per request", "keep": "KEEP_CONN",
                "new_1conn": "new connection per request", "keep_1conn": "KEEP_CONN"}


def hello_round(srv, client, conns, keep, duration, warmup, proto="fcgi"):
    """One timed hello run against ``srv``, with its process tree's CPU time per request
    (the warm-up's requests estimated at the run's rate)."""
    pids = srv.pids()
    cpu0 = tree_cpu_seconds(pids)
    res = client.run(srv.address, "hello", conns=conns, keep=keep, duration=duration,
                     warmup=warmup, deadline=duration + warmup + 20, proto=proto)
    cpu = tree_cpu_seconds(list(set(pids) | set(srv.pids()))) - cpu0
    total = res.get("requests", 0) / max(res.get("seconds", 1), 1e-9) * (duration + warmup)
    res["server_cpu_us_per_request"] = round(cpu / total * 1e6, 1) if total else None
    return res


def median_round(rounds):
    """The round of median requests/s, with every round's rate in ``rps_rounds``."""
    ordered = sorted(rounds, key=lambda r: r.get("rps", 0))
    best = dict(ordered[len(ordered) // 2])
    best["rps_rounds"] = [r.get("rps", 0) for r in rounds]
    return best


def bench_hello(kinds, modes, client, workdir, cfg, results):
    """FastCGI: hello world requests/s, 16 connections (and 1 in thread mode), new connection
    per request and KEEP_CONN."""
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
                    res = hello_round(srv, client, conns or cfg.conns, keep, cfg.duration,
                                      cfg.warmup)
                    runs.setdefault((kind, mode, conn), []).append(res)
                    log("  round %d %-18s %-6s %-4s %8.0f req/s  errors %d  stalled %d%s"
                        % (rnd + 1, KIND_LABEL[kind], mode, conn, res.get("rps", 0),
                           res.get("errors", 0), res.get("stalled_connections", 0),
                           "  " + res["error"] if res.get("error") else ""))
        for (kind, mode, conn), rs in runs.items():
            out.setdefault(kind, {}).setdefault(mode, {})[conn] = median_round(rs)
        for (kind, mode), srv in servers.items():
            if srv.proc is not None and srv.proc.poll() is not None:
                out.setdefault(kind, {}).setdefault(mode, {})["crashed"] = \
                    "exited with %s: %s" % (srv.proc.returncode, srv.log_tail())
    finally:
        for (kind, mode), srv in servers.items():
            srv.stop()
            if srv.notes:
                out.setdefault(kind, {}).setdefault(mode, {})["stop_notes"] = srv.notes


def hello_matrix(proto, kinds, modes, levels, client, workdir, cfg, tcp):
    """SCGI or AJP13: {level: {kind: {mode: result}}}: 16 connections (SCGI: one request per
    connection; AJP: persistent), one server per (level, kind, mode)."""
    out, servers, runs = {}, {}, {}
    try:
        for level in levels:
            for kind in kinds:
                for mode in modes:
                    srv = Server(kind, mode, "bench.apps:hello", workdir, protocol=proto,
                                 tcp=tcp, log_level=level)
                    log("  starting %s %s (%s mode, log level %s)" % (
                        KIND_LABEL[kind], proto, mode, level))
                    if srv.start(client):
                        servers[level, kind, mode] = srv
                    else:
                        out.setdefault(level, {}).setdefault(kind, {})[mode] = {
                            "error": srv.error}
                        log("    FAILED: %s" % srv.error)
                        srv.stop()
        for rnd in range(cfg.rounds):
            for key, srv in servers.items():
                if srv.proc is None or srv.proc.poll() is not None:
                    continue
                res = hello_round(srv, client, cfg.conns, True, cfg.proto_duration,
                                  cfg.warmup, proto=proto)
                res.pop("latency_ms_all", None)
                runs.setdefault(key, []).append(res)
                log("  round %d %s %-18s %-6s %-7s %8.0f req/s  errors %d  bad %d  stalled %d%s"
                    % (rnd + 1, proto, KIND_LABEL[key[1]], key[2], key[0], res.get("rps", 0),
                       res.get("errors", 0), res.get("bad_status", 0),
                       res.get("stalled_connections", 0),
                       "  " + res["error"] if res.get("error") else ""))
        for (level, kind, mode), rs in runs.items():
            out.setdefault(level, {}).setdefault(kind, {})[mode] = median_round(rs)
        for (level, kind, mode), srv in servers.items():
            if srv.proc is not None and srv.proc.poll() is not None:
                out.setdefault(level, {}).setdefault(kind, {}).setdefault(mode, {})[
                    "crashed"] = "exited with %s: %s" % (srv.proc.returncode, srv.log_tail())
    finally:
        for (level, kind, mode), srv in servers.items():
            srv.stop()
            if srv.notes:
                out.setdefault(level, {}).setdefault(kind, {}).setdefault(mode, {})[
                    "stop_notes"] = srv.notes
    return out
