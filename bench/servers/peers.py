"""The servers a user compares before switching (the peers part), by key: what each one is, its
label in the report, the worker/thread settings the sweep tries (the first is the one used
without ``--sweep``), and how one is made for a given app and settings. flup's servers keep
flup's defaults (a user of flup runs them so); flupfast's first setting is its defaults."""
from bench.servers.apache_hosted import ModWsgiDaemon
from bench.servers.gunicorn import GunicornServer
from bench.servers.server import Server
from bench.servers.uwsgi import UWSGIHTTPServer, UWSGIServer


class Peer:
    """``family``: flupfast | flup | uwsgi | uwsgi-http | gunicorn | modwsgi; ``protocol``:
    what the front speaks to it (fcgi, scgi, uwsgi, ajp, http; wsgi: Apache runs it)."""

    def __init__(self, key, label, family, protocol, mode="", candidates=({},)):
        self.key, self.label, self.family = key, label, family
        self.protocol, self.mode, self.candidates = protocol, mode, list(candidates)


def _flupfast(proto, mode, candidates=({},)):
    key = "flupfast-%s-%s" % (proto, mode)
    return Peer(key, "flupfast %s %s" % (PROTO_LABEL[proto], mode), "flupfast", proto, mode,
                candidates)


PROTO_LABEL = {"fcgi": "FastCGI", "scgi": "SCGI", "uwsgi": "uwsgi", "ajp": "AJP13",
               "http": "HTTP"}
# Small pools too: on this 2-core machine uWSGI's best was 2 processes, and a pool as small
# must be tried on both sides.
_FORK = ({}, {"max_children": 8}, {"max_children": 32}, {"max_children": 2, "max_spare": 2},
         {"max_children": 4, "max_spare": 4})
_THREAD = ({}, {"max_threads": 8})
_UWSGI_FORK = ({"processes": 16}, {"processes": 4}, {"processes": 8}, {"processes": 2})

PEERS = {p.key: p for p in (
    _flupfast("fcgi", "fork", _FORK), _flupfast("fcgi", "thread", _THREAD),
    _flupfast("scgi", "fork", _FORK), _flupfast("scgi", "thread", _THREAD),
    _flupfast("ajp", "thread", _THREAD), _flupfast("ajp", "fork", _FORK),
    _flupfast("uwsgi", "fork", _FORK), _flupfast("uwsgi", "thread", _THREAD),
    Peer("flup-fcgi-fork", "flup 1.0.3 fcgi_fork", "flup", "fcgi", "fork"),
    Peer("flup-fcgi-thread", "flup 1.0.3 fcgi", "flup", "fcgi", "thread"),
    Peer("flup-scgi-fork", "flup 1.0.3 scgi_fork", "flup", "scgi", "fork"),
    Peer("flup-ajp-thread", "flup 1.0.3 ajp", "flup", "ajp", "thread"),
    Peer("uwsgi-fcgi", "uWSGI --fastcgi-socket", "uwsgi", "fcgi", "fork", _UWSGI_FORK),
    Peer("uwsgi-scgi", "uWSGI --scgi-socket", "uwsgi", "scgi", "fork", _UWSGI_FORK),
    Peer("uwsgi-uwsgi", "uWSGI --uwsgi-socket", "uwsgi", "uwsgi", "fork", _UWSGI_FORK),
    Peer("uwsgi-http", "uWSGI --http-socket", "uwsgi-http", "http", "",
         ({"processes": 8}, {"processes": 2}, {"processes": 4}, {"processes": 16},
          {"processes": 2, "threads": 8})),
    # gunicorn's documented starting point is 2 x cores + 1 workers (5 here)
    Peer("gunicorn-sync", "gunicorn sync", "gunicorn", "http", "",
         ({"worker_class": "sync", "workers": 5}, {"worker_class": "sync", "workers": 2},
          {"worker_class": "sync", "workers": 8}, {"worker_class": "sync", "workers": 16})),
    Peer("gunicorn-gthread", "gunicorn gthread", "gunicorn", "http", "",
         ({"worker_class": "gthread", "workers": 2, "threads": 8},
          {"worker_class": "gthread", "workers": 1, "threads": 16},
          {"worker_class": "gthread", "workers": 4, "threads": 4},
          {"worker_class": "gthread", "workers": 5, "threads": 2})),
    # gunicorn 24+ speaks the uwsgi protocol (--protocol uwsgi): nginx uwsgi_pass to it
    Peer("gunicorn-uwsgi", "gunicorn sync --protocol uwsgi", "gunicorn", "uwsgi", "",
         ({"worker_class": "sync", "workers": 5}, {"worker_class": "sync", "workers": 2},
          {"worker_class": "sync", "workers": 8}, {"worker_class": "sync", "workers": 16})),
    Peer("modwsgi", "mod_wsgi daemon", "modwsgi", "wsgi", "",
         ({"processes": 2, "threads": 8}, {"processes": 1, "threads": 16},
          {"processes": 4, "threads": 4}, {"processes": 8, "threads": 2})),
)}


def settings_text(settings):
    """How the settings read beside a figure: "workers=4 threads=2", or "defaults"."""
    if not settings:
        return "defaults"
    return " ".join("%s=%s" % (k, v) for k, v in settings.items() if k != "worker_class")


def _flupfast_args(settings):
    args = []
    for key in ("max_children", "max_threads", "min_spare", "max_spare"):
        if key in settings:
            args += ["--" + key.replace("_", "-"), str(settings[key])]
    return args


def make_server(peer, settings, app, workdir, tcp, uwsgi_binary=None, kind="compiled",
                env=None):
    """The server object for ``peer`` with ``settings`` serving ``app`` (module:callable), on
    TCP loopback (``tcp``: behind Apache) or a Unix socket; ``kind``: flupfast's backend."""
    fam = peer.family
    if fam in ("flupfast", "flup"):
        extra = _flupfast_args(settings) if fam == "flupfast" else []
        if peer.protocol == "ajp" and fam == "flupfast":
            extra += ["--ajp-packet-size", "65536"]   # Apache's ProxyIOBufferSize
        srv = Server(kind if fam == "flupfast" else "flup", peer.mode, app, workdir, env,
                     protocol=peer.protocol, tcp=tcp or peer.protocol == "ajp",
                     log_level="WARNING", extra_args=extra)
        srv.settings = dict(settings)
        return srv
    if fam == "uwsgi":
        return UWSGIServer("uwsgi", peer.mode, app, workdir, env, protocol=peer.protocol,
                           tcp=tcp, binary=uwsgi_binary, settings=settings)
    if fam == "uwsgi-http":
        return UWSGIHTTPServer("uwsgi", app, workdir, settings, tcp=tcp, env_extra=env,
                               binary=uwsgi_binary)
    if fam == "gunicorn":
        return GunicornServer("gunicorn", app, workdir, settings, tcp=tcp, env_extra=env,
                              protocol=peer.protocol)
    if fam == "modwsgi":
        return ModWsgiDaemon(app, settings)
    raise ValueError("unknown peer family %r" % fam)
