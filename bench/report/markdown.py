"""The whole Markdown report of a run (the machine and versions, then each part's table, the
targets and the notes) and every target's verdict."""
from bench.report import direct, fronts, instructions, peers, protocols
from bench.servers import KIND_LABEL


def all_targets(results):
    return fronts.evaluate_targets(results) + direct.evaluate_targets(results) + \
        protocols.evaluate_targets(results)


def render_markdown(results):
    kinds = results["kinds"]
    m = results["survey"]["machine"]
    lines = ["# flupfast benchmark: FastCGI, SCGI, AJP13", "",
             "Run %s, %s mode, in %.0f s." % (results["started"], "quick" if
                                               results["config"]["quick"] else "full",
                                               results["elapsed_seconds"]), "",
             "Machine: %d CPUs (%s), Linux %s, Python %s; load average (1, 5, 15 min) at "
             "start %s, at the end %s." % (
                 m["nproc"], m["cpu"], m["kernel"], m["python"], m["loadavg_at_start"],
                 m.get("loadavg_at_end", "?")),
             "uWSGI %s, gunicorn %s, Flask %s, nginx %s, Apache %s, load client %s." % (
                 results["survey"].get("uwsgi") or "missing",
                 results["survey"].get("gunicorn") or "missing",
                 results["survey"].get("flask") or "missing",
                 results["survey"].get("nginx_version") or "missing",
                 results["survey"].get("apache2_version") or "missing",
                 "wrk" if results["survey"].get("wrk") else "ab -k" if
                 results["survey"].get("ab") else "missing"),
             "flup %s; flupfast %s (git %s); compiled backend: %s." % (
                 results["survey"].get("flup"), results["survey"].get("flupfast"),
                 results["survey"].get("git", "?"),
                 "built" if results["survey"].get("compiled") else "NOT BUILT"), "",
             ]
    lines += fronts.render_section(results)
    lines += instructions.render_section(results, kinds)
    if results.get("hello") or any(results.get("transfers", {}).values()) or \
            results.get("syscalls"):
        lines += ["## FastCGI direct, no front (Unix socket, fcgi_load)", "",
                  direct.render_table(results, kinds), ""]
    lines += protocols.render_sections(results)
    lines += peers.render_peers(results)
    lines += peers.render_seeds(results)
    if results.get("targets"):
        lines += ["## Targets", ""]
        for t in results["targets"]:
            lines.append("- %s: **%s** (%s)" % (t["target"], "met" if t["met"] else "NOT met",
                                                t["value"]))
        lines.append("")
    notes = results["survey"]["missing"] + results["survey"]["notes"] + results["notes"]
    for kind, parts in results.get("transfers", {}).items():
        for part, r in parts.items():
            if r.get("invalid"):
                notes.append("%s, %s: %s" % (KIND_LABEL[kind], part, r["invalid"]))
            if r.get("timed_out_after"):
                notes.append("%s, %s (%g MiB): no answer within %.0f s (timeout)" % (
                    KIND_LABEL[kind], part, r.get("size_mib", 0), r["timed_out_after"]))
            elif r.get("error") and not r.get("seconds"):
                notes.append("%s, %s failed: %s" % (KIND_LABEL[kind], part, r["error"]))
    if notes:
        lines += ["## Notes", ""] + ["- " + n for n in notes] + [""]
    return "\n".join(lines)
