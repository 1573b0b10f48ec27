"""The peers and seeds parts without a server: the peers' command lines and the fronts' configs, ab's
report parsed, the Adj Mean, the sweep's choice of the best setting, and the peers' and seeds'
report on made-up results (the measurement itself is ``python -m bench --only peers,seeds``)."""
import os

import pytest

from bench import run
from bench.drivers import ab, apptime, wrk
from bench.fronts.apache import apache_config
from bench.fronts.nginx import server_block
from bench.report import peers as report
from bench.scenarios import cells, seeds
from bench.servers import apache_hosted, peers
from bench.servers.gunicorn import gunicorn_command
from bench.servers.uwsgi import uwsgi_command
from bench.servers.wwwdata import WWWTree

TREE = WWWTree("/v/bin/python", "/w/src", "/v")


# -- command lines and configs ---------------------------------------------------------------

def test_gunicorn_command_threads_only_for_gthread():
    sync = gunicorn_command("m:app", "unix:/s", "sync", 5, 8)
    assert sync[sync.index("--workers") + 1] == "5" and "--threads" not in sync
    assert "--no-control-socket" in sync and sync[-1] == "m:app"
    gthread = gunicorn_command("m:app", "127.0.0.1:9", "gthread", 2, 8)
    assert gthread[gthread.index("--threads") + 1] == "8"
    assert gthread[gthread.index("--worker-class") + 1] == "gthread"


def test_uwsgi_http_socket_command():
    cmd = uwsgi_command("/bin/uwsgi", "m:app", "--http-socket", "/s", 8)
    assert cmd[cmd.index("--http-socket") + 1] == "/s"
    assert cmd[cmd.index("--processes") + 1] == "8" and "--threads" not in cmd
    assert uwsgi_command("/bin/uwsgi", "m:app", "--http-socket", "/s", 2, 8)[-2:] == \
        ["--threads", "8"]


@pytest.mark.parametrize("keep", [False, True])
def test_nginx_proxy_pass_pool(keep):
    text = server_block(3, "http", "/tmp/g.sock", 8080, keep, 60, pool=32)
    assert "server unix:/tmp/g.sock;" in text and "proxy_pass http://b3;" in text
    assert ("keepalive 32;" in text) is keep
    assert ("proxy_http_version 1.1;" in text) is keep
    assert ('proxy_set_header Connection "";' in text) is keep


def test_nginx_fastcgi_keep_conn_follows_pool():
    assert "fastcgi_keep_conn off;" in server_block(0, "fcgi", "/s", 1, False, 60)
    on = server_block(0, "fcgi", "/s", 1, True, 60)
    assert "fastcgi_keep_conn on;" in on and "keepalive 16;" in on


def test_apache_config_proxies_and_raw_hosts():
    raw = ("raw", (["wsgi", "alias"], "Listen 127.0.0.1:{port}\n# raw host\n"))
    conf = apache_config("/r", {"f": ("fcgi", 9001), "h": ("http", 9002), "a": 9003,
                                "w": raw, "w2": raw}, 60, threads=128,
                         ports={"f": 1, "h": 2, "a": 3, "w": 4, "w2": 5})
    assert '"fcgi://127.0.0.1:9001/" enablereuse=on' in conf
    assert '"http://127.0.0.1:9002/" disablereuse=Off' in conf
    assert '"ajp://127.0.0.1:9003/"' in conf   # a bare port is AJP13, as before
    assert "Listen 127.0.0.1:4\n# raw host" in conf and "Listen 127.0.0.1:5" in conf
    for module in ("proxy_fcgi", "proxy_http", "proxy_ajp", "wsgi", "alias"):
        assert conf.count("LoadModule %s_module " % module) == 1
    assert "ThreadsPerChild 128" in conf and "MaxRequestWorkers 128" in conf
    assert "ThreadLimit 128" in conf
    small = apache_config("/r", {}, 60, ports={})
    assert "ThreadsPerChild 32" in small and "ThreadLimit 64" in small


