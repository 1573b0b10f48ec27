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
from bench.servers.peers import PEERS, Peer

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
# The winners' rounds again, interleaved (``--sweep``): the sweep measures one server after
# the other, and this machine moves 20-25% between minutes.
CONFIRM_ROUNDS = 5
CONFIRM_LOADS = ("hello", "echo71k")  # req/s loads (c1 runs one client for a fixed count)


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


# -- "what would I pick instead": which rows are compared (the report prints them; the
# winners' rounds are run again interleaved from here) --------------------------------------

def figure(row, load):
    """(number, key, lower_is_better) of ``row``'s ``load``; number None without one."""
    res = row.get("loads", {}).get(load) or {}
    if load == "c1":
        return res.get("mean_ms"), "mean_ms", True
    return res.get("rps"), "rps", False


def best_row(rows, load, pick):
    """The row of ``rows`` chosen by ``pick(row)`` with the best figure for ``load``."""
    have = [r for r in rows if pick(r) and figure(r, load)[0] is not None]
    if not have:
        return None
    lower = figure(have[0], load)[2]
    return (min if lower else max)(have, key=lambda r: figure(r, load)[0])


def _ours(front):
    return lambda r: r["peer"].startswith("flupfast") and r["front"] == front


def _ours_on(protocol):
    """flupfast's rows behind nginx on one protocol (its modes and settings)."""
    return lambda r: r["peer"].startswith("flupfast-%s-" % protocol) and r["front"] == "nginx"


def _theirs(fronts, prefix):
    return lambda r: r["front"] in fronts and r["peer"].startswith(prefix)


NGINX = ("nginx", "nginx-keepalive")
# (behind, load, flupfast's rows, the peer's rows, the peer's name)
PICKS = (
    ("nginx", "hello", _ours("nginx"), _theirs(NGINX, "gunicorn"), "gunicorn"),
    ("nginx", "echo71k", _ours("nginx"), _theirs(NGINX, "gunicorn"), "gunicorn"),
    ("nginx", "hello", _ours("nginx"), _theirs(NGINX, "uwsgi-http"), "uWSGI --http-socket"),
    ("nginx uwsgi_pass", "hello", _ours_on("uwsgi"), _theirs(NGINX, "gunicorn-uwsgi"),
     "gunicorn --protocol uwsgi"),
    ("nginx uwsgi_pass", "hello", _ours_on("uwsgi"), _theirs(NGINX, "uwsgi-uwsgi"),
     "uWSGI --uwsgi-socket"),
    ("nginx fastcgi_pass", "hello", _ours_on("fcgi"), _theirs(NGINX, "uwsgi-fcgi"),
     "uWSGI --fastcgi-socket"),
    ("nginx scgi_pass", "hello", _ours_on("scgi"), _theirs(NGINX, "uwsgi-scgi"),
     "uWSGI --scgi-socket"),
    ("Apache", "hello", _ours("apache"), _theirs(("apache",), "modwsgi"), "mod_wsgi daemon"),
    ("Apache", "echo71k", _ours("apache"), _theirs(("apache",), "modwsgi"), "mod_wsgi daemon"),
    ("Apache", "c1", _ours("apache"), _theirs(("apache",), "modwsgi"), "mod_wsgi daemon"),
    ("Apache", "c1", _ours("apache"), _theirs(("apache",), "gunicorn"), "gunicorn"),
    ("Apache", "c1", _ours("apache"), _theirs(("apache",), "flup-"), "flup 1.0.3"),
)


def pick_pairs(rows):
    """Per PICKS line: (behind, load, name, flupfast's best row or None, the peer's or None)."""
    return [(behind, load, name, best_row(rows, load, ours), best_row(rows, load, theirs))
            for behind, load, ours, theirs, name in PICKS]


def winners_to_confirm(rows, load):
    """The distinct rows (front, peer, settings) that win a PICKS line on ``load`` against a
    row that also has a figure: the cells ``confirm_picks`` runs again."""
    seen, out = set(), []
    for _, line_load, _, ours, theirs in pick_pairs(rows):
        if line_load != load or not (ours and theirs):
            continue
        for row in (ours, theirs):
            key = (row["front"], row["peer"], row.get("settings_text"))
            if key not in seen:
                seen.add(key)
                out.append(row)
    return out


def confirm_picks(rows, app, loads, info, workdir, client, rounds=CONFIRM_ROUNDS):
    """The winners of "what would I pick instead" again, at their settings, every cell up at
    once and ``rounds`` rounds alternating between them (cells.interleaved) -> {load: [{front,
    peer, settings_text, loads: {load: median result}}]}."""
    out = {}
    for load in CONFIRM_LOADS:
        if load not in loads:
            continue
        winners = winners_to_confirm(rows, load)
        if len(winners) < 2:
            continue
        log("peers: the winners on %s again, %d rounds interleaved" % (load, rounds))
        cells = []
        for row in winners:
            peer = PEERS[row["peer"]]
            cells.append((row["front"], Peer(peer.key, peer.label, peer.family, peer.protocol,
                                             peer.mode, [row.get("best") or {}])))
        got = interleaved(cells, app, workdir, client, loads[load], load, rounds,
                          info.get("uwsgi_path"))
        out[load] = [{"front": row["front"], "peer": row["peer"],
                      "settings_text": row.get("settings_text"), "loads": res["loads"]}
                     for row, res in zip(winners, got)]
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
        app = {"app": APP_SPEC[name], "loads": list(loads),
               "rows": run_rows(rows, APP_SPEC[name], loads, info, workdir, client, cfg)}
        if cfg.sweep and name == "hello":
            app["confirm_rounds"] = CONFIRM_ROUNDS
            app["confirmed"] = confirm_picks(app["rows"], APP_SPEC[name], loads, info,
                                             workdir, client)
        out["apps"][name] = app
    return out
