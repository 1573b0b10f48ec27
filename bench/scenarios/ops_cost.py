"""What the operations features cost in requests/s: flupfast compiled, FastCGI hello over a
Unix socket, the C load client (16 connections, kept with FCGI_KEEP_CONN, and one connection
per request), thread and fork mode; the same server plain and with one feature on at a time
(``--access-log``, ``--status-path``, ``--slow-log``, ``--request-timeout``, process titles),
rounds interleaved (each starting one variant further on) so the machine's drift touches every
variant alike. Instruction counts of
the same features (noise-free): ``python -m bench.gateway_cost``.

    python -m bench.scenarios.ops_cost [--rounds 3] [--duration 2] [--modes thread,fork]
        [--output FILE.json]
"""
import argparse
import json
import os
import statistics
import tempfile

from bench.base import log, rotated
from bench.drivers.fcgi_load import LoadClient
from bench.servers.server import Server

POOL_ARGS = {"thread": ["--min-spare", "4", "--max-spare", "16", "--max-threads", "64"],
             "fork": ["--min-spare", "2", "--max-spare", "4", "--max-children", "8"]}


def variants(workdir):
    """name -> extra command-line arguments; "plain" has process titles off, so each feature
    is compared with nothing on."""
    return {
        "plain": ["--no-proctitle"],
        "access log": ["--no-proctitle", "--access-log", os.path.join(workdir, "access.log")],
        "status page": ["--no-proctitle", "--status-path", "/fpm-status"],
        "slow log": ["--no-proctitle", "--slow-log", "10"],
        "request timeout": ["--no-proctitle", "--request-timeout", "60"],
        "process titles": [],
    }


def measure(modes, rounds, duration, conns, workdir):
    client = LoadClient(workdir)
    out = {}
    for mode in modes:
        for keep in (True, False):
            row = out.setdefault("%s, %s" % (mode, "kept connections" if keep
                                             else "a connection per request"), {})
            servers = {}
            try:
                for name, extra in variants(workdir).items():
                    srv = Server("compiled", mode, "bench.apps:hello", workdir,
                                 extra_args=POOL_ARGS[mode] + extra)
                    if not srv.start(client):
                        row[name] = {"error": srv.error}
                        continue
                    servers[name] = srv
                names = list(servers)
                for rnd in range(rounds):
                    for name in rotated(names, rnd):
                        srv = servers[name]
                        res = client.run(srv.address, "hello", conns=conns, keep=keep,
                                         duration=duration, warmup=0.5,
                                         deadline=duration + 30)
                        row.setdefault(name, {"rps": [], "p99_ms": []})
                        row[name]["rps"].append(res.get("rps") or 0)
                        row[name]["p99_ms"].append((res.get("latency_ms") or {}).get("p99"))
                        log("  round %d %-6s keep=%-5s %-16s %8.0f req/s  p99 %s ms" % (
                            rnd + 1, mode, keep, name, res.get("rps") or 0,
                            (res.get("latency_ms") or {}).get("p99")))
            finally:
                for srv in servers.values():
                    srv.stop()
    return out


def table(out):
    lines = ["| mode, connections | feature | req/s (median) | vs plain | p99 ms (median) |",
             "|---|---|---|---|---|"]
    for row_name, row in out.items():
        plain = statistics.median(row.get("plain", {}).get("rps") or [0]) or None
        for name, res in row.items():
            if "error" in res:
                lines.append("| %s | %s | did not start: %s | | |" % (row_name, name,
                                                                    res["error"][:80]))
                continue
            rps = statistics.median(res["rps"])
            p99 = statistics.median([p for p in res["p99_ms"] if p is not None] or [0])
            lines.append("| %s | %s | %.0f | %s | %.2f |" % (
                row_name, name, rps, "%.3f" % (rps / plain) if plain else "-", p99))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--modes", default="thread,fork")
    ap.add_argument("--output", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="flupfast-ops-cost-") as workdir:
        out = measure(args.modes.split(","), args.rounds, args.duration, args.conns, workdir)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(out, f, indent=1)
    print(table(out))


if __name__ == "__main__":
    main()