def test_modwsgi_daemon_host():
    text = apache_hosted.modwsgi_vhost(8080, "/r/run", "/w/app.wsgi", TREE, 4, 2)
    assert "WSGIDaemonProcess bench processes=4 threads=2 python-path=/w/src " \
        "python-home=/v " in text
    assert "WSGIProcessGroup bench" in text and 'WSGIScriptAlias / "/w/app.wsgi"' in text
    assert '<Directory "/w">' in text and "%{GROUP}" in text and "%{GLOBAL}" in text
    no_venv = apache_hosted.modwsgi_vhost(1, "/r", "/w/a.wsgi", WWWTree("/p", "/s", None), 1, 1)
    assert "python-home" not in no_venv
    assert apache_hosted.modwsgi_script("bench.flask_app:app") .splitlines()[-1] == \
        "from bench.flask_app import app as application  # noqa: F401"
    daemon = peers.make_server(peers.PEERS["modwsgi"], {"processes": 2, "threads": 8},
                               "bench.apps:app", "/w", tcp=True)
    assert "processes=2 threads=8" in daemon.vhost("/r", "/w/a.wsgi", TREE)


@pytest.mark.parametrize("kind", ["cgi", "fcgid"])
def test_cgi_and_fcgid_scripts(kind):
    script = apache_hosted.cgi_script(kind, "bench.apps:app", TREE)
    assert script.startswith("#!/v/bin/python\n") and "sys.path.insert(0, '/w/src')" in script
    server = {"cgi": "flupfast.server.cgi", "fcgid": "flupfast.server.fcgi"}[kind]
    assert "from %s import WSGIServer" % server in script
    modules, text = apache_hosted.cgi_vhost(kind, 8080, "/r/run", "/w", processes=3)
    if kind == "cgi":
        assert "cgid" in modules and 'ScriptAlias /cgi/ "/w/"' in text
    else:
        assert "fcgid" in modules and "mime" in modules
        assert "AddHandler fcgid-script .fcgi" in text and "TypesConfig" in text
        assert "FcgidMaxProcessesPerClass 3" in text


def test_make_server_settings_become_options():
    srv = peers.make_server(peers.PEERS["flupfast-fcgi-fork"], {"max_children": 8},
                            "bench.apps:app", "/tmp", tcp=False)
    cmd = srv.command()
    assert cmd[cmd.index("--max-children") + 1] == "8" and "--mode" in cmd
    # flup's servers keep flup's defaults whatever the settings say
    flup = peers.make_server(peers.PEERS["flup-fcgi-fork"], {"max_children": 8},
                             "bench.apps:app", "/tmp", tcp=False)
    assert "--max-children" not in flup.command()
    ajp = peers.make_server(peers.PEERS["flupfast-ajp-thread"], {}, "bench.apps:app", "/tmp",
                            tcp=False)
    assert ajp.port and "--ajp-packet-size" in ajp.command()   # AJP13 is TCP only
    guni = peers.make_server(peers.PEERS["gunicorn-gthread"], peers.PEERS[
        "gunicorn-gthread"].candidates[0], "bench.apps:app", "/tmp", tcp=True)
    assert guni.command()[guni.command().index("--bind") + 1] == "127.0.0.1:%d" % guni.port
    assert "--protocol" not in guni.command() and guni.protocol == "http"
    # gunicorn behind nginx uwsgi_pass: its uwsgi protocol, and the hello check speaks it too
    over = peers.make_server(peers.PEERS["gunicorn-uwsgi"], {"workers": 2}, "bench.apps:app",
                             "/tmp", tcp=False)
    cmd = over.command()
    assert cmd[cmd.index("--protocol") + 1] == "uwsgi" and over.protocol == "uwsgi"
    assert cmd[cmd.index("--bind") + 1] == "unix:" + over.sock_path


def test_every_peer_has_settings_and_a_server():
    for peer in peers.PEERS.values():
        assert peer.candidates
        for settings in peer.candidates:
            assert peers.make_server(peer, settings, "bench.apps:app", "/tmp", tcp=True,
                                     uwsgi_binary="/bin/uwsgi") is not None
    assert peers.settings_text({}) == "defaults"
    assert peers.settings_text({"worker_class": "sync", "workers": 4}) == "workers=4"


