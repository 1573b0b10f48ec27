"""The FastCGI benchmark: flup 1.0.3, flupfast pure Python and flupfast compiled, side by side
in one run, each as its own server subprocess on a Unix socket.

    python -m bench [--quick]          (or: python bench/run.py [--quick])

It installs nothing: it says what is missing and skips what it cannot run. Every server and
every client run has a time limit; a server that does not start or hangs is reported, never
waited on forever, and stopped by its PID. Results: a table on stdout and
bench/results/latest.json and latest.md (git-ignored). bench/README.md explains the numbers.

This module is the command line and the run plan: which parts run, with which settings, in
what order. What is asked is in bench/scenarios/, how servers and fronts are started in
bench/servers/ and bench/fronts/, the load in bench/drivers/, the report in bench/report/.
"""
import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

if str(Path(__file__).resolve().parent.parent) not in sys.path:
    # ``python bench/run.py``: the repository root, so that ``bench`` imports
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.base import BENCH, MIB, log  # noqa: E402  (after the sys.path fix)
from bench.drivers.fcgi_load import LoadClient  # noqa: E402
from bench.fronts import GROUPS  # noqa: E402
from bench.report.files import save_json, write_report  # noqa: E402
from bench.report.markdown import all_targets, render_markdown  # noqa: E402
from bench.scenarios import ajp, behind_fronts, fastcgi, instructions, peers, scgi, seeds  # noqa: E402,E501
from bench.servers import KINDS  # noqa: E402
from bench.survey import survey  # noqa: E402


# All parts, and what --quick runs (under 3 minutes): the fronts and FastCGI's instruction
# counts.
PARTS = ("fronts", "callgrind", "hello", "upload", "download", "syscalls", "scgi", "ajp")
# The parts run only when named (--only peers,seeds): the servers a user would pick
# instead (gunicorn, mod_wsgi, uWSGI's HTTP socket) and the seeds' scenarios.
EXTRA_PARTS = ("peers", "seeds")


QUICK_PARTS = ("fronts", "callgrind")


