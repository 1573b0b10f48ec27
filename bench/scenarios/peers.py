"""The peers part: the servers a user compares before switching, side by side in one run, same app,
same fronts, same machine: flupfast (FastCGI fork and thread), flup 1.0.3, gunicorn (sync,
gthread), uWSGI's own ``--http-socket`` behind nginx (``proxy_pass`` without and with an
upstream keepalive pool), and behind Apache (mod_proxy_fcgi, mod_proxy_http, mod_wsgi daemon
mode). Each server in a fresh cell per setting (scenarios/cells.py); with ``--sweep`` every
setting of bench/servers/peers.py is tried and the best kept, its settings shown beside it.

Loads per cell: hello (``wrk -c16``, the figure the sweep decides by), the 71,453-byte echo
(``wrk -c100`` POST /echo, seed 001's body) and the time per request at concurrency 1 (``ab
-n N -c1``). The Flask app (bench/flask_app.py): its page, JSON and form POST at ``wrk -c16``.
"""
from bench import apps
from bench.base import log
from bench.drivers.ab import run_ab_requests
from bench.drivers.http import http_request
from bench.drivers.wrk import post_script, run_wrk
from bench.scenarios.cells import FRONT_LABEL, interleaved, sweep
from bench.servers.peers import PEERS

ECHO_SIZE = 71453   # seed 001's POST body
# A c1 run's bound: flup 1.0.3 behind Apache, the slowest peer, takes 44 ms per request (44 s
# for 1,000); a pool that answers each request after the 5 s overload bound is cut at this.
C1_LIMIT = 90

# (front, peer) rows per app
HELLO_ROWS = (
    ("nginx", "flupfast-fcgi-fork"), ("nginx", "flupfast-fcgi-thread"),
    ("nginx", "flup-fcgi-fork"),
    ("nginx", "gunicorn-sync"), ("nginx-keepalive", "gunicorn-sync"),
    ("nginx", "gunicorn-gthread"), ("nginx-keepalive", "gunicorn-gthread"),
    ("nginx", "uwsgi-http"), ("nginx-keepalive", "uwsgi-http"),
    ("nginx", "flupfast-uwsgi-fork"), ("nginx", "flupfast-uwsgi-thread"),
    ("nginx", "gunicorn-uwsgi"), ("nginx", "uwsgi-uwsgi"),
    # uWSGI at its best on the other two protocols nginx passes to a backend
    ("nginx", "uwsgi-fcgi"), ("nginx", "flupfast-scgi-fork"), ("nginx", "uwsgi-scgi"),
    ("apache", "flupfast-fcgi-fork"), ("apache", "flupfast-fcgi-thread"),
    ("apache", "flup-fcgi-fork"), ("apache", "modwsgi"),
    ("apache", "gunicorn-sync"), ("apache", "gunicorn-gthread"),
)
FLASK_ROWS = (
    ("nginx", "flupfast-fcgi-fork"), ("nginx", "flup-fcgi-fork"), ("nginx", "gunicorn-sync"),
    ("nginx", "gunicorn-gthread"), ("nginx", "uwsgi-http"), ("apache", "modwsgi"),
    ("apache", "gunicorn-sync"),
)
APP_SPEC = {"hello": "bench.apps:app", "flask": "bench.flask_app:app"}


def check_echo(port):
    """One echo through the cell before the load: the body must come back whole."""
    body = apps.pattern_bytes(ECHO_SIZE)
    try:
        status, _, got, _ = http_request(port, "POST", "/echo", body, timeout=20)
    except OSError as exc:
        return "echo: %s" % exc
    if status != 200 or got != body:
        return "echo: status %s, %d bytes back of %d" % (status, len(got), len(body))
    return None


