"""The experiments this project started from (the seeds), reproduced as named scenarios:

  001  a POST of 71,453 bytes echoed back, nginx in front over a Unix socket, 100 concurrent
       clients (``ab -c100 -p``, as the seed ran it): SCGI, uwsgi (nginx ``uwsgi_pass``) and
       FastCGI, flupfast against uWSGI on each
  002  what a gateway adds to each request: N sequential requests (``ab -n N -c1``), the mean
       time per request minus the app's own time measured in-process ("Adj Mean"): flupfast
       behind Apache (mod_proxy_fcgi, mod_proxy_scgi) and nginx, flup fcgi_fork/scgi_fork,
       mod_wsgi daemon, gunicorn behind mod_proxy_http
  000  a ~100 MiB upload through mod_proxy_scgi and mod_proxy_ajp (flup took minutes in the
       seed: it gets a time limit and is reported as not finished within it); a compute-bound
       app (/cpu) in thread vs fork mode over SCGI and AJP13 behind Apache
  004  the same hello as a CGI script (mod_cgid) and as a mod_fcgid ``.fcgi`` script, N
       requests one after another; flupfast behind mod_proxy_fcgi beside them
"""
import json
import os

from bench import apps
from bench.base import MIB, log
from bench.drivers.ab import run_ab_requests
from bench.drivers.apptime import adj_mean, app_mean_ms
from bench.drivers.http import http_request
from bench.drivers.wrk import run_wrk
from bench.fronts.apache import Apache, apache_root
from bench.scenarios.cells import TIMEOUT, www_dir
from bench.scenarios.peers import ECHO_SIZE, check_echo, run_interleaved, run_rows
from bench.servers.apache_hosted import cgi_script, cgi_vhost
from bench.servers.wwwdata import www_tree

SEEDS = ("000", "001", "002", "004")
SEED_TITLE = {
    "000": "a ~100 MiB upload through mod_proxy_scgi/ajp; a compute-bound app, thread vs fork",
    "001": "71,453-byte POST echoed, nginx over a Unix socket, 100 clients: SCGI, uwsgi, "
           "FastCGI",
    "002": "what a gateway adds per request: mean of N sequential requests minus the app's "
           "own time (Adj Mean)",
    "004": "the same hello as a CGI script and as a mod_fcgid .fcgi script",
}
APP = "bench.apps:app"
# seed 001: per protocol, flupfast's row and uWSGI's on the same protocol (uWSGI's own for uwsgi)
SEED_001_GROUPS = (("scgi", "flupfast-scgi-fork", "uwsgi-scgi"),
                   ("uwsgi", "flupfast-uwsgi-fork", "uwsgi-uwsgi"),
                   ("fcgi", "flupfast-fcgi-fork", "uwsgi-fcgi"))


def seed_001(info, workdir, client, cfg):
    body = os.path.join(workdir, "echo-001.body")
    with open(body, "wb") as f:
        f.write(apps.pattern_bytes(ECHO_SIZE))

    def echo(port):
        problem = check_echo(port)
        return {"error": problem} if problem else run_ab_requests(
            "http://127.0.0.1:%d/echo" % port, max(100, cfg.seed_requests_c100), 100,
            body_file=body)

    # Both servers up (with --sweep: at every one of their settings), rounds alternating
    out = {"groups": [], "interleaved": cfg.peer_rounds}
    for proto, ours, theirs in SEED_001_GROUPS:
        rows = run_interleaved((("nginx", ours), ("nginx", theirs)), APP, echo, "echo71k",
                               info, workdir, client, cfg)
        out["groups"].append({"protocol": proto, "rows": rows})
    return out


SEED_002_ROWS = (
    ("apache", "flupfast-fcgi-fork"), ("apache", "flupfast-scgi-fork"),
    ("nginx", "flupfast-fcgi-fork"), ("nginx", "flupfast-scgi-fork"),
    ("apache", "flup-fcgi-fork"), ("apache", "flup-scgi-fork"),
    ("apache", "modwsgi"), ("apache", "gunicorn-sync"),
)


def seed_002(info, workdir, client, cfg):
    from bench.apps import app
    baseline = app_mean_ms(app, "/", cfg.seed_requests)
    load = {"c1": lambda port: run_ab_requests("http://127.0.0.1:%d/" % port,
                                               cfg.seed_requests, 1)}
    rows = run_rows(SEED_002_ROWS, APP, load, info, workdir, client, cfg, key="mean_ms",
                    lower=True)
    for row in rows:
        res = row.get("loads", {}).get("c1", {})
        row["adj_mean_ms"] = adj_mean(res.get("mean_ms"), baseline)
    return {"baseline_ms": baseline, "requests": cfg.seed_requests, "rows": rows}


UPLOAD_ROWS = (("apache", "flupfast-scgi-fork"), ("apache", "flupfast-scgi-thread"),
               ("apache", "flupfast-ajp-thread"), ("apache", "flup-scgi-fork"),
               ("apache", "flup-ajp-thread"))
