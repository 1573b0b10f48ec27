"""What every front shares: started in the foreground from its config and waited for until
its ports listen (bounded), its log's tail, and the stop by PID (SIGTERM, then SIGKILL, then
the children that outlived it). The configs are nginx.py's and apache.py's."""
import contextlib
import os
import subprocess
import time

from bench.base import START_TIMEOUT, STOP_GRACE, connect
from bench.procs import terminate


class Front:
    """A web server process; ``name`` is its name in messages, ``root`` its directory,
    ``log_dir`` where stdout.log and error.log are, ``ports`` what it listens on."""

    name = "front"

    def __init__(self, root, log_dir):
        self.root, self.log_dir = root, log_dir
        self.ports = {}
        self.proc = None
        self.error = None
        self.notes = []

    def _start(self, cmd, wait_ports, env=None):
        """Start ``cmd``; True once every port of ``wait_ports`` accepts a connection."""
        self._log = open(os.path.join(self.log_dir, "stdout.log"), "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True, env=env)
        deadline = time.monotonic() + START_TIMEOUT
        pending = set(wait_ports)
        while pending and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.error = "%s exited with %s: %s" % (self.name, self.proc.returncode,
                                                        self.log_tail())
                return False
            for port in list(pending):
                with contextlib.suppress(OSError):
                    connect("127.0.0.1:%d" % port)
                    pending.discard(port)
            if pending:
                time.sleep(0.05)
        if pending:
            self.error = "%s did not listen within %.0f s" % (self.name, START_TIMEOUT)
            return False
        return True

    def log_tail(self, size=800):
        text = ""
        for name in ("stdout.log", "error.log"):
            with contextlib.suppress(OSError), open(os.path.join(self.log_dir, name),
                                                    "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - size))
                text += f.read().decode("utf-8", "replace").strip() + " "
        return text.strip()

    def stop(self):
        """SIGTERM to the parent's PID (it stops its children), then SIGKILL by PID, the
        parent's and then any child's that outlived it (start time checked)."""
        if self.proc is None:
            return
        proc = self.proc
        if proc.poll() is None:
            terminate(proc, [3 * STOP_GRACE], self.notes, self.name + " ",
                      "%s process" % self.name)
        self._log.close()
        self.proc = None
