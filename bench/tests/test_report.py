"""bench/'s report code (tables, ratios, targets, JSON, parsers) on made-up results: no server,
no load, no timing (the benchmark itself is ``python -m bench``, never part of the tests)."""
import json

import pytest

from bench import fronts, run
from bench.drivers import callgrind, wrk
from bench.report import fronts as fronts_report
from bench.report import instructions

WRK_REPORT = """\
Running 1s test @ http://127.0.0.1:8080/
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     3.21ms    1.02ms  20.11ms   90.00%
  Latency Distribution
     50%    3.00ms
     90%    4.00ms
     99%  850.00us
  5000 requests in 1.00s, 800.00KB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 1000
Requests/sec:   4990.00
Transfer/sec:    800.00KB
"""


def test_parse_wrk_counts_only_successful_answers():
    res = wrk.parse_wrk(WRK_REPORT)
    assert res["requests"] == 5000
    assert res["p99_ms"] == 0.85
    assert res["errors"] == 3
    assert res["non_2xx"] == 1000
    assert res["rps_all"] == 4990.0
    assert res["rps"] == pytest.approx(4990.0 * 4000 / 5000)


def test_parse_wrk_without_rate():
    assert wrk.parse_wrk("unable to connect to 127.0.0.1:1 Connection refused") is None


def test_callgrind_difference_removes_startup():
    one = {"instructions": 1_000_000 + 100 * 2_000, "requests": 100}
    two = {"instructions": 1_000_000 + 200 * 2_000, "requests": 200}
    r = callgrind.per_request(one, two)
    assert r["per_request"] == 2_000
    assert r["startup_and_shutdown"] == 1_000_000
    assert callgrind.per_request({"error": "boom"}, two) == {"error": "boom"}


def _transfer(seconds, size=100, peak=1.0):
    return {"size_mib": size, "seconds": seconds, "best_seconds": seconds, "checked": True,
            "runs": [{"check": "ok", "seconds": seconds}],
            "memory": {"idle_mib": 30.0, "peak_mib": 30.0 + peak,
                       "peak_above_idle_mib": peak, "processes": 1}}


def _server(rps, up=0.5, down=0.2, size=100):
    return {"hello": {"rps": rps, "p99_ms": 2.0, "errors": 0, "non_2xx": 0},
            "sleep": {"rps": 300.0, "concurrency": 15.0}, "cpu": {"rps": 400.0},
            "memory_load": {"idle_mib": 30.0, "peak_mib": 31.0, "peak_above_idle_mib": 1.0,
                            "processes": 1},
            "upload": _transfer(up, size), "download": _transfer(down, size)}


def _results():
    groups = {
        "fcgi-thread": {"label": fronts.GROUP_LABEL["fcgi-thread"], "protocol": "fcgi",
                        "mode": "thread", "front": "nginx", "servers": {
                            "flup": _server(1000.0, down=4.0, size=20),
                            "uwsgi": _server(4000.0, up=0.6),
                            "pure": _server(2000.0),
                            "compiled": _server(5000.0, up=0.4),
                            "compiled_nokeep": {"hello": {"rps": 3000.0}, "died":
                                                "died mid-run (exit status -9): killed"}}},
        "ajp-thread": {"label": fronts.GROUP_LABEL["ajp-thread"], "protocol": "ajp",
                       "mode": "thread", "front": "apache", "servers": {
                           "flup": {"not_run": "flup 1.0.3 is not installed"},
                           "uwsgi": {"not_run": "uWSGI has no AJP13"},
                           "pure": _server(2000.0), "compiled": _server(3000.0)}},
    }
    return {"config": {"front_transfer_mib": 100, "quick": True},
            "fronts": {"groups": groups,
                       "front_cost": {"nginx": {"upload": {"seconds": 0.25},
                                                "download": {"seconds": 0.1}}}},
            "callgrind": {"n": 100, "fcgi": {
                "flup": {"per_request": 300_000}, "pure": {"per_request": 200_000},
                "compiled": {"error": "server did not start under valgrind: x"}}}}


def test_fronts_table_ratios_and_reasons():
    lines = fronts_report.render_section(_results())
    text = "\n".join(lines)
    hello = next(line for line in lines if line.startswith("| hello req/s") and "1000" in line)
    cells = [c.strip() for c in hello.strip("|").split("|")]
    # flup, uWSGI, pure, compiled, compiled keep off, then compiled/flup, compiled/uWSGI,
    # pure/flup, pure/uWSGI
    assert cells[1:5] == ["1000", "4000", "2000", "5000"]
    assert cells[5].startswith("3000 (died mid-run")
    assert cells[6:10] == ["5.00x", "1.25x", "2.00x", "0.50x"]
    # a smaller flup transfer is shown with its size and gets no ratio
    down = next(line for line in lines if line.startswith("| 100 MiB download") and
                "at 20 MiB" in line)
    assert "| 4 s at 20 MiB |" in down and down.count("x |") == 2
    assert "not run: uWSGI has no AJP13" in text
    assert "not run: flup 1.0.3 is not installed" in text


