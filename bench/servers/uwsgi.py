"""uWSGI as a server under test (the fronts' peer): where its binary is, and its command line
(FastCGI, SCGI or uwsgi socket, thread or fork mode; or its own ``--http-socket``, the
fastest way to put Python behind nginx); start and stop are servers.server's."""
import os
import shutil
import sys

from bench.base import ROOT
from bench.servers.http_server import HTTPServer
from bench.servers.server import Server

UWSGI_WORKERS = 16


def find_uwsgi():
    """The uwsgi binary: $FLUPFAST_BENCH_UWSGI, PATH, or next to this Python."""
    for cand in (os.environ.get("FLUPFAST_BENCH_UWSGI"), shutil.which("uwsgi"),
                 os.path.join(os.path.dirname(sys.executable), "uwsgi")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def uwsgi_command(binary, app, socket_flag, address, processes, threads=0):
    """master (stopped by SIGTERM thanks to --die-on-term), no request log, the app as
    module:callable, ``processes`` workers of ``threads`` threads (0: no threads)."""
    cmd = [binary, "--master", "--die-on-term", "--need-app", "--disable-logging",
           "--pythonpath", str(ROOT), "--module", app, socket_flag, address,
           "--listen", "100", "--buffer-size", "32768", "--processes", str(processes)]
    return cmd + (["--threads", str(threads)] if threads else [])


class UWSGIServer(Server):
    """uWSGI with the bench app over FastCGI, SCGI or its own uwsgi protocol: thread mode is 1 process x 16 threads,
    fork mode 16 processes, unless ``settings`` say otherwise."""

    def __init__(self, *args, binary, settings=None, **kw):
        super().__init__(*args, **kw)
        self.binary = binary
        self.settings = dict(settings or {})

    def command(self):
        flag = {"fcgi": "--fastcgi-socket", "scgi": "--scgi-socket",
                "uwsgi": "--uwsgi-socket"}[self.protocol]
        if self.mode == "thread":
            processes = self.settings.get("processes", 1)
            threads = self.settings.get("threads", UWSGI_WORKERS)
        else:
            processes = self.settings.get("processes", UWSGI_WORKERS)
            threads = self.settings.get("threads", 0)
        address = self.address if self.port else self.sock_path
        return uwsgi_command(self.binary, self.app, flag, address, processes, threads)


class UWSGIHTTPServer(HTTPServer):
    """uWSGI's own HTTP parser (``--http-socket``, not the ``--http`` router process) with
    ``settings`` {"processes": N, "threads": T}."""

    def __init__(self, *args, binary, **kw):
        super().__init__(*args, **kw)
        self.binary = binary

    def command(self):
        s = self.settings
        return uwsgi_command(self.binary, self.app, "--http-socket", self.bind(""),
                             s.get("processes", 1), s.get("threads", 0))
