"""The FastCGI direct table (hello, uploads, download, syscalls: no front) and the targets it
is judged by."""
from bench.base import MIB
from bench.report.table import fmt
from bench.scenarios.hello import HELLO_LABELS, HELLO_RUNS
from bench.servers import KIND_LABEL


def _best(r):
    """' (best X s)' when several timed runs were made."""
    if len(r.get("seconds_runs", ())) > 2 and r.get("best_seconds"):
        return " (best %s)" % fmt(r["best_seconds"], " s")
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
                disp[kind] = fmt(c.get("rps")) + (" (%s)" % ", ".join(extra) if extra else "")
            rows.append(("hello req/s, %s mode, %d conn%s, %s" % (
                mode, conns or results["config"]["conns"], "s" if conns != 1 else "", label),
                disp, num, True))
            disp, num = {}, {}
            for kind in kinds:
                c = results.get("hello", {}).get(kind, {}).get(mode, {}).get(conn)
                if c:
                    num[kind] = c.get("latency_ms", {}).get("p99")
                    disp[kind] = fmt(num[kind], " ms")
            rows.append(("  p99 latency (%s, %s)" % (mode, conn), disp, num, False))
            disp, num = {}, {}
            for kind in kinds:
                c = results.get("hello", {}).get(kind, {}).get(mode, {}).get(conn)
                if c and c.get("server_cpu_us_per_request"):
                    num[kind] = c["server_cpu_us_per_request"]
                    disp[kind] = fmt(num[kind], " us")
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
                disp[kind] = fmt(r["mib_per_s"], " MiB/s") + (
                    " (INVALID: wsgi.input cuts pieces wrongly)" if r.get("invalid") else
                    "" if r.get("checked") else " (UNCHECKED)")
                snum[kind] = r["seconds"]
                sdisp[kind] = fmt(r["seconds"], " s") + _best(r)
            else:
                disp[kind] = "failed: %s" % str(r.get("error"))[:60]
            if "peak_above_idle_mib" in r:
                rnum[kind] = r["peak_above_idle_mib"]
                rdisp[kind] = fmt(r["peak_above_idle_mib"], " MiB")
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
            sdisp[kind] = fmt(r["seconds"], " s") + _best(r) + (
                " (%g MiB)" % r["size_mib"] if r["size_mib"] != results["config"][
                    "download_mib"] else "")
            disp[kind] = fmt(r["mib_per_s"], " MiB/s") + (
                " (at %g MiB)" % r["size_mib"] if r["size_mib"] != results["config"][
                    "download_mib"] else "")
        else:
            sdisp[kind] = "failed: %s" % str(r.get("error"))[:60]
        if "peak_above_idle_mib" in r:
            rnum[kind] = r["peak_above_idle_mib"]
            rdisp[kind] = fmt(r["peak_above_idle_mib"], " MiB") + (
                " (%g MiB)" % r["size_mib"] if r["size_mib"] != results["config"][
                    "download_mib"] else "")
        big = tr.get(kind, {}).get("download_full")
        if big:
            if big.get("seconds"):
                sdisp[kind] += "; %g MiB: %s" % (big["size_mib"], fmt(big["seconds"], " s"))
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
                    disp[kind] = "%s: %s" % (fmt(r["total_per_request"]), ", ".join(
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