class Config:
    def __init__(self, quick, args):
        self.quick = quick
        self.conns = args.conns
        self.rounds = args.rounds or (1 if quick else 3)
        self.duration = args.duration or (2.0 if quick else 4.0)
        self.warmup = 0.5 if quick else 1.0
        self.upload_size = args.upload_mib * MIB
        self.download_size = args.download_mib * MIB
        self.flup_download_size = args.flup_download_mib * MIB
        self.transfer_runs = 2 if quick else 6   # the last one is the checked (sha256) run
        self.transfer_timeout = 60.0
        self.flup_full_download_timeout = args.flup_full_timeout
        self.modes = args.modes.split(",")
        # SCGI and AJP rows (bench/scenarios/scgi.py, ajp.py)
        self.proto_levels = args.log_levels.split(",") if args.log_levels else ["INFO"]
        self.proto_duration = args.duration or (1.0 if quick else 3.0)
        # flup's AJP upload costs ~40 ms per body packet (Nagle): measured at these sizes
        # (MiB) and extrapolated to --upload-mib; a run longer than flup_ajp_timeout is cut.
        self.flup_ajp_upload_mib = {8192: 0.5 if quick else 10, 65536: 2 if quick else 20}
        self.flup_apache_upload_mib = 2 if quick else 20
        self.flup_ajp_timeout = 30.0 if quick else 150.0
        self.flup_ajp_syscall_requests = 50 if quick else 200
        # behind real fronts (bench/scenarios/behind_fronts.py)
        self.front_rounds = args.rounds or (1 if quick else 3)
        self.front_duration = args.duration or (1.0 if quick else 2.0)
        self.front_app_duration = 1.0 if quick else 2.0
        self.front_warmup = 0 if quick else 1.0
        self.front_transfer_size = (20 if quick else 100) * MIB
        self.front_transfer_runs = 1 if quick else 3   # the last one is sha256-checked
        self.front_nokeep = not quick   # the "compiled, keep_conn off" column
        self.front_transfer_timeout = 20.0 if quick else 60.0
        # flup's quadratic FastCGI download and Nagle-bound AJP upload, measured smaller
        self.front_flup_slow_size = (2 if quick else 10) * MIB
        # instruction counts (bench/scenarios/instructions.py)
        self.callgrind_n = args.callgrind_n or (300 if quick else 500)
        self.callgrind_protocols = ("fcgi",) if quick else ("fcgi", "scgi", "ajp")
        # the peers part (bench/scenarios/peers.py) and seeds (bench/scenarios/seeds.py)
        self.sweep = args.sweep
        self.peer_filter = set(args.peers.split(",")) if args.peers else None
        self.peer_duration = args.duration or (1.0 if quick else 3.0)
        self.peer_rounds = args.rounds or (1 if quick else 3)
        self.peer_requests = args.requests or (200 if quick else 1000)
        self.seed_requests = args.requests or (200 if quick else 1000)
        self.seed_requests_c100 = args.requests or (2000 if quick else 10000)
        self.seed_upload_mib = args.upload_mib if args.upload_mib != 100 or not quick else 20
        self.seed_upload_timeout = args.seed_upload_timeout or (30.0 if quick else 180.0)

    def as_dict(self):
        return {"quick": self.quick, "conns": self.conns, "rounds": self.rounds,
                "duration": self.duration, "warmup": self.warmup,
                "upload_mib": self.upload_size // MIB, "download_mib": self.download_size // MIB,
                "flup_download_mib": self.flup_download_size // MIB,
                "transfer_runs": self.transfer_runs, "modes": self.modes,
                "proto_levels": self.proto_levels, "proto_duration": self.proto_duration,
                "flup_ajp_upload_mib": self.flup_ajp_upload_mib,
                "flup_apache_upload_mib": self.flup_apache_upload_mib,
                "flup_ajp_timeout": self.flup_ajp_timeout,
                "front_rounds": self.front_rounds, "front_duration": self.front_duration,
                "front_app_duration": self.front_app_duration,
                "front_transfer_runs": self.front_transfer_runs,
                "front_transfer_mib": self.front_transfer_size // MIB,
                "front_flup_slow_mib": self.front_flup_slow_size // MIB,
                "callgrind_n": self.callgrind_n,
                "callgrind_protocols": list(self.callgrind_protocols),
                "sweep": self.sweep, "peer_filter": sorted(self.peer_filter or ()),
                "peer_duration": self.peer_duration,
                "peer_rounds": self.peer_rounds, "peer_requests": self.peer_requests,
                "seed_requests": self.seed_requests,
                "seed_requests_c100": self.seed_requests_c100,
                "seed_upload_mib": self.seed_upload_mib,
                "seed_upload_timeout": self.seed_upload_timeout}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (< 3 minutes)")
    parser.add_argument("--full", action="store_true",
                        help="the whole matrix (the default; see bench/README.md)")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="which servers (default flup,pure,compiled)")
    parser.add_argument("--modes", default="thread,fork", help="hello modes (thread,fork)")
    parser.add_argument("--only", default="",
                        help="which parts to run: fronts (behind nginx/Apache, vs flup and "
                        "uWSGI), callgrind (instructions per request), and the direct ones: "
                        "FastCGI hello,upload,download,syscalls; scgi; ajp (default: all of "
                        "these; --quick: %s); and, only when named, peers (gunicorn, "
                        "mod_wsgi, uWSGI --http-socket: hello, 71 KB echo, c1, the Flask app) "
                        "and seeds (--seeds)" % ",".join(QUICK_PARTS))
    parser.add_argument("--sweep", action="store_true",
                        help="peers/seeds: try every worker/thread setting of each server "
                        "(bench/servers/peers.py) and keep its best (default: the first)")
    parser.add_argument("--peers", default="",
                        help="peers/seeds: only the rows of these servers (keys of "
                        "bench/servers/peers.py, e.g. gunicorn-sync,modwsgi)")
    parser.add_argument("--seeds", default=",".join(seeds.SEEDS),
                        help="seeds: which scenarios (default %s)" % ",".join(seeds.SEEDS))
    parser.add_argument("--apps", default="hello,flask",
                        help="peers: which apps (hello: bench/apps.py with the 71 KB echo "
                        "and c1; flask: bench/flask_app.py)")
    parser.add_argument("--requests", type=int, default=0,
                        help="peers/seeds: requests of the ab runs (c1: default 1000, "
                        "--quick 200; seed 001's c100: 10000, --quick 2000)")
    parser.add_argument("--seed-upload-timeout", type=float, default=0,
                        help="seed 000: an upload's time limit (default 180 s, --quick 30)")
    parser.add_argument("--log-levels", default="",
                        help="direct SCGI/AJP servers' log levels (default INFO, as flup "
                        "runs by default; e.g. INFO,WARNING; the fronts run at WARNING)")
    parser.add_argument("--groups", default="",
                        help="fronts: which of %s" % ",".join(g[0] for g in GROUPS))
    parser.add_argument("--callgrind-n", type=int, default=0,
                        help="callgrind: N (and 2N) requests per count (default 300 in "
                        "--quick, 500)")
    parser.add_argument("--chart", default="",
                        help="also write the chart here (the full run: bench/chart.png)")
    parser.add_argument("--conns", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=0)
    parser.add_argument("--duration", type=float, default=0)
    parser.add_argument("--upload-mib", type=int, default=100)
    parser.add_argument("--download-mib", type=int, default=100)
    parser.add_argument("--flup-download-mib", type=int, default=20,
                        help="flup's download is quadratic: measured at this size")
    parser.add_argument("--flup-full-timeout", type=float, default=30.0,
                        help="full mode also tries flup at the full download size, this long")
    parser.add_argument("--output", default=str(BENCH / "results"))
    parser.add_argument("--render", metavar="JSON",
                        help="only print the Markdown report of an earlier run's JSON")
    args = parser.parse_args(argv)
    if args.render:
        with open(args.render) as f:
            results = json.load(f)
        results["targets"] = all_targets(results)
        print(render_markdown(results))
        return 0
    if args.quick and args.full:
        parser.error("--quick or --full, not both")
    cfg = Config(args.quick, args)
    only = set(args.only.split(",")) if args.only else set(QUICK_PARTS if args.quick
                                                            else PARTS)
    unknown = only - set(PARTS) - set(EXTRA_PARTS)
    if unknown:
        parser.error("unknown parts: %s" % ",".join(sorted(unknown)))
    wanted_seeds = [x for x in args.seeds.split(",") if x]
    if set(wanted_seeds) - set(seeds.SEEDS):
        parser.error("unknown seeds: %s" % ",".join(sorted(set(wanted_seeds) -
                                                           set(seeds.SEEDS))))
    started = time.time()

    info = survey()
    for item in info["missing"]:
        log("missing: " + item)
    for note in info["notes"]:
        log("note: " + note)
    if not info["cc"] or not info["flupfast"]:
        log("cannot run the benchmark without a C compiler and an importable flupfast")
        return 2
    kinds = [k for k in args.kinds.split(",") if k in KINDS]
    notes = []
    absent = {}   # kind -> why it is not run, shown in the fronts' cells
    if "flup" in kinds and not info["flup"]:
        kinds.remove("flup")
        absent["flup"] = "flup 1.0.3 is not installed"
        notes.append("flup is not installed: no comparison (pip install flup==1.0.3)")
    if "compiled" in kinds and not info["compiled"]:
        kinds.remove("compiled")
        absent["compiled"] = "the compiled backend is not built"
        notes.append("compiled backend skipped: flupfast._speedups is not built "
                     "(pip install -e . --no-build-isolation)")
    results = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "survey": info,
               "config": cfg.as_dict(), "kinds": kinds, "modes": cfg.modes, "notes": notes}

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)

    def save(final=False):
        # after every part, so an interrupted run keeps what it measured
        results["elapsed_seconds"] = round(time.time() - started, 1)
        results["complete"] = final
        save_json(out, results)

    workdir = tempfile.mkdtemp(prefix="flupfast-bench-")
    try:
        client = LoadClient(workdir)
        if "fronts" in only:
            log("behind real fronts (nginx, Apache), vs flup and uWSGI")
            behind_fronts.run_fronts(info, kinds, absent, client, workdir, cfg, results,
                                     args.groups.split(",") if args.groups else None)
            save()
        if "callgrind" in only:
            instructions.run_callgrind(kinds, cfg.callgrind_protocols, cfg.callgrind_n, client,
                                       workdir, results)
            save()
        fastcgi.run_fastcgi(only, kinds, client, workdir, cfg, results, info["strace"])
        save()
        if "scgi" in only or "ajp" in only:
            strace = "syscalls" in only and bool(info["strace"])
            if "scgi" in only:
                scgi.run_scgi(kinds, client, workdir, cfg, results, strace)
            if "ajp" in only:
                ajp.run_ajp(kinds, client, workdir, cfg, results, strace)
            save()
        if "peers" in only:
            log("peers: what a user would pick instead%s" % (
                ", swept" if cfg.sweep else ""))
            peers.run_peers(info, workdir, client, cfg, results,
                            [a for a in args.apps.split(",") if a])
            save()
        if "seeds" in only:
            seeds.run_seeds(wanted_seeds, info, workdir, client, cfg, results)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    with contextlib.suppress(OSError), open("/proc/loadavg") as f:
        results["survey"]["machine"]["loadavg_at_end"] = " ".join(f.read().split()[:3])
    results["targets"] = all_targets(results)
    save(final=True)
    charts = [out / "chart.png"] + ([Path(args.chart)] if args.chart else [])
    md, made = write_report(out, results, charts)
    print(md)
    log("wrote %s" % ", ".join(str(p) for p in [out / "latest.json", out / "latest.md"] +
                               (charts if made is True else [])))
    if made is not True:
        log("no chart: %s" % made)
    log("done in %.0f s" % results["elapsed_seconds"])
    return 0

if __name__ == "__main__":
    sys.exit(main())
