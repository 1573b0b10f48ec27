"""One server under test behind one front, started fresh for one setting and stopped after
(a "cell" of the peers' and seeds' tables), and the sweep over a server's settings that keeps
its best. Fronts: ``nginx`` (no upstream pool: fastcgi_keep_conn off, HTTP/1.0 proxy_pass),
``nginx-keepalive`` (an upstream keepalive pool: fastcgi_keep_conn on, HTTP/1.1), ``apache``
(mod_proxy_fcgi/scgi/ajp/http to TCP loopback, or mod_wsgi daemon mode; threads for the client
count). Every wait is bounded by the servers' and fronts' own start and stop."""
import contextlib
import os

from bench.base import log, rotated
from bench.fronts.apache import Apache, apache_root
from bench.fronts.nginx import Nginx
from bench.servers.apache_hosted import modwsgi_script
from bench.servers.peers import make_server, settings_text
from bench.servers.wwwdata import www_tree

FRONTS = ("nginx", "nginx-keepalive", "apache")
FRONT_LABEL = {"nginx": "nginx", "nginx-keepalive": "nginx, upstream keepalive",
               "apache": "Apache"}
# Apache's threads: more than the most clients any scenario uses (100), so that Apache itself
# never drops connections (with 32 threads at 100 clients it does, for every backend alike)
APACHE_THREADS = 128
TIMEOUT = 60


def www_dir(workdir):
    """A directory of the run that Apache's www-data processes can read (scripts)."""
    path = os.path.join(workdir, "www")
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o755)
    return path


def front_for(front, srv, workdir, app, pool=16):
    """The front object (not started) serving ``srv`` under the key "cell"."""
    if front.startswith("nginx"):
        static = www_dir(workdir)
        return Nginx(workdir, {"cell": (srv.protocol, srv.sock_path, front == "nginx-keepalive")},
                     TIMEOUT, static, pool=pool)
    if srv.protocol == "wsgi":
        tree = www_tree(flask="flask" in app)
        script = os.path.join(www_dir(workdir), "app.wsgi")
        with open(script, "w") as f:
            f.write(modwsgi_script(app))
        os.chmod(script, 0o644)
        vhost = ("raw", (["wsgi"], srv.vhost(os.path.join(apache_root(workdir), "run"), script,
                                             tree)))
    else:
        vhost = (srv.protocol, srv.port)
    return Apache(workdir, {"cell": vhost}, TIMEOUT, threads=APACHE_THREADS)


class Cell:
    """``with Cell(...) as cell:`` -> ``cell.port`` (the front's), or ``cell.error``."""

    def __init__(self, front, peer, settings, app, workdir, client, uwsgi_binary=None,
                 kind="compiled", env=None):
        self.front_key, self.peer, self.settings = front, peer, settings
        self.srv = make_server(peer, settings, app, workdir, tcp=front == "apache",
                               uwsgi_binary=uwsgi_binary, kind=kind, env=env)
        self.app, self.workdir, self.client = app, workdir, client
        self.front = None
        self.port = None
        self.error = None

    def __enter__(self):
        log("    %s, %s (%s) behind %s" % (self.peer.label, settings_text(self.settings),
                                           self.app, self.front_key))
        if not self.srv.start(self.client):
            self.error = "%s did not start: %s" % (self.peer.label, self.srv.error)
            return self
        try:
            self.front = front_for(self.front_key, self.srv, self.workdir, self.app)
        except (OSError, RuntimeError) as exc:
            self.error = "no front: %s" % exc
            return self
        if not self.front.start():
            self.error = "%s did not start: %s" % (self.front.name, self.front.error)
            return self
        self.port = self.front.ports["cell"]
        return self

    def died(self):
        """Why the server or the front is gone, or None."""
        for what in (self.srv, self.front):
            proc = getattr(what, "proc", None)
            if proc is not None and proc.poll() is not None:
                return "%s exited with %s: %s" % (getattr(what, "name", self.peer.label),
                                                  proc.returncode, what.log_tail(300))
        return None

    def __exit__(self, *exc):
        # flup's AJP server first: Apache's children otherwise outlive SIGTERM (see
        # scenarios/behind_fronts.py)
        first = [self.srv] if self.peer.family == "flup" and self.peer.protocol == "ajp" \
            else []
        for what in first + [self.front] + ([] if first else [self.srv]):
            if what is not None:
                what.stop()
        if self.error:
            log("      FAILED: %s" % self.error)