def hello_loads(cfg, workdir):
    echo = post_script(workdir, "echo", apps.pattern_bytes(ECHO_SIZE))

    def echo_load(port):
        problem = check_echo(port)
        return {"error": problem} if problem else run_wrk(port, "/echo", 100,
                                                          cfg.peer_duration, echo)

    return {"hello": lambda port: run_wrk(port, "/", cfg.conns, cfg.peer_duration),
            "echo71k": echo_load,
            "c1": lambda port: run_ab_requests("http://127.0.0.1:%d/" % port,
                                               cfg.peer_requests, 1, time_limit=C1_LIMIT)}


def flask_loads(cfg, workdir):
    from bench.flask_app import FORM_BODY   # Flask is imported only when the app is run
    form = post_script(workdir, "form", FORM_BODY, "application/x-www-form-urlencoded")
    return {"page": lambda port: run_wrk(port, "/", cfg.conns, cfg.peer_duration),
            "api": lambda port: run_wrk(port, "/api", cfg.conns, cfg.peer_duration),
            "form": lambda port: run_wrk(port, "/form", cfg.conns, cfg.peer_duration, form)}


def missing(peer, info):
    """Why ``peer`` cannot run on this machine, or None."""
    need = {"gunicorn": "gunicorn", "uwsgi": "uwsgi", "uwsgi-http": "uwsgi",
            "flup": "flup", "modwsgi": "mod_wsgi"}.get(peer.family)
    if need and not info.get(need):
        return "%s is not installed" % need
    return None


def _row(front, peer_key, info):
    """A row's head, with ``not_run`` when its server or front is missing here."""
    peer = PEERS[peer_key]
    row = {"front": front, "front_label": FRONT_LABEL[front], "peer": peer_key,
           "label": peer.label}
    why = missing(peer, info) or (None if front != "apache" or info.get("apache2")
                                  else "apache2 is not installed")
    if front.startswith("nginx") and not info.get("nginx"):
        why = "nginx is not installed"
    if why:
        row["not_run"] = why
    return row


def run_interleaved(rows, app, load, name, info, workdir, client, cfg):
    """The (front, peer) rows at their first settings (with ``--sweep``: at each of their
    settings, each one's best kept), rounds alternating between them (cells.interleaved);
    the result under the load's ``name`` -> list of row dicts."""
    heads = [_row(front, key, info) for front, key in rows
             if not cfg.peer_filter or key in cfg.peer_filter]
    runnable = [h for h in heads if "not_run" not in h]
    results = interleaved([(h["front"], PEERS[h["peer"]]) for h in runnable], app, workdir,
                          client, load, name, cfg.peer_rounds, info.get("uwsgi_path"),
                          all_settings=cfg.sweep)
    for head, res in zip(runnable, results):
        head.update(res)
    return heads


def run_rows(rows, app, loads, info, workdir, client, cfg, key="rps", lower=False):
    """Each (front, peer) row swept (or at its first setting) -> list of row dicts."""
    out = []
    for front, peer_key in rows:
        if cfg.peer_filter and peer_key not in cfg.peer_filter:
            continue
        row = _row(front, peer_key, info)
        peer = PEERS[peer_key]
        if "not_run" not in row:
            cands = peer.candidates if cfg.sweep else peer.candidates[:1]
            row.update(sweep(front, peer, app, workdir, client, loads, cands, cfg.peer_rounds,
                             key, info.get("uwsgi_path"), lower))
        out.append(row)
    return out


def run_peers(info, workdir, client, cfg, results, apps_wanted=("hello", "flask")):
    out = results.setdefault("peers", {"apps": {}})
    out["sweep"] = cfg.sweep
    for name in apps_wanted:
        if name == "flask" and not info.get("flask"):
            out["apps"][name] = {"not_run": "Flask is not installed (pip install flask)"}
            continue
        log("peers: the %s app" % name)
        loads = hello_loads(cfg, workdir) if name == "hello" else flask_loads(cfg, workdir)
        rows = HELLO_ROWS if name == "hello" else FLASK_ROWS
        out["apps"][name] = {"app": APP_SPEC[name], "loads": list(loads),
                             "rows": run_rows(rows, APP_SPEC[name], loads, info, workdir,
                                              client, cfg)}
    return out
