"""Cells side by side behind nginx, rounds interleaved, with the CPU each process group spends
per request: what moves the fork rows' ratios on a 2-core machine, where nginx and wrk share the
cores with the server. Each cell is one peer at one setting (``bench/servers/peers.py``), all up
at once; a round runs wrk (``-t1 -c16``, hello) on each in turn, starting one cell later each
round, so no cell always runs first. A flupfast peer may run another checkout (``@TREE``: its
package and its build), to set a change against the build before it.

    python -m bench.scenarios.duel [--rounds 20] [--duration 3] [--out FILE]
        PEER[:key=value,...][@TREE] ...
    python -m bench.scenarios.duel flupfast-scgi-fork uwsgi-scgi:processes=2
    python -m bench.scenarios.duel flupfast-fcgi-fork flupfast-fcgi-fork@/tmp/before \\
        uwsgi-fcgi:processes=2

Per round and cell: req/s, p99, and the CPU time per request of the server's processes, of
nginx's and of wrk (``/proc``, around the round), and the machine's idle share. At the end, per
cell: the median req/s, and against the last cell the median of the round ratios (each round's
pair measured within seconds) and the ratio of the medians.
"""
import argparse
import contextlib
import json
import os
import pathlib
import resource
import statistics
import sys
import tempfile

import bench.servers.server as server_module
from bench.base import log, rotated
from bench.drivers.fcgi_load import LoadClient
from bench.drivers.wrk import run_wrk
from bench.procs import process_tree, tree_cpu_seconds
from bench.scenarios.cells import Cell
from bench.servers.peers import PEERS
from bench.servers.uwsgi import find_uwsgi

CONNS = 16


def parse_cell(text):
    """``PEER[:key=value,...][@TREE]`` -> (peer key, settings dict of ints, tree or None)."""
    text, _, tree = text.partition("@")
    key, _, given = text.partition(":")
    if key not in PEERS:
        raise ValueError("unknown peer %r (bench/servers/peers.py has %s)"
                         % (key, ", ".join(sorted(PEERS))))
    settings = {}
    for item in filter(None, given.split(",")):
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError("a setting is key=value: %r" % item)
        settings[name] = int(value)
    return key, settings, tree or None


def summarize(labels, runs, base=-1):
    """Per cell (``runs``: one list of round results each, rounds in step): the median req/s,
    the median of its round ratios to cell ``base`` and the ratio of the medians, the median
    p99 and the median CPU per request of each process group."""
    base_runs = runs[base]
    out = []
    for label, rounds in zip(labels, runs):
        pairs = [(mine["rps"], theirs["rps"]) for mine, theirs in zip(rounds, base_runs)
                 if mine.get("rps") and theirs.get("rps")]
        rates = [r["rps"] for r in rounds if r.get("rps")]
        base_rates = [r["rps"] for r in base_runs if r.get("rps")]
        row = {"cell": label, "rounds": len(rates),
               "rps": statistics.median(rates) if rates else None,
               "round_ratio": statistics.median(a / b for a, b in pairs) if pairs else None,
               "median_ratio": (statistics.median(rates) / statistics.median(base_rates)
                                if rates and base_rates else None)}
        for group in ("p99_ms", "server_us", "nginx_us", "wrk_us"):
            values = [r[group] for r in rounds if r.get(group) is not None]
            row[group] = statistics.median(values) if values else None
        out.append(row)
    return out


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _idle_ticks():
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    return sum(values), values[3] + values[4]


def one_round(cell, duration):
    """wrk on one cell, with the CPU each process group spent per request meanwhile."""
    server_pids = process_tree(cell.srv.proc.pid)
    nginx_pids = process_tree(cell.front.proc.pid)
    server0, nginx0 = tree_cpu_seconds(server_pids), tree_cpu_seconds(nginx_pids)
    wrk0, (total0, idle0) = _children_cpu(), _idle_ticks()
    res = run_wrk(cell.port, "/", CONNS, duration)
    # A child forked during the round counts too (one that exited does not: rare at a steady
    # load, and it shows as a lower figure).
    server_pids = sorted(set(server_pids) | set(process_tree(cell.srv.proc.pid)))
    server1, nginx1 = tree_cpu_seconds(server_pids), tree_cpu_seconds(nginx_pids)
    wrk1, (total1, idle1) = _children_cpu(), _idle_ticks()
    n = res.get("requests") or 0
    out = {"rps": res.get("rps"), "p99_ms": res.get("p99_ms"),
           "idle": round((idle1 - idle0) / max(1, total1 - total0), 3),
           "error": res.get("error") or res.get("errors") or res.get("non_2xx") or None}
    if n:
        out.update(server_us=round((server1 - server0) / n * 1e6, 1),
                   nginx_us=round((nginx1 - nginx0) / n * 1e6, 1),
                   wrk_us=round((wrk1 - wrk0) / n * 1e6, 1))
    return out


def _start(stack, spec, workdir, client, index):
    key, settings, tree = spec
    own = os.path.join(workdir, "cell%d" % index)
    os.makedirs(own)
    saved = server_module.ROOT
    if tree:  # the server runs from that checkout (its cwd and first on its path)
        server_module.ROOT = pathlib.Path(tree).resolve()
    try:
        cell = stack.enter_context(Cell("nginx", PEERS[key], settings, "bench.apps:hello",
                                        own, client, uwsgi_binary=find_uwsgi()))
    finally:
        server_module.ROOT = saved
    if cell.error:
        raise RuntimeError(cell.error)
    return cell


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cells", nargs="+", metavar="PEER[:key=value,...][@TREE]")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--duration", type=float, default=3.0, help="seconds of wrk per cell")
    ap.add_argument("--out", default="", help="write the rounds and the summary (JSON)")
    args = ap.parse_args(argv)
    specs = [parse_cell(text) for text in args.cells]
    workdir = tempfile.mkdtemp(prefix="duel-")
    runs = [[] for _ in specs]
    with contextlib.ExitStack() as stack:
        client = LoadClient(workdir)
        cells = [_start(stack, spec, workdir, client, i) for i, spec in enumerate(specs)]
        for cell in cells:
            run_wrk(cell.port, "/", CONNS, 1)  # warm: pools grown, caches filled
        for r in range(args.rounds):
            for i in rotated(range(len(cells)), r):
                res = one_round(cells[i], args.duration)
                runs[i].append(res)
                log("round %d  %-44s %8s req/s  server %s  nginx %s  wrk %s us  idle %s%s" % (
                    r, args.cells[i][:44], res["rps"], res.get("server_us"),
                    res.get("nginx_us"), res.get("wrk_us"), res["idle"],
                    "  ERROR %s" % res["error"] if res["error"] else ""))
    summary = summarize(args.cells, runs)
    for row in summary:
        log("%-44s median %.0f req/s; against %s: round ratios %.3f, medians %.3f; p99 %.2f "
            "ms; server %.1f nginx %.1f wrk %.1f us" % tuple(
                [row["cell"][:44], row["rps"] or 0, args.cells[-1][:30]]
                + [row[k] or 0 for k in ("round_ratio", "median_ratio", "p99_ms", "server_us",
                                         "nginx_us", "wrk_us")]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"cells": args.cells, "rounds": runs, "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
