"""The SCGI and AJP13 tables (direct, and AJP through Apache) and the targets they are judged
by."""
from bench.report.table import fmt, kinds_table


def _hello_rows(hello, kinds, levels, modes, what):
    rows = []
    for level in levels:
        for mode in modes:
            disp, num, ldisp, lnum, cdisp, cnum = {}, {}, {}, {}, {}, {}
            for kind in kinds:
                r = hello.get(level, {}).get(kind, {}).get(mode, {})
                if "rps" not in r:
                    disp[kind] = "failed: %s" % str(r.get("error") or r.get("crashed") or
                                                    "not run")[:80]
                    continue
                extra = []
                if r.get("errors"):
                    extra.append("%d errors" % r["errors"])
                if r.get("bad_status"):
                    extra.append("%d bad status" % r["bad_status"])
                if r.get("stalled_connections"):
                    extra.append("%d/%d conns stalled" % (r["stalled_connections"],
                                                          r["connections"]))
                if r.get("crashed"):
                    extra.append("server died")
                num[kind] = r["rps"] if not r.get("bad_status") else None
                disp[kind] = fmt(r["rps"]) + (" (%s)" % ", ".join(extra) if extra else "")
                lnum[kind] = r.get("latency_ms", {}).get("p99")
                ldisp[kind] = fmt(lnum[kind], " ms")
                cnum[kind] = r.get("server_cpu_us_per_request")
                cdisp[kind] = fmt(cnum[kind], " us")
            rows.append(("hello req/s, %s mode, %s, log level %s" % (mode, what, level), disp,
                         num, True, ""))
            rows.append(("  p99 latency (%s, %s)" % (mode, level), ldisp, lnum, False, ""))
            rows.append(("  server CPU per request (%s, %s)" % (mode, level), cdisp, cnum,
                         False, ""))
    return rows


def _transfer_rows(label, per_kind, full_mib):
    """Rows for one transfer: seconds (flup possibly capped and extrapolated), throughput,
    peak RSS."""
    sdisp, snum, tdisp, tnum, rdisp = {}, {}, {}, {}, {}
    note = ""
    for kind, r in per_kind.items():
        if not r:
            continue
        if r.get("seconds"):
            best = " (best %s)" % fmt(r["best_seconds"], " s") if len(
                r.get("seconds_runs", ())) > 2 else ""
            if r.get("extrapolated_seconds"):
                sdisp[kind] = "%s at %g MiB%s; **~%s per %d MiB (extrapolated)**" % (
                    fmt(r["seconds"], " s"), r["size_mib"], best,
                    fmt(r["extrapolated_seconds"], " s"), full_mib)
                snum[kind] = r["extrapolated_seconds"]
                note = " (vs extrapolated)"
            else:
                sdisp[kind] = fmt(r["seconds"], " s") + best
                snum[kind] = r["seconds"]
            tnum[kind] = r.get("mib_per_s")
            tdisp[kind] = fmt(tnum[kind], " MiB/s") + (
                " (at %g MiB)" % r["size_mib"] if r["size_mib"] != full_mib else "") + (
                " (INVALID: %s)" % r["invalid"] if r.get("invalid") else
                "" if r.get("checked") else " (UNCHECKED)")
        elif r.get("timed_out_after"):
            sdisp[kind] = "> %.0f s at %g MiB (timeout)" % (r["timed_out_after"], r["size_mib"])
        else:
            sdisp[kind] = "failed: %s" % str(r.get("error") or r.get("crashed"))[:80]
        if r.get("crashed"):
            sdisp[kind] += " (server died: %s)" % r["crashed"][:60]
        if "peak_above_idle_mib" in r:
            rdisp[kind] = fmt(r["peak_above_idle_mib"], " MiB") + (
                " (%g MiB)" % r["size_mib"] if r["size_mib"] != full_mib else "")
    return [(label + ": seconds", sdisp, snum, False, note),
            ("  throughput", tdisp, tnum, True, ""),
            ("  peak RSS above idle", rdisp, {}, None, "")]


def _syscall_row(label, sc, kinds):
    disp = {}
    for kind in kinds:
        r = sc.get(kind)
        if r and "total_per_request" in r:
            disp[kind] = "%s: %s" % (fmt(r["total_per_request"]), ", ".join(
                "%s %g" % kv for kv in list(r["per_request"].items())[:6]))
        elif r:
            disp[kind] = "failed: %s" % r.get("error")
    return (label, disp, {}, None, "")


