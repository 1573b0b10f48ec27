"""The report of the peers and seeds parts, from the results dict alone: the peers' tables (every
figure with the settings that won beside it), "what would I pick instead" (flupfast's best
against each peer's best, behind the same front), and the seeds' scenarios (001, 002's Adj
Mean, 000, 004)."""
from bench.report.table import fmt
from bench.scenarios.peers import figure, pick_pairs
from bench.servers.peers import settings_text

LOAD_HEAD = {"hello": "hello req/s (c16)", "echo71k": "71 KB echo req/s (c100)",
             "c1": "time per request, c1 (ms)", "page": "template page req/s",
             "api": "JSON req/s", "form": "form POST req/s"}


def cell(row, load):
    """A table cell: the figure, its problems, and the settings that won; or why none."""
    if row.get("not_run"):
        return "not run: %s" % row["not_run"]
    res = row.get("loads", {}).get(load)
    if res is None:
        return "error: %s" % row.get("error", "no result")
    num, _, _ = figure(row, load)
    if num is None:
        return "error: %s" % (res.get("not_run") or res.get("error") or "no figure")
    text = fmt(num)
    problems = ["%s %s" % (res[k], k.replace("_", "-")) for k in ("errors", "non_2xx", "failed")
                if res.get(k)]
    if problems:
        text += " (%s)" % ", ".join(problems)
    if row.get("settings_text"):
        text += " [%s]" % row["settings_text"]
    return text


def render_rows(rows, loads):
    head = ["behind", "server"] + [LOAD_HEAD.get(x, x) for x in loads]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        lines.append("| " + " | ".join([row.get("front_label", ""), row["label"]] +
                                       [cell(row, x) for x in loads]) + " |")
    return lines


def ratio_of(a, b, load):
    """flupfast's row ``a`` against the peer's ``b`` on ``load`` (>1: flupfast ahead; for
    times, the peer's / ours); None without both figures."""
    x, y = figure(a, load)[0], figure(b, load)[0]
    if not (x and y):
        return None
    return y / x if figure(a, load)[2] else x / y


def confirmed_row(confirmed, row, load):
    """``row`` (a winner) as the interleaved rounds of ``load`` measured it, or None."""
    for got in (confirmed or {}).get(load, []):
        if got["front"] == row["front"] and got["peer"] == row["peer"] and \
                got.get("settings_text") == row.get("settings_text"):
            return got
    return None


def pick_instead(rows, confirmed=None):
    """"What would I pick instead": per PICKS line (scenarios/peers.py), flupfast's best and
    the peer's best behind the same front, and the ratio (>1: flupfast ahead; for times, the
    peer's / ours); with ``confirmed`` (the winners' rounds interleaved, confirm_picks), that
    ratio too."""
    out = []
    for behind, load, name, a, b in pick_pairs(rows):
        ratio = ratio_of(a, b, load) if a and b else None
        again = None
        if a and b:
            ca, cb = confirmed_row(confirmed, a, load), confirmed_row(confirmed, b, load)
            again = ratio_of(ca, cb, load) if ca and cb else None
        out.append({"behind": behind, "load": load, "peer": name,
                    "flupfast": "%s: %s" % (a["label"], cell(a, load)) if a else "n/a",
                    "other": "%s (%s): %s" % (b["label"], b["front_label"], cell(b, load))
                    if b else "n/a", "ratio": ratio, "interleaved": again})
    return out


def render_pick(rows, confirmed=None):
    picks = pick_instead(rows, confirmed)
    again = any(p["interleaved"] for p in picks)
    lines = ["| behind | load | flupfast (best) | instead (best) | flupfast vs it |" +
             (" the two again, rounds interleaved |" if again else ""),
             "|---|---|---|---|---|" + ("---|" if again else "")]
    for p in picks:
        lines.append("| %s | %s | %s | %s | %s |" % (
            p["behind"], LOAD_HEAD.get(p["load"], p["load"]), p["flupfast"], p["other"],
            "%.2fx" % p["ratio"] if p["ratio"] else "n/a") +
            (" %s |" % ("%.2fx" % p["interleaved"] if p["interleaved"] else "n/a")
             if again else ""))
    return lines


def render_tried(rows, load):
    """The sweep: each row's settings with the figure each gave on ``load`` (the winner
    starred), so the choice can be checked."""
    lines = []
    for row in rows:
        if not row.get("tried"):
            continue
        parts = []
        for t in row["tried"]:
            res = t.get("loads", {}).get(load) or t["result"]
            num = figure({"loads": {load: res}}, load)[0]
            star = "*" if t["settings"] == row.get("best") else ""
            parts.append("%s: %s%s" % (settings_text(t["settings"]),
                                       fmt(num) if num is not None else res.get("error", "n/a"),
                                       star))
        lines.append("- %s, %s: %s" % (row["front_label"], row["label"], "; ".join(parts)))
    return (["Sweep (%s; * the setting kept):" % LOAD_HEAD.get(load, load), ""] + lines +
            [""]) if lines else []