CPU_ROWS = (("apache", "flupfast-ajp-thread"), ("apache", "flupfast-ajp-fork"),
            ("apache", "flupfast-scgi-thread"), ("apache", "flupfast-scgi-fork"),
            ("apache", "flup-ajp-thread"), ("apache", "flup-scgi-fork"))


def upload_once(port, size, timeout):
    """One POST of ``size`` pattern bytes to /upload (read(65536), length counted) -> dict
    (seconds, or error: "not finished within N s" when the time limit passed)."""
    body = apps.pattern_bytes(size)
    try:
        status, _, answer, seconds = http_request(port, "POST", "/upload?mode=read65536&check=len",
                                                  body, timeout=timeout)
    except OSError as exc:
        if "timed out" in str(exc):
            return {"error": "not finished within %.0f s" % timeout, "timeout": timeout}
        return {"error": "%s: %s" % (type(exc).__name__, exc)}
    try:
        got = json.loads(answer)["length"]
    except (ValueError, KeyError):
        return {"error": "status %d: %r" % (status, answer[:120])}
    if status != 200 or got != size:
        return {"error": "status %d, the app read %d of %d bytes" % (status, got, size)}
    return {"seconds": round(seconds, 3), "mib_per_s": round(size / MIB / seconds, 1)}


def seed_000(info, workdir, client, cfg):
    size = cfg.seed_upload_mib * MIB
    upload = {"upload": lambda port: upload_once(port, size, cfg.seed_upload_timeout)}
    up = run_rows(UPLOAD_ROWS, APP, upload, info, workdir, client, cfg, key="seconds",
                  lower=True)
    cpu = {"cpu": lambda port: run_wrk(port, "/cpu", cfg.conns, cfg.peer_duration)}
    return {"upload_mib": cfg.seed_upload_mib, "upload_timeout": cfg.seed_upload_timeout,
            "upload": up,
            "cpu": run_rows(CPU_ROWS, APP, cpu, info, workdir, client, cfg)}


def hosted_script(kind, info, workdir, requests):
    """Apache serving the hello as ``kind`` (cgi | fcgid) script under /cgi/: one request
    checked, then ``ab -n requests -c1`` -> dict."""
    need = "mod_cgid" if kind == "cgi" else "mod_fcgid"
    if not info.get(need):
        return {"not_run": "%s is not installed" % need}
    try:
        tree = www_tree()
    except RuntimeError as exc:
        return {"not_run": str(exc)}
    scripts = www_dir(workdir)
    name = "hello.cgi" if kind == "cgi" else "hello.fcgi"
    with open(os.path.join(scripts, name), "w") as f:
        f.write(cgi_script(kind, APP, tree))
    os.chmod(os.path.join(scripts, name), 0o755)
    mods, text = cgi_vhost(kind, "{port}", os.path.join(apache_root(workdir), "run"), scripts)
    front = Apache(workdir, {"cell": ("raw", (mods, text))}, TIMEOUT)
    log("    hello as a %s script behind Apache" % kind)
    if not front.start():
        return {"error": "apache2 did not start: %s" % front.error}
    try:
        port = front.ports["cell"]
        try:
            status, _, body, _ = http_request(port, "GET", "/cgi/" + name, timeout=30)
        except OSError as exc:
            return {"error": "GET /cgi/%s: %s %s" % (name, exc, front.log_tail(300))}
        if status != 200 or body != apps.HELLO:
            return {"error": "GET /cgi/%s: status %d %r %s" % (name, status, body[:80],
                                                               front.log_tail(300))}
        return run_ab_requests("http://127.0.0.1:%d/cgi/%s" % (port, name), requests, 1)
    finally:
        front.stop()


def seed_004(info, workdir, client, cfg):
    out = {"requests": cfg.seed_requests, "rows": []}
    for kind, label in (("cgi", "CGI script (mod_cgid, flupfast.server.cgi)"),
                        ("fcgid", "mod_fcgid .fcgi script (flupfast.server.fcgi)")):
        out["rows"].append({"label": label, "front_label": "Apache",
                            "loads": {"c1": hosted_script(kind, info, workdir,
                                                          cfg.seed_requests)}})
    load = {"c1": lambda port: run_ab_requests("http://127.0.0.1:%d/" % port,
                                               cfg.seed_requests, 1)}
    out["rows"] += run_rows((("apache", "flupfast-fcgi-fork"),), APP, load, info, workdir,
                            client, cfg, key="mean_ms", lower=True)
    return out


RUNNERS = {"000": seed_000, "001": seed_001, "002": seed_002, "004": seed_004}


def run_seeds(names, info, workdir, client, cfg, results):
    out = results.setdefault("seeds", {})
    for name in names:
        log("seed %s: %s" % (name, SEED_TITLE[name]))
        out[name] = dict(RUNNERS[name](info, workdir, client, cfg), title=SEED_TITLE[name])
    return out