def render_sections(results):
    """Markdown lines of the SCGI and AJP tables (empty when they did not run)."""
    kinds = results["kinds"]
    cfg = results["config"]
    levels = cfg.get("proto_levels", ["INFO"])
    modes = results.get("modes", ["thread", "fork"])
    full = cfg["upload_mib"]
    lines = []
    scgi = results.get("scgi")
    if scgi:
        rows = _hello_rows(scgi.get("hello", {}), kinds, levels, modes,
                           "%d conns, one request per connection" % cfg["conns"])
        tr = scgi.get("transfers", {})
        for key, label in (("upload_read65536", "%d MiB upload, app read(65536)" % full),
                           ("upload_readline", "%d MiB upload, app readline()" % full),
                           ("download", "%d MiB download, one bytes object"
                            % cfg["download_mib"])):
            rows += _transfer_rows(label, {k: tr.get(k, {}).get(key) for k in kinds}, full)
        if scgi.get("syscalls"):
            rows.append(_syscall_row("syscalls per request, thread mode, 1000 sequential "
                                     "requests, log level WARNING", scgi["syscalls"], kinds))
        if scgi.get("syscalls_fork"):
            rows.append(_syscall_row("syscalls per request, fork mode (all processes), 1000 "
                                     "sequential requests, log level WARNING",
                                     scgi["syscalls_fork"], kinds))
        lines += ["## SCGI (Unix socket)", ""] + kinds_table(rows, kinds) + [""]
    ajp = results.get("ajp")
    if ajp:
        rows = _hello_rows(ajp.get("hello", {}), kinds, levels, modes,
                           "%d persistent conns, direct" % cfg["conns"])
        tr = ajp.get("transfers", {})
        for packet in (8192, 65536):
            rows += _transfer_rows(
                "%d MiB upload, direct, %d KiB packets%s, app read(65536)" % (
                    full, packet // 1024, " (flupfast --ajp-packet-size 65536)"
                    if packet != 8192 else ""),
                {k: tr.get(k, {}).get("upload_%d" % packet) for k in kinds}, full)
        ap = ajp.get("apache")
        if ap:
            if ap.get("error"):
                rows.append(("via Apache: failed", {k: ap["error"][:100] for k in kinds}, {},
                             None, ""))
            for level in levels:
                disp, num, cdisp, cnum, pdisp, pnum = {}, {}, {}, {}, {}, {}
                for kind in kinds:
                    r = ap.get("levels", {}).get(level, {}).get(kind, {})
                    h = r.get("hello")
                    if not h or not h.get("rps"):
                        disp[kind] = "failed: %s" % str(r.get("error") or r.get("crashed") or
                                                        (h or {}).get("error"))[:80]
                        continue
                    bad = []
                    if r.get("hello_check") != "ok":
                        bad.append("check: %s" % r.get("hello_check"))
                    if h.get("failed") or h.get("non_2xx"):
                        bad.append("%s failed, %s non-2xx" % (h["failed"], h["non_2xx"]))
                    if r.get("crashed"):
                        bad.append("backend died")
                    num[kind] = h["rps"] if not bad else None
                    disp[kind] = fmt(h["rps"]) + (" (%s)" % "; ".join(bad) if bad else "")
                    pnum[kind] = h.get("p99_ms")
                    pdisp[kind] = "%s ms" % h.get("p99_ms")
                    cnum[kind] = h.get("backend_cpu_us_per_request")
                    cdisp[kind] = fmt(cnum[kind], " us")
                rows.append(("hello req/s via Apache mod_proxy_ajp (ab, %d conns), thread "
                             "mode, log level %s" % (cfg["conns"], level), disp, num, True, ""))
                rows.append(("  p99 latency (ab, whole ms)", pdisp, pnum, False, ""))
                rows.append(("  backend CPU per request", cdisp, cnum, False, ""))
            up = ap.get("upload", {})
            rows += _transfer_rows(
                "%d MiB upload via Apache (HTTP POST, ProxyIOBufferSize 65536), read(65536)"
                % full, {k: up.get(k) for k in kinds}, full)
        if ajp.get("syscalls"):
            rows.append(_syscall_row("syscalls per request, thread mode, one persistent "
                                     "connection, log level WARNING", ajp["syscalls"], kinds))
        lines += ["## AJP13 (TCP loopback)", ""] + kinds_table(rows, kinds) + [""]
    return lines


def evaluate_targets(results):
    """The SCGI and AJP targets (bench/README.md, "Targets"), for the compiled backend."""
    kind = "compiled" if "compiled" in results["kinds"] else "pure"
    out = []
    for level, per in results.get("scgi", {}).get("hello", {}).items():
        f = per.get("flup", {}).get("fork", {}).get("rps")
        m = per.get(kind, {}).get("fork", {}).get("rps")
        if f and m:
            out.append({"target": "SCGI, %s, fork mode, log level %s: >= 1.5x flup hello "
                                  "requests/s" % (kind, level),
                        "value": "%.2fx (%.0f vs %.0f req/s)" % (m / f, m, f),
                        "met": m / f >= 1.5})
    ajp = results.get("ajp", {})
    for level, per in ajp.get("hello", {}).items():
        for mode in ("thread", "fork"):
            f = per.get("flup", {}).get(mode, {}).get("rps")
            m = per.get(kind, {}).get(mode, {}).get("rps")
            if f and m:
                out.append({"target": "AJP direct, %s, %s mode, log level %s: >= 10x flup "
                                      "hello requests/s" % (kind, mode, level),
                            "value": "%.1fx (%.0f vs %.0f req/s)" % (m / f, m, f),
                            "met": m / f >= 10})
    for level, per in ajp.get("apache", {}).get("levels", {}).items():
        f = (per.get("flup", {}).get("hello") or {}).get("rps")
        m = (per.get(kind, {}).get("hello") or {}).get("rps")
        if f and m:
            out.append({"target": "AJP via Apache, %s, log level %s: >= 10x flup hello "
                                  "requests/s" % (kind, level),
                        "value": "%.1fx (%.0f vs %.0f req/s)" % (m / f, m, f),
                        "met": m / f >= 10})
    size = results["config"]["upload_mib"]
    for label, r in (("direct, 8 KiB packets", ajp.get("transfers", {}).get(kind, {}).get(
            "upload_8192")), ("direct, 64 KiB packets", ajp.get("transfers", {}).get(
                kind, {}).get("upload_65536")), ("via Apache, ProxyIOBufferSize 65536",
                                                 ajp.get("apache", {}).get("upload", {}).get(
                                                     kind))):
        if r and r.get("seconds"):
            out.append({"target": "AJP %s, %s: %d MiB upload <= 0.5 s" % (label, kind, size),
                        "value": "median %.3f s, best %.3f s" % (r["seconds"],
                                                                r["best_seconds"]),
                        "met": r["seconds"] <= 0.5})
    return out