def test_wrk_post_script(tmp_path):
    script = wrk.post_script(str(tmp_path), "echo", b"x" * 71453)
    text = open(script).read()
    assert 'wrk.method = "POST"' in text and str(tmp_path / "echo.body") in text
    assert (tmp_path / "echo.body").stat().st_size == 71453


# -- ab's report, the Adj Mean ---------------------------------------------------------------

AB_C100 = """\
Server Software:        nginx/1.22.1
Document Path:          /echo
Concurrency Level:      100
Time taken for tests:   2.309 seconds
Complete requests:      10000
Failed requests:        7
Non-2xx responses:      2
Requests per second:    4332.02 [#/sec] (mean)
Time per request:       23.084 [ms] (mean)
Time per request:       0.231 [ms] (mean, across all concurrent requests)
Transfer rate:          1000.00 [Kbytes/sec] received
"""


def test_parse_ab_requests():
    res = ab.parse_ab_requests(AB_C100)
    assert res["rps"] == 4332.02 and res["requests"] == 10000 and res["seconds"] == 2.309
    assert res["mean_ms"] == 0.231   # across all concurrent requests (at -c1: the same)
    assert res["failed"] == 7 and res["non_2xx"] == 2
    assert ab.parse_ab_requests("apr_socket_connect(): Connection refused (111)") is None


def test_ab_with_a_time_limit_stops_and_a_short_run_is_an_error(monkeypatch):
    """-t before -n (after it, -t would mean 50,000 requests); a run that completed fewer
    requests than asked hit the limit: an error, with its figures kept."""
    seen = []

    class Done:
        returncode = 0
        stdout = AB_C100.encode()
        stderr = b""

    def fake_run(cmd, capture_output, timeout):
        seen.append(cmd)
        return Done()
    monkeypatch.setattr(ab.subprocess, "run", fake_run)
    assert ab.run_ab_requests("http://x/", 10000, 100, time_limit=90).get("error") is None
    assert seen[0][seen[0].index("-t"):seen[0].index("-t") + 4] == ["-t", "90", "-n", "10000"]
    cut = ab.run_ab_requests("http://x/", 20000, 100, time_limit=90)
    assert cut["error"] == "ab reached its 90 s limit after 10000 of 20000 requests"
    assert cut["rps"] == 4332.02
    ab.run_ab_requests("http://x/", 10000, 100)
    assert "-t" not in seen[2]  # no limit asked: none given


def test_adj_mean_is_mean_minus_the_apps_own_time():
    # the seed's own row: mod_proxy->Apache/mod_wsgi 10.748 ms, baseline 1.121 ms
    assert apptime.adj_mean(10.748, 1.121) == pytest.approx(9.627)
    assert apptime.adj_mean(0.5, 0.7) == 0.0
    assert apptime.adj_mean(None, 1.0) is None and apptime.adj_mean(1.0, None) is None


def test_app_mean_ms_calls_the_app_as_a_server_would():
    calls = []

    class Body(list):
        def close(self):
            calls.append("close")

    def app(environ, start_response):
        calls.append(environ["PATH_INFO"])
        start_response("200 OK", [])
        return Body([b"x"])

    assert apptime.app_mean_ms(app, "/p", 5) >= 0
    assert calls.count("/p") == 6 and calls.count("close") == 6   # + one warm-up call


# -- the sweep's choice ------------------------------------------------------------------------

def _t(settings, **result):
    return {"settings": settings, "result": result}


def test_best_setting_highest_clean_rate():
    tried = [_t({"w": 1}, rps=100), _t({"w": 2}, rps=300, errors=4), _t({"w": 4}, rps=200),
             _t({"w": 8}, error="did not start")]
    assert cells.best_setting(tried)["settings"] == {"w": 4}
    # nothing clean: the best figure anyway
    assert cells.best_setting(tried[1:2])["settings"] == {"w": 2}
    assert cells.best_setting([_t({}, error="x")]) is None


def test_best_setting_ties_go_to_the_first_and_times_go_low():
    assert cells.best_setting([_t({"w": 1}, rps=5), _t({"w": 2}, rps=5)])["settings"] == \
        {"w": 1}
    times = [_t({"w": 1}, mean_ms=3.0), _t({"w": 2}, mean_ms=1.0), _t({"w": 3}, mean_ms=2.0)]
    assert cells.best_setting(times, "mean_ms", lower_is_better=True)["settings"] == {"w": 2}