def test_fronts_targets():
    targets = {t["target"]: t for t in fronts_report.evaluate_targets(_results())}
    kept = "FastCGI, thread mode, nginx: flupfast compiled hello >= 1.3x uWSGI req/s"
    assert not targets[kept]["met"] and targets[kept]["value"].startswith("1.25x")
    new_conn = ("FastCGI, thread mode, nginx: flupfast compiled, keep_conn off hello >= 1x "
                "uWSGI req/s")
    assert targets[new_conn]["value"] == "not measured"
    fork = targets["FastCGI, fork mode, nginx: flupfast compiled hello >= 1.2x uWSGI req/s"]
    assert not fork["met"] and fork["value"] == "not measured"
    up = [t for name, t in targets.items() if name.startswith("FastCGI, thread mode, nginx: "
                                                              "100 MiB upload")][0]
    assert up["met"]   # 0.4 s <= uWSGI's 0.6 s and <= 2 x 0.25 s
    pure = [t for name, t in targets.items() if name.startswith("flupfast pure")][0]
    assert pure["met"], pure


def test_fronts_tail_targets():
    results = _results()
    servers = results["fronts"]["groups"]["fcgi-thread"]["servers"]
    servers["uwsgi"]["echo"] = {"rps": 900.0, "p99_ms": 20.0}
    servers["compiled"]["hello"]["p99_ms"] = 4.5
    servers["compiled"]["echo"] = {"rps": 1000.0, "p99_ms": 39.0}
    targets = {t["target"]: t for t in fronts_report.evaluate_targets(results)}
    hello = targets["FastCGI, thread mode, nginx: flupfast compiled p99 (hello) within 2x "
                    "uWSGI's"]
    assert not hello["met"] and hello["value"] == "2.25x (4.50 vs 2.00 ms)"
    echo = targets["FastCGI, thread mode, nginx: flupfast compiled p99 (71 KB echo, 100 "
                   "clients) within 2x uWSGI's"]
    assert echo["met"] and echo["value"] == "1.95x (39.00 vs 20.00 ms)"
    # the keep_conn off column died mid-run: no figure
    new_conn = targets["FastCGI, thread mode, nginx: flupfast compiled, keep_conn off p99 "
                       "(hello) within 1.5x uWSGI's"]
    assert not new_conn["met"] and new_conn["value"] == "not measured"
    lines = fronts_report.render_section(results)
    assert any(line.startswith("| 71 KB echo, 100 clients: req/s") and "1.11x" in line
               for line in lines)


def test_a_groups_p99_is_the_median_of_its_rounds():
    from bench.scenarios.behind_fronts import _median
    runs = [{"rps": 10.0, "p99_ms": 3.0}, {"rps": 30.0, "p99_ms": 2.0},
            {"rps": 20.0, "p99_ms": 90.0}]
    best = _median(runs, "rps")
    assert best["rps"] == 20.0 and best["p99_ms"] == 3.0
    assert best["rps_rounds"] == [10.0, 30.0, 20.0] and best["p99_ms_rounds"] == [3.0, 2.0, 90.0]


def test_callgrind_table():
    lines = instructions.render_section(_results(), ["flup", "pure", "compiled"])
    row = next(line for line in lines if line.startswith("| FastCGI"))
    assert "| 300,000 | 200,000 | server did not start under valgrind: x | 1.50x fewer |" \
        in row


def test_markdown_and_json_of_a_whole_run(tmp_path):
    results = _results()
    results.update({
        "started": "2026-01-01 00:00:00", "elapsed_seconds": 1.0, "kinds": ["flup", "pure",
                                                                           "compiled"],
        "modes": ["thread"], "notes": [],
        "survey": {"missing": ["valgrind (apt-get install valgrind): no instruction counts"],
                   "notes": [], "flup": "1.0.3", "flupfast": "0.1", "compiled": True,
                   "uwsgi": "2.0.31", "machine": {"nproc": 2, "cpu": "x", "kernel": "6",
                                                  "python": "3.11",
                                                  "loadavg_at_start": "1.0 1.0 1.0"}}})
    results["config"].update(run.Config(True, _Args()).as_dict())
    results["targets"] = run.all_targets(results)
    md = run.render_markdown(results)
    assert "## Behind real fronts" in md and "## Instructions per request" in md
    assert "valgrind (apt-get install valgrind)" in md
    path = tmp_path / "latest.json"
    path.write_text(json.dumps(results, default=str))
    assert run.main(["--render", str(path)]) == 0


class _Args:
    conns, rounds, duration, upload_mib, download_mib = 16, 0, 0, 100, 100
    flup_download_mib, flup_full_timeout, modes, log_levels, callgrind_n = 20, 30, "thread", \
        "", 0
    sweep, peers, requests, seed_upload_timeout = False, "", 0, 0