def median_run(runs, key="rps"):
    """The median of ``runs`` by ``key`` (dicts; the ones without it, failed, count last)."""
    ok = sorted((r for r in runs if r.get(key) is not None), key=lambda r: r[key])
    if not ok:
        return dict(runs[-1]) if runs else {"error": "no run"}
    best = dict(ok[len(ok) // 2])
    if len(runs) > 1:
        best["rounds"] = [r.get(key) for r in runs]
    return best


def clean(res):
    """A run counts when it has a figure and no socket errors, non-2xx answers or failures."""
    return not res.get("error") and not res.get("errors") and not res.get("non_2xx") and \
        not res.get("failed")


def best_setting(tried, key="rps", lower_is_better=False):
    """The sweep's choice: of ``tried`` ({"settings", "result"}), the one whose result is best
    by ``key`` among the clean runs (any run when none is clean); ties go to the earlier one
    (the first candidate: the server's defaults). None when nothing has the figure."""
    have = [t for t in tried if t["result"].get(key) is not None]
    pool = [t for t in have if clean(t["result"])] or have
    if not pool:
        return None
    sign = -1 if lower_is_better else 1
    return max(pool, key=lambda t: (sign * t["result"][key], -tried.index(t)))


def sweep(front, peer, app, workdir, client, loads, candidates, rounds, key="rps",
          uwsgi_binary=None, lower_is_better=False):
    """Each setting of ``candidates`` in a fresh cell: ``loads`` (name -> fn(port) -> dict)
    run ``rounds`` times (median by ``key``); the first load decides the best setting.
    -> {"best": settings, "settings_text", "loads": {name: result}, "tried": [...]}"""
    tried = []
    for settings in candidates:
        with Cell(front, peer, settings, app, workdir, client, uwsgi_binary) as cell:
            if cell.error:
                tried.append({"settings": settings, "result": {"error": cell.error},
                              "loads": {}})
                continue
            out = {}
            for name, fn in loads.items():
                runs = []
                for _ in range(rounds):
                    res, gone = run_load(fn, cell)
                    runs.append(res)
                    if gone or res.get("error"):
                        break  # a setting that failed a round is not run again
                out[name] = median_run(runs, key)
                if len(out) == 1 and not clean(out[name]) \
                        and any(clean(t["result"]) for t in tried):
                    # Its deciding load failed where an earlier setting's did not: it cannot
                    # win, and its other loads are skipped (a fork pool that Apache's pooled
                    # connections pin answers each c1 request after the 5 s overload bound).
                    break
            first = out[next(iter(loads))]
            tried.append({"settings": settings, "result": first, "loads": out})
    best = best_setting(tried, key, lower_is_better)
    if best is None:
        errors = [t["result"].get("error") for t in tried if t["result"].get("error")]
        return {"error": errors[0] if errors else "no figure", "tried": tried}
    return {"best": best["settings"], "settings_text": settings_text(best["settings"]),
            "loads": best["loads"], "tried": tried if len(tried) > 1 else []}


def interleaved(rows, app, workdir, client, load, name, rounds, uwsgi_binary=None, key="rps",
                all_settings=False):
    """Each (front, peer) of ``rows`` at its first setting (``all_settings``: at every one of
    its candidates, the best kept as ``sweep`` keeps it), all cells up at once, ``load``
    (fn(port) -> dict) run on each in turn ``rounds`` times: rounds alternate between the
    cells, each round starting one cell further on, so a machine that slows for a while slows
    them alike (this machine's runs move 20% between minutes). -> one dict per row as
    ``sweep`` returns (the median by ``key`` under the load's ``name``)."""
    plan = [(r, front, peer, settings) for r, (front, peer) in enumerate(rows)
            for settings in (peer.candidates if all_settings else peer.candidates[:1])]
    runs = [[] for _ in plan]
    with contextlib.ExitStack() as stack:
        cells = []
        for i, (_, front, peer, settings) in enumerate(plan):
            own = os.path.join(workdir, "cell%d" % i)   # each its own front's config and socket
            os.makedirs(own, exist_ok=True)
            cells.append(stack.enter_context(Cell(front, peer, settings, app, own, client,
                                                  uwsgi_binary)))
        failed = [cell.error for cell in cells]  # a cell that did not start, or died
        for rnd in range(rounds):
            for i in rotated(range(len(cells)), rnd):
                cell = cells[i]
                if failed[i]:
                    continue
                res, failed[i] = run_load(load, cell)
                runs[i].append(res)
    out = []
    for r in range(len(rows)):
        # A server that died has no figure: its earlier rounds are not kept.
        tried = [{"settings": settings,
                  "result": {"error": error} if error else median_run(got, key)}
                 for (row, _, _, settings), got, error in zip(plan, runs, failed) if row == r]
        best = best_setting(tried, key)
        chosen = best or tried[0]
        out.append({"best": chosen["settings"], "settings_text": settings_text(chosen["settings"]),
                    "loads": {name: chosen["result"]}, "tried": tried if len(tried) > 1 else [],
                    "interleaved": rounds})
    return out


def run_load(load, cell):
    """``load`` on a cell -> (result, why the server or front is gone, or None); a death is
    also the result's error."""
    res = load(cell.port)
    gone = cell.died()
    return (dict(res, error=gone) if gone else res), gone
