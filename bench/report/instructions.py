"""The table of instructions per hello request (callgrind), per protocol and server kind."""
from bench.scenarios.instructions import PROTO_LABEL, PROTOCOLS
from bench.servers import KIND_LABEL


def render_section(results, kinds):
    """Markdown lines for the instruction-count table."""
    cg = results.get("callgrind")
    if not cg:
        return []
    others = [k for k in kinds if k != "flup"]
    head = ["instructions per hello request (callgrind)"] + [KIND_LABEL[k] for k in kinds] + \
        ["%s vs flup" % KIND_LABEL[k].replace("flupfast ", "") for k in others]
    lines = ["## Instructions per request (callgrind, N = %d and 2N, thread mode)" % cg["n"],
             "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for proto in PROTOCOLS:
        row = cg.get(proto)
        if not row:
            continue
        cells = [PROTO_LABEL[proto]]
        for kind in kinds:
            r = row.get(kind, {})
            cells.append("{:,}".format(r["per_request"]) if "per_request" in r else
                         ("not run" if not r else str(r.get("error", "?"))[:80]))
        for kind in others:
            a = row.get(kind, {}).get("per_request")
            b = row.get("flup", {}).get("per_request")
            cells.append("%.2fx fewer" % (b / a) if a and b else "")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Start-up and shutdown subtracted (runs of N and 2N requests); lower is "
              "better; \"x fewer\" is flup's count divided by flupfast's.", ""]
    return lines