class FakeCell:
    """A cell with no server or front: its port is its settings' "p"; it never fails."""

    def __init__(self, front, peer, settings, *args):
        self.port, self.error = settings["p"], None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def died(self):
        return None


def test_a_setting_failing_its_deciding_load_skips_the_others(monkeypatch):
    """Once a setting's first load was clean, a later setting whose first load fails cannot
    win: its other loads are not run (a pinned fork pool answers each c1 request after 5 s)."""
    monkeypatch.setattr(cells, "Cell", FakeCell)
    ran = []

    def hello(port):
        ran.append(("hello", port))
        return {"rps": 100.0 * port, "non_2xx": 5 if port == 2 else 0}

    def c1(port):
        ran.append(("c1", port))
        return {"rps": 10.0}
    out = cells.sweep("apache", None, "app", "/tmp", None, {"hello": hello, "c1": c1},
                      [{"p": 1}, {"p": 2}, {"p": 3}], rounds=1)
    assert ran == [("hello", 1), ("c1", 1), ("hello", 2), ("hello", 3), ("c1", 3)]
    assert out["best"] == {"p": 3} and out["loads"]["c1"]["rps"] == 10.0


def test_a_failed_round_ends_that_loads_rounds(monkeypatch):
    monkeypatch.setattr(cells, "Cell", FakeCell)
    ran = []

    def c1(port):
        ran.append(port)
        return {"rps": 1.0, "error": "ab reached its 90 s limit"}
    out = cells.sweep("apache", None, "app", "/tmp", None, {"c1": c1}, [{"p": 1}], rounds=3)
    assert ran == [1] and out["loads"]["c1"]["error"].startswith("ab reached")


def test_median_run():
    runs = [{"rps": 3}, {"rps": 1}, {"rps": 2}]
    assert cells.median_run(runs) == {"rps": 2, "rounds": [3, 1, 2]}
    assert cells.median_run([{"error": "x"}]) == {"error": "x"}


# -- the report ----------------------------------------------------------------------------

def _row(front, peer, settings="", **loads):
    return {"front": front, "front_label": cells.FRONT_LABEL[front], "peer": peer,
            "label": peers.PEERS[peer].label, "settings_text": settings,
            "loads": {k: v for k, v in loads.items()}}


ROWS = [
    _row("nginx", "flupfast-fcgi-fork", "defaults", hello={"rps": 20000.0},
         echo71k={"rps": 8700.0}),
    _row("nginx", "flupfast-fcgi-thread", "defaults", hello={"rps": 15000.0}),
    _row("nginx", "gunicorn-sync", "workers=8", hello={"rps": 8000.0}, echo71k={"rps": 5800.0}),
    _row("nginx-keepalive", "gunicorn-gthread", "workers=2 threads=8",
         hello={"rps": 10000.0}, echo71k={"rps": 5000.0}),
    _row("nginx", "uwsgi-http", "processes=8", hello={"rps": 32000.0}),
    _row("apache", "flupfast-fcgi-fork", "defaults", c1={"mean_ms": 0.19}),
    _row("apache", "modwsgi", "processes=2 threads=8", c1={"mean_ms": 0.25},
         hello={"rps": 1.0, "errors": 3}),
    _row("apache", "flup-fcgi-fork", "defaults", c1={"mean_ms": 0.30}),
    {"front": "apache", "front_label": "Apache", "peer": "gunicorn-sync",
     "label": "gunicorn sync", "not_run": "gunicorn is not installed"},
]


