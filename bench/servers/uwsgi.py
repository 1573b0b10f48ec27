"""uWSGI as a server under test (the fronts' peer): where its binary is, and its command line
(FastCGI or SCGI socket, thread or fork mode); start and stop are servers.server's."""
import os
import shutil
import sys

from bench.base import ROOT
from bench.servers.server import Server

UWSGI_WORKERS = 16


def find_uwsgi():
    """The uwsgi binary: $FLUPFAST_BENCH_UWSGI, PATH, or next to this Python."""
    for cand in (os.environ.get("FLUPFAST_BENCH_UWSGI"), shutil.which("uwsgi"),
                 os.path.join(os.path.dirname(sys.executable), "uwsgi")):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


class UWSGIServer(Server):
    """uWSGI with the bench app: master (stopped by SIGTERM thanks to --die-on-term), no
    request log; thread mode is 1 process x 16 threads, fork mode 16 processes."""

    def __init__(self, *args, binary, **kw):
        super().__init__(*args, **kw)
        self.binary = binary

    def command(self):
        flag = {"fcgi": "--fastcgi-socket", "scgi": "--scgi-socket"}[self.protocol]
        workers = ["--processes", "1", "--threads", str(UWSGI_WORKERS)] \
            if self.mode == "thread" else ["--processes", str(UWSGI_WORKERS)]
        return [self.binary, "--master", "--die-on-term", "--need-app", "--disable-logging",
                "--pythonpath", str(ROOT), "--module", self.app, flag, self.sock_path,
                "--listen", "100", "--buffer-size", "32768"] + workers