def render_peers(results):
    peers = results.get("peers")
    if not peers:
        return []
    lines = ["## What would I pick instead", "",
             "Each server in a fresh cell behind the same front; figures are medians of the "
             "rounds; [settings] are the ones that won the sweep%s." % (
                 "" if peers.get("sweep") else " (no --sweep: each server's first setting)"),
             ""]
    hello = peers["apps"].get("hello", {})
    if hello.get("rows"):
        lines += render_pick(hello["rows"], hello.get("confirmed"))
        if hello.get("confirmed"):
            lines += ["", "The last column: each line's two winners again at their settings, "
                      "every cell up at once and %d rounds alternating between them (medians); "
                      "the sweep's figures come one server after the other."
                      % hello.get("confirm_rounds", 0)]
        lines += ["", "### hello and the 71 KB echo", ""]
        lines += render_rows(hello["rows"], hello["loads"]) + [""]
        lines += render_tried(hello["rows"], hello["loads"][0])
    flask = peers["apps"].get("flask", {})
    if flask.get("not_run"):
        lines += ["### The Flask app: not run: %s" % flask["not_run"], ""]
    elif flask.get("rows"):
        lines += ["### The Flask app (bench/flask_app.py)", ""]
        lines += render_rows(flask["rows"], flask["loads"]) + [""]
        lines += render_tried(flask["rows"], flask["loads"][0])
    return lines


def _ratio(x, y):
    return "%.2fx" % (x / y) if x and y else "n/a"


def _seed_001(s):
    """flupfast vs uWSGI per protocol, then SCGI's echo rate over uwsgi's for each server (the
    two protocols' cost side by side). A group with "pending" is an older run's (before
    flupfast spoke uwsgi)."""
    lines = ["| protocol | flupfast | uWSGI | flupfast vs uWSGI |", "|---|---|---|---|"]
    rates = {}   # protocol -> (flupfast's, uWSGI's)
    for g in s["groups"]:
        if g.get("pending"):
            lines.append("| %s | %s | | |" % (g["protocol"], g["pending"]))
            continue
        a = next((r for r in g["rows"] if r["peer"].startswith("flupfast")), None)
        b = next((r for r in g["rows"] if r["peer"].startswith("uwsgi")), None)
        x = figure(a, "echo71k")[0] if a else None
        y = figure(b, "echo71k")[0] if b else None
        rates[g["protocol"]] = (x, y)
        lines.append("| %s | %s | %s | %s |" % (
            g["protocol"], cell(a, "echo71k") if a else "not selected",
            cell(b, "echo71k") if b else "not selected", _ratio(x, y)))
    if s.get("interleaved"):
        lines += ["", "Each protocol's two servers up at once, %d rounds alternating between "
                  "them (medians)." % s["interleaved"]]
    if "scgi" in rates and "uwsgi" in rates:
        (fs, us), (fu, uu) = rates["scgi"], rates["uwsgi"]
        lines += ["", "SCGI/uwsgi (SCGI's req/s over uwsgi's): flupfast %s, uWSGI %s" % (
            _ratio(fs, fu), _ratio(us, uu))]
    return lines


def _seed_002(s):
    lines = ["| solution | Mean (ms) | Adj Mean (ms) |", "|---|---|---|",
             "| Baseline (the app alone, in-process) | %s | n/a |" % fmt(s["baseline_ms"])]
    for row in s["rows"]:
        adj = row.get("adj_mean_ms")
        lines.append("| %s -> %s | %s | %s |" % (row["front_label"], row["label"],
                                                 cell(row, "c1"),
                                                 fmt(adj) if adj is not None else "n/a"))
    return lines


def _seed_000(s):
    lines = ["Upload of %d MiB (time limit %.0f s):" % (s["upload_mib"], s["upload_timeout"]),
             "", "| behind | server | seconds | MiB/s |", "|---|---|---|---|"]
    for row in s["upload"]:
        res = row.get("loads", {}).get("upload", {})
        if row.get("not_run") or res.get("error") or not res:
            why = row.get("not_run") or res.get("error") or row.get("error")
            lines.append("| %s | %s | %s | |" % (row["front_label"], row["label"], why))
        else:
            lines.append("| %s | %s | %s [%s] | %s |" % (
                row["front_label"], row["label"], fmt(res["seconds"]),
                row.get("settings_text", ""), fmt(res["mib_per_s"])))
    lines += ["", "Compute-bound app (/cpu), thread vs fork:", ""]
    return lines + render_rows(s["cpu"], ["cpu"])


def _seed_004(s):
    lines = ["| %d requests, c1 | req/s | mean (ms) |" % s["requests"], "|---|---|---|"]
    for row in s["rows"]:
        res = row.get("loads", {}).get("c1") or {}
        why = row.get("not_run") or res.get("not_run") or res.get("error")
        if why or res.get("rps") is None:
            lines.append("| %s | %s | |" % (row["label"], why or "no figure"))
        else:
            lines.append("| %s | %s | %s |" % (row["label"], fmt(res["rps"]),
                                               fmt(res.get("mean_ms"))))
    return lines


SEED_RENDER = {"000": _seed_000, "001": _seed_001, "002": _seed_002, "004": _seed_004}


def render_seeds(results):
    lines = []
    for name, s in sorted(results.get("seeds", {}).items()):
        lines += ["## Seed %s: %s" % (name, s.get("title", "")), ""]
        lines += SEED_RENDER[name](s) + [""]
    return lines