def test_pick_instead_compares_bests_behind_the_same_front():
    picks = {(p["behind"], p["load"], p["peer"]): p for p in report.pick_instead(ROWS)}
    hello = picks["nginx", "hello", "gunicorn"]
    assert hello["ratio"] == pytest.approx(2.0)    # 20,000 vs gthread's 10,000 (the best)
    assert "[workers=2 threads=8]" in hello["other"] and "nginx, upstream keepalive" in \
        hello["other"]
    assert picks["nginx", "echo71k", "gunicorn"]["ratio"] == pytest.approx(8700 / 5800)
    assert picks["nginx", "hello", "uWSGI --http-socket"]["ratio"] == pytest.approx(0.625)
    # times: the peer's over ours, > 1 when flupfast adds less
    assert picks["Apache", "c1", "mod_wsgi daemon"]["ratio"] == pytest.approx(0.25 / 0.19)
    assert picks["Apache", "c1", "flup 1.0.3"]["ratio"] == pytest.approx(0.30 / 0.19)
    assert picks["Apache", "c1", "gunicorn"]["ratio"] is None
    assert picks["Apache", "hello", "mod_wsgi daemon"]["flupfast"] == "n/a"


def test_pick_instead_compares_each_protocol_with_uwsgi_on_it():
    """Behind nginx, flupfast's best on a protocol (any mode) against uWSGI's socket of that
    protocol: FastCGI, SCGI and uwsgi each."""
    rows = [_row("nginx", "flupfast-fcgi-fork", hello={"rps": 30000.0}),
            _row("nginx", "flupfast-fcgi-thread", hello={"rps": 33000.0}),
            _row("nginx", "flupfast-scgi-fork", hello={"rps": 20000.0}),
            _row("nginx", "flupfast-uwsgi-fork", hello={"rps": 36000.0}),
            _row("nginx", "uwsgi-fcgi", "processes=4", hello={"rps": 30000.0}),
            _row("nginx", "uwsgi-scgi", "processes=2", hello={"rps": 25000.0}),
            _row("nginx", "uwsgi-uwsgi", "processes=4", hello={"rps": 40000.0})]
    picks = {(p["behind"], p["peer"]): p["ratio"] for p in report.pick_instead(rows)}
    assert picks["nginx fastcgi_pass", "uWSGI --fastcgi-socket"] == pytest.approx(1.1)
    assert picks["nginx scgi_pass", "uWSGI --scgi-socket"] == pytest.approx(0.8)
    assert picks["nginx uwsgi_pass", "uWSGI --uwsgi-socket"] == pytest.approx(0.9)


def test_the_winners_are_run_again_interleaved_and_reported(monkeypatch):
    """With --sweep, each PICKS line's two winners run again at their settings, every cell up
    at once and rounds alternating; the report gives that ratio beside the sweep's."""
    from bench.scenarios import peers as scenario
    rows = [dict(r, best={"workers": 8} if r["peer"] == "gunicorn-sync" else {})
            for r in ROWS]
    winners = scenario.winners_to_confirm(rows, "hello")
    assert [(r["front"], r["peer"]) for r in winners] == [
        ("nginx", "flupfast-fcgi-fork"), ("nginx-keepalive", "gunicorn-gthread"),
        ("nginx", "uwsgi-http")]   # Apache's hello line has no figure of flupfast's
    asked = []

    def fake_interleaved(cells_, app, workdir, client, load, name, rounds, uwsgi_binary):
        asked.append((name, [(front, peer.key, peer.candidates) for front, peer in cells_],
                      rounds))
        figures = {"flupfast-fcgi-fork": 30000.0, "gunicorn-gthread": 10000.0,
                   "uwsgi-http": 25000.0, "gunicorn-sync": 6000.0}
        return [{"loads": {name: {"rps": figures[peer.key]}}} for _, peer in cells_]

    monkeypatch.setattr(scenario, "interleaved", fake_interleaved)
    confirmed = scenario.confirm_picks(rows, "app", {"hello": None, "echo71k": None,
                                                     "c1": None}, {}, "/w", None)
    assert [a[0] for a in asked] == ["hello", "echo71k"] and asked[0][2] == 5
    assert ("nginx", "gunicorn-sync", [{"workers": 8}]) in asked[1][1]
    picks = {(p["behind"], p["load"], p["peer"]): p
             for p in report.pick_instead(rows, confirmed)}
    assert picks["nginx", "hello", "uWSGI --http-socket"]["ratio"] == pytest.approx(0.625)
    assert picks["nginx", "hello", "uWSGI --http-socket"]["interleaved"] == \
        pytest.approx(1.2)
    assert picks["nginx", "echo71k", "gunicorn"]["interleaved"] == pytest.approx(30000 / 6000)
    assert picks["Apache", "c1", "mod_wsgi daemon"]["interleaved"] is None
    lines = report.render_pick(rows, confirmed)
    assert lines[0].endswith("| the two again, rounds interleaved |")
    assert any("| 0.62x | 1.20x |" in line for line in lines)
    assert not report.render_pick(rows)[0].endswith("interleaved |")


