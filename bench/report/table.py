"""Cells and tables shared by the report's parts: a number's display, and the table of one
column per server kind with its ratio to flup."""
from bench.servers import KIND_LABEL


def fmt(value, unit=""):
    if value is None:
        return "n/a"
    if isinstance(value, str):
        return value
    if value >= 100:
        return "%.0f%s" % (value, unit)
    if value >= 10:
        return "%.1f%s" % (value, unit)
    return "%.3g%s" % (value, unit)


def _ratio(kind_num, flup_num, higher):
    if not kind_num or not flup_num:
        return None
    return kind_num / flup_num if higher else flup_num / kind_num


def kinds_table(rows, kinds):
    """rows: (metric, {kind: display}, {kind: number or None}, higher_is_better, note);
    a ratio is shown where flup and the kind both have a number; ``note`` follows it."""
    others = [k for k in kinds if k != "flup"]
    head = ["metric"] + [KIND_LABEL[k] for k in kinds]
    if "flup" in kinds:
        head += ["%s vs flup" % KIND_LABEL[k].replace("flupfast ", "") for k in others]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for metric, disp, num, higher, note in rows:
        cells = [metric] + [disp.get(k, "n/a") for k in kinds]
        if "flup" in kinds:
            for k in others:
                r = _ratio(num.get(k), num.get("flup"), higher) if higher is not None else None
                cells.append("%.2fx%s" % (r, note) if r else "")
        lines.append("| " + " | ".join(cells) + " |")
    return lines
