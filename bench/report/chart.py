"""The benchmark's chart (PNG, matplotlib): hello requests/s behind the real fronts per
server, and instructions per request (callgrind) per protocol. ``draw`` returns True, or why
there is no chart (matplotlib missing, nothing measured)."""
from bench.fronts import GROUP_LABEL
from bench.scenarios.instructions import PROTO_LABEL, PROTOCOLS
from bench.servers import VARIANT_LABEL


COLORS = {"flup": "#9e9e9e", "uwsgi": "#e69f00", "pure": "#56b4e9", "compiled": "#0072b2",
          "compiled_nokeep": "#7fb8d9"}


def _front_series(results):
    groups = (results.get("fronts") or {}).get("groups") or {}
    keys = [k for k in GROUP_LABEL if k in groups]
    variants = [v for v in VARIANT_LABEL if any(v in groups[k]["servers"] for k in keys)]
    series = {}
    for v in variants:
        # None: the variant has no place in that group (no bar, no mark); 0: not run or failed
        series[v] = [None if v not in groups[k]["servers"] else
                     ((groups[k]["servers"][v].get("hello") or {}).get("rps") or 0)
                     for k in keys]
    return keys, series


def _bars(ax, labels, series, ylabel, title):
    """Grouped bars: one group per label, one bar per series {name: (values, color)}; a
    missing value (0) is marked n/a."""
    width = 0.8 / max(1, len(series))
    for i, (name, (vals, color)) in enumerate(series.items()):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(labels))]
        ax.bar(xs, [v or 0 for v in vals], width, label=name, color=color)
        for x, val in zip(xs, vals):
            if val == 0:
                ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels([label.replace(", ", "\n") for label in labels], fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
    ax.grid(axis="y", alpha=0.3)


def draw(results, paths):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:  # any failure: no chart, said so
        return "matplotlib is not importable (%s: pip install -e '.[bench]')" % exc
    keys, series = _front_series(results)
    cg = results.get("callgrind") or {}
    protos = [p for p in PROTOCOLS if p in cg]
    if not any(any(v or 0 for v in vals) for vals in series.values()) and not protos:
        return "nothing to draw"
    panels = int(bool(keys)) + int(bool(protos))
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 5.0), squeeze=False)
    axes = list(axes[0])
    m = results["survey"]["machine"]
    if keys:
        _bars(axes.pop(0), [GROUP_LABEL[k] for k in keys],
              {VARIANT_LABEL[v]: (vals, COLORS.get(v)) for v, vals in series.items()},
              "hello requests/s (higher is better)",
              "Behind nginx 1.22 / Apache 2.4, 16 connections")
    if protos:
        kinds = [k for k in ("flup", "pure", "compiled")
                 if any("per_request" in cg[p].get(k, {}) for p in protos)]
        _bars(axes.pop(0), [PROTO_LABEL[p] for p in protos],
              {VARIANT_LABEL[k]: ([cg[p].get(k, {}).get("per_request", 0) / 1000
                                   for p in protos], COLORS[k]) for k in kinds},
              "thousand instructions per request (lower is better)",
              "callgrind, hello, start-up subtracted")
    fig.suptitle("flupfast vs flup 1.0.3 and uWSGI (%s run %s; %d CPUs, load %s)" % (
        "quick" if results["config"]["quick"] else "full", results["started"][:16],
        m["nproc"], m["loadavg_at_start"]), fontsize=9)
    fig.tight_layout()
    for path in paths:
        fig.savefig(str(path), dpi=110)
    plt.close(fig)
    return True