def test_cells_show_settings_problems_and_reasons():
    assert report.cell(ROWS[2], "hello") == "8000 [workers=8]"
    assert report.cell(ROWS[6], "hello") == "1 (3 errors) [processes=2 threads=8]"
    assert report.cell(ROWS[-1], "hello") == "not run: gunicorn is not installed"
    assert report.cell(ROWS[1], "echo71k").startswith("error:")
    lines = report.render_rows(ROWS, ["hello", "c1"])
    assert lines[0] == "| behind | server | hello req/s (c16) | time per request, c1 (ms) |"
    assert len(lines) == 2 + len(ROWS)


def test_sweep_lines_star_the_kept_setting():
    row = dict(ROWS[2], best={"workers": 8}, tried=[
        {"settings": {"workers": 5}, "result": {"rps": 7000.0}, "loads": {}},
        {"settings": {"workers": 8}, "result": {"rps": 8000.0}, "loads": {}},
        {"settings": {"workers": 16}, "result": {"error": "did not start"}, "loads": {}}])
    lines = report.render_tried([row, ROWS[0]], "hello")
    assert lines[2] == "- nginx, gunicorn sync: workers=5: 7000; workers=8: 8000*; " \
        "workers=16: did not start"
    assert len(lines) == 4


def _seeds():
    fcgi = [_row("nginx", "flupfast-fcgi-fork", "defaults", echo71k={"rps": 9000.0}),
            _row("nginx", "uwsgi-fcgi", "processes=16", echo71k={"rps": 4500.0})]
    scgi = [_row("nginx", "flupfast-scgi-fork", "defaults", echo71k={"rps": 6000.0}),
            _row("nginx", "uwsgi-scgi", "processes=16", echo71k={"rps": 3000.0})]
    uwsgi = [_row("nginx", "flupfast-uwsgi-fork", "defaults", echo71k={"rps": 5000.0}),
             _row("nginx", "uwsgi-uwsgi", "processes=8", echo71k={"rps": 4000.0})]
    return {
        "001": {"title": "t1", "groups": [{"protocol": "scgi", "rows": scgi},
                                          {"protocol": "uwsgi", "rows": uwsgi},
                                          {"protocol": "fcgi", "rows": fcgi[:1]}]},
        "002": {"title": "t2", "baseline_ms": 1.121, "requests": 1000,
                "rows": [dict(_row("apache", "modwsgi", "processes=2 threads=8",
                                   c1={"mean_ms": 10.748}), adj_mean_ms=9.627)]},
        "000": {"title": "t0", "upload_mib": 100, "upload_timeout": 180,
                "upload": [_row("apache", "flupfast-scgi-fork", "defaults",
                                upload={"seconds": 0.5, "mib_per_s": 200.0}),
                           _row("apache", "flup-ajp-thread", "defaults",
                                upload={"error": "not finished within 180 s"})],
                "cpu": [_row("apache", "flupfast-scgi-fork", "defaults", cpu={"rps": 900.0})]},
        "004": {"title": "t4", "requests": 1000,
                "rows": [{"label": "CGI script", "loads": {"c1": {"rps": 30.0,
                                                                  "mean_ms": 33.3}}},
                         {"label": "mod_fcgid", "loads": {"c1": {"not_run": "no mod_fcgid"}}}]},
    }


