"""The tables behind real fronts (one per protocol, mode and front; ratios against flup and
uWSGI), the front's own cost, and the targets they are judged by."""
from bench.fronts import GROUP_LABEL
from bench.report.table import fmt
from bench.servers import VARIANT_LABEL


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
        return fmt(r.get("rps")) + (" (%s)" % ", ".join(extra) if extra else "")

    def died_suffix(res):
        return " (%s)" % res["died"][:60] if res.get("died") else ""

    # wrk's loads: req/s (with a died server's note on hello's) and p99
    for load, label, p99_label, suffix in (
            ("hello", "hello req/s", "  p99 latency", died_suffix),
            ("echo", "71 KB echo, 100 clients: req/s", "  p99 latency (echo)", lambda res: "")):
        disp = {v: _cell(res, load, hello_fmt) + suffix(res) for v, res in servers.items()}
        num = {v: _value(res, load, "rps") for v, res in servers.items()}
        rows.append((label, disp, num, True))
        disp = {v: _cell(res, load, lambda r: fmt(r.get("p99_ms"), " ms"))
                for v, res in servers.items()}
        num = {v: _value(res, load, "p99_ms") for v, res in servers.items()}
        rows.append((p99_label, disp, num, False))
    disp = {v: _cell(res, "sleep", lambda r: "%s (%s at once)" % (
        fmt(r.get("rps")), r.get("concurrency")) if r.get("rps") else
        "failed: %s" % r.get("error", "?")[:60]) for v, res in servers.items()}
    num = {v: _value(res, "sleep", "rps") for v, res in servers.items()}
    rows.append(("sleep 50 ms: req/s (requests at once)", disp, num, True))
    disp = {v: _cell(res, "cpu", lambda r: fmt(r.get("rps")) if r.get("rps") else
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
            text = fmt(r["seconds"], " s")
            if len(r.get("runs", ())) > 2:
                text += " (best %s)" % fmt(r["best_seconds"], " s")
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
                "%s %s" % (what, fmt(r.get("seconds"), " s") if r.get("seconds") else
                           "failed: %s" % r.get("error")) for what, r in parts.items()))
            for name, parts in cost.items()) + ".", ""]
    return lines


# (group, flupfast's column, factor, against): its hello req/s >= factor x the other's, side
# by side in one run. FastCGI thread mode twice: with nginx's default (keep_conn off, a new
# connection per request) and with kept connections, which must stay well ahead.
TARGETS = (("fcgi-thread", "compiled_nokeep", 1.0, "uwsgi"),
           ("fcgi-thread", "compiled", 1.3, "uwsgi"), ("fcgi-fork", "compiled", 1.2, "uwsgi"),
           ("scgi-thread", "compiled", 1.0, "uwsgi"), ("scgi-fork", "compiled", 1.2, "uwsgi"),
           ("ajp-thread", "compiled", 10.0, "flup"), ("ajp-fork", "compiled", 1.5, "flup"),
           ("uwsgi-thread", "compiled", 1.0, "uwsgi"), ("uwsgi-fork", "compiled", 1.0, "uwsgi"))


def evaluate_targets(results):
    """The targets the fronts part measures (bench/README.md, "Targets")."""
    fr = results.get("fronts")
    if not fr:
        return []
    out = []
    groups = fr["groups"]
    size_mib = results["config"]["front_transfer_mib"]

    for key, variant, factor, other in TARGETS:
        m, o = _figure(groups, key, variant, "hello", "rps"), \
            _figure(groups, key, other, "hello", "rps")
        target = "%s: %s hello >= %gx %s req/s" % (
            GROUP_LABEL[key], VARIANT_LABEL[variant], factor, VARIANT_LABEL[other])
        if m and o:
            out.append({"target": target, "value": "%.2fx (%.0f vs %.0f req/s)" % (
                m / o, m, o), "met": m / o >= factor})
        else:
            out.append({"target": target, "value": "not measured", "met": False})
    out += _tail_targets(groups)
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


# The tail, against uWSGI in the same run (wrk's p99): a new connection per request (every
# compiled row but kept FastCGI) within 1.5x of uWSGI's on hello; kept FastCGI connections
# (thread mode) within 2x on hello and on the 71 KB echo at 100 clients.
NEW_CONNECTION_P99 = 1.5
KEPT_P99 = 2.0


def _figure(groups, key, variant, load, field):
    """``field`` of a backend's ``load`` in group ``key``, or None (a server that died mid-run
    has no figure to compare)."""
    res = groups.get(key, {}).get("servers", {}).get(variant, {})
    if res.get("died") or res.get("error"):
        return None
    return (res.get(load) or {}).get(field)


def _tail_targets(groups):
    out = []

    checks = [(key, variant, "hello", NEW_CONNECTION_P99)
              for key, variant in (("fcgi-thread", "compiled_nokeep"),
                                   ("fcgi-fork", "compiled_nokeep"),
                                   ("scgi-thread", "compiled"), ("scgi-fork", "compiled"),
                                   ("uwsgi-thread", "compiled"), ("uwsgi-fork", "compiled"))]
    checks += [("fcgi-thread", "compiled", load, KEPT_P99) for load in ("hello", "echo")]
    for key, variant, load, factor in checks:
        if key not in groups:
            continue
        m, o = _figure(groups, key, variant, load, "p99_ms"), \
            _figure(groups, key, "uwsgi", load, "p99_ms")
        target = "%s: %s p99 (%s) within %gx uWSGI's" % (
            GROUP_LABEL[key], VARIANT_LABEL[variant], "71 KB echo, 100 clients"
            if load == "echo" else load, factor)
        if m and o:
            out.append({"target": target, "value": "%.2fx (%.2f vs %.2f ms)" % (m / o, m, o),
                        "met": m <= factor * o})
        else:
            out.append({"target": target, "value": "not measured", "met": False})
    return out
