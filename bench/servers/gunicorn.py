"""gunicorn (the current release from PyPI) as a server under test: its command line, sync or
gthread workers, the counts the sweep tries (bench/servers/peers.py). Behind nginx
``proxy_pass`` (or ``uwsgi_pass``: ``--protocol uwsgi``) or Apache mod_proxy_http; start and
stop are servers.server's."""
import importlib.util
import sys

from bench.servers.http_server import HTTPServer


def gunicorn_installed():
    return importlib.util.find_spec("gunicorn") is not None


def gunicorn_command(app, bind, worker_class, workers, threads=1, protocol="http"):
    """The command line: no access log, log level warning, no control socket (gunicorn 24+
    would create one in the working directory), the default backlog (2048); ``protocol``
    uwsgi for nginx ``uwsgi_pass`` (gunicorn 24+)."""
    cmd = [sys.executable, "-m", "gunicorn", "--bind", bind, "--workers", str(workers),
           "--worker-class", worker_class, "--log-level", "warning", "--no-control-socket"]
    if protocol != "http":
        cmd += ["--protocol", protocol]
    if worker_class == "gthread":
        cmd += ["--threads", str(threads)]
    return cmd + [app]


class GunicornServer(HTTPServer):
    """gunicorn with ``settings`` {"worker_class": sync|gthread, "workers": N, "threads": T}."""

    def command(self):
        s = self.settings
        return gunicorn_command(self.app, self.bind("unix:"), s.get("worker_class", "sync"),
                                s.get("workers", 1), s.get("threads", 1), self.protocol)