def test_seed_tables():
    md = "\n".join(report.render_seeds({"seeds": _seeds()}))
    assert "| scgi | 6000 [defaults] | 3000 [processes=16] | 2.00x |" in md
    assert "| uwsgi | 5000 [defaults] | 4000 [processes=8] | 1.25x |" in md
    assert "| fcgi | 9000 [defaults] | not selected | n/a |" in md
    # SCGI's rate over uwsgi's, flupfast's beside uWSGI's: 6000/5000, 3000/4000
    assert "SCGI/uwsgi (SCGI's req/s over uwsgi's): flupfast 1.20x, uWSGI 0.75x" in md
    assert "| Baseline (the app alone, in-process) | 1.12 | n/a |" in md
    assert "| Apache -> mod_wsgi daemon | 10.7 [processes=2 threads=8] | 9.63 |" in md
    assert "| Apache | flup 1.0.3 ajp | not finished within 180 s | |" in md
    assert "| CGI script | 30.0 | 33.3 |" in md and "| mod_fcgid | no mod_fcgid | |" in md


def test_seed_001_older_results_and_missing_figures():
    """A run from before flupfast spoke uwsgi (a "pending" group) still renders; the ratio
    line is n/a where a figure is missing and absent without both protocols."""
    rows = _seeds()["001"]["groups"]
    old = {"groups": [rows[0], {"protocol": "uwsgi", "pending": "waits for it"}, rows[2]]}
    md = "\n".join(report._seed_001(old))
    assert "| uwsgi | waits for it | | |" in md and "SCGI/uwsgi" not in md
    failed = [rows[0], {"protocol": "uwsgi", "rows": [dict(rows[1]["rows"][0], loads={
        "echo71k": {"error": "echo: status 502"}}), rows[1]["rows"][1]]}]
    md = "\n".join(report._seed_001({"groups": failed}))
    assert "| uwsgi | error: echo: status 502 | 4000 [processes=8] | n/a |" in md
    assert "flupfast n/a, uWSGI 0.75x" in md


def test_seed_001_pairs_each_protocol_with_uwsgi_on_it():
    """SCGI, uwsgi and FastCGI, in that order, each flupfast fork against uWSGI speaking the
    same protocol to nginx (uWSGI's own for uwsgi: --uwsgi-socket, nginx uwsgi_pass)."""
    assert [g[0] for g in seeds.SEED_001_GROUPS] == ["scgi", "uwsgi", "fcgi"]
    for proto, ours, theirs in seeds.SEED_001_GROUPS:
        assert peers.PEERS[ours].family == "flupfast" and peers.PEERS[ours].mode == "fork"
        assert peers.PEERS[theirs].family == "uwsgi"
        assert peers.PEERS[ours].protocol == peers.PEERS[theirs].protocol == proto
    ours = peers.make_server(peers.PEERS["flupfast-uwsgi-fork"], {}, "bench.apps:app", "/tmp",
                             tcp=False).command()
    assert ours[ours.index("--protocol") + 1] == "uwsgi"
    theirs = peers.make_server(peers.PEERS["uwsgi-uwsgi"], peers.PEERS["uwsgi-uwsgi"].candidates[0],
                               "bench.apps:app", "/tmp", tcp=False, uwsgi_binary="/bin/uwsgi")
    cmd = theirs.command()
    assert cmd[cmd.index("--uwsgi-socket") + 1] == theirs.sock_path
    block = server_block(0, "uwsgi", "/s.sock", 1, False, 60)
    assert "uwsgi_pass unix:/s.sock;" in block and "include /etc/nginx/uwsgi_params;" in block


def test_whole_report_with_peers_and_seeds(tmp_path):
    results = {"started": "2026-01-01 00:00:00", "elapsed_seconds": 1.0, "kinds": ["compiled"],
               "modes": ["thread"], "notes": [], "config": run.Config(True, _Args()).as_dict(),
               "survey": {"missing": [], "notes": [], "flupfast": "0.1", "compiled": True,
                          "machine": {"nproc": 2, "cpu": "x", "kernel": "6", "python": "3.11",
                                      "loadavg_at_start": "1 1 1"}},
               "peers": {"sweep": True, "apps": {
                   "hello": {"loads": ["hello", "echo71k", "c1"], "rows": ROWS},
                   "flask": {"not_run": "Flask is not installed"}}},
               "seeds": _seeds()}
    results["targets"] = run.all_targets(results)
    md = run.render_markdown(results)
    assert "## What would I pick instead" in md and "## Seed 002" in md
    assert "The Flask app: not run: Flask is not installed" in md


class _Args:
    conns, rounds, duration, upload_mib, download_mib = 16, 0, 0, 100, 100
    flup_download_mib, flup_full_timeout, modes, log_levels, callgrind_n = 20, 30, "thread", \
        "", 0
    sweep, peers, requests, seed_upload_timeout = True, "", 0, 0


def test_config_of_the_peers_and_seeds():
    cfg = run.Config(True, _Args())
    assert cfg.sweep and cfg.peer_filter is None and cfg.seed_upload_mib == 20
    assert run.Config(False, _Args()).seed_requests_c100 == 10000


def test_cli_rejects_unknown_parts_and_seeds():
    with pytest.raises(SystemExit):
        run.main(["--only", "peers,nonsense"])
    with pytest.raises(SystemExit):
        run.main(["--only", "seeds", "--seeds", "003"])


# -- rounds alternating between servers --------------------------------------------------------

def test_interleaved_alternates_rounds_and_keeps_each_median(monkeypatch, tmp_path):
    order = []

    workdirs = []

    class FakeCell:
        def __init__(self, front, peer, settings, app, workdir, client, uwsgi_binary):
            self.port, self.error = peer.port, peer.error
            self.rounds = 0
            assert os.path.isdir(workdir)
            workdirs.append(workdir)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            order.append("stop %d" % self.port)

        def died(self):
            return "exited with 1" if self.port == 3 and self.rounds >= 2 else None

    class Peer:
        def __init__(self, port, error=None):
            self.port, self.error, self.candidates = port, error, [{"processes": port}]

    figures = {1: iter([10, 30, 20]), 2: iter([7, 5, 6]), 3: iter([1, 2, 3])}
    started = {}

    def load(port):
        order.append(port)
        started[port] = started.get(port, 0) + 1
        return {"rps": next(figures[port])}

    class CountingCell(FakeCell):
        def died(self):
            self.rounds = started.get(self.port, 0)
            return super().died()

    monkeypatch.setattr(cells, "Cell", CountingCell)
    monkeypatch.setattr(cells, "settings_text", lambda s: str(s))
    rows = cells.interleaved([("nginx", Peer(1)), ("nginx", Peer(2)), ("nginx", Peer(3)),
                              ("nginx", Peer(4, "did not start"))], "app", str(tmp_path),
                             None, load, "echo71k", 3)
    # All up for every round, each in its own directory, each round starting one cell further
    # on; the one that died after its second round is loaded no more, the one that never
    # started never.
    assert order == [1, 2, 3, 2, 3, 1, 1, 2, "stop 4", "stop 3", "stop 2", "stop 1"]
    assert len(set(workdirs)) == 4
    assert [r["loads"]["echo71k"].get("rps") for r in rows] == [20, 6, None, None]
    assert rows[0]["loads"]["echo71k"]["rounds"] == [10, 30, 20]   # in the order run
    assert rows[1]["interleaved"] == 3 and rows[1]["best"] == {"processes": 2}
    assert rows[2]["loads"]["echo71k"] == {"error": "exited with 1"}
    assert rows[3]["loads"]["echo71k"] == {"error": "did not start"}


def test_interleaved_with_every_setting_keeps_each_servers_best(monkeypatch, tmp_path):
    ran = []

    class Peer:
        def __init__(self, *ports):
            self.candidates = [{"p": p} for p in ports]

    rates = {1: 100, 2: 300, 3: 200, 4: 50}

    def load(port):
        ran.append(port)
        return {"rps": rates[port]}

    monkeypatch.setattr(cells, "Cell", FakeCell)
    monkeypatch.setattr(cells, "settings_text", lambda s: str(s))
    rows = cells.interleaved([("nginx", Peer(1, 2)), ("nginx", Peer(3, 4))], "app",
                             str(tmp_path), None, load, "echo71k", 2, all_settings=True)
    assert ran == [1, 2, 3, 4, 2, 3, 4, 1]   # every setting of both, each round rotated
    assert [r["best"] for r in rows] == [{"p": 2}, {"p": 3}]
    assert [r["loads"]["echo71k"]["rps"] for r in rows] == [300, 200]
    assert [t["result"]["rps"] for t in rows[1]["tried"]] == [200, 50]
