"""The C load client, bench/fcgi_load.c: compiled into the run's work directory, run with a
deadline, given prebuilt request files (bench/wire.py writes them; this module caches them per
work directory). It speaks FastCGI, SCGI and AJP13 to a Unix socket or a loopback port."""
import contextlib
import json
import os
import re
import shutil
import subprocess

from bench import wire
from bench.base import BENCH, CLIENT_SLACK


class LoadClient:
    """Compiles bench/fcgi_load.c into ``workdir`` and runs it; requests are prebuilt files."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.binary = os.path.join(workdir, "fcgi_load")
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        subprocess.run([cc, "-O2", "-Wall", "-o", self.binary, str(BENCH / "fcgi_load.c")],
                       check=True, timeout=120)
        self.requests = {}

    def request(self, name, uri, body_size=0):
        """A FastCGI request file, cached under ``name``."""
        if name not in self.requests:
            path = os.path.join(self.workdir, name + ".req")
            self.requests[name] = wire.write_fcgi_request(path, uri, body_size)
        return self.requests[name]

    def request_file(self, proto, uri, body_size=0, packet_size=8192):
        """An SCGI, uwsgi or AJP13 request file (cached by its parameters)."""
        name = "%s-%s-%d-%d" % (proto, re.sub(r"[^A-Za-z0-9]+", "_", uri), body_size,
                                packet_size)
        if name not in self.requests:
            path = os.path.join(self.workdir, name + ".req")
            if proto == "scgi":
                wire.write_scgi_request(path, uri, body_size)
            elif proto == "uwsgi":
                wire.write_uwsgi_request(path, uri, body_size)
            else:
                wire.write_ajp_request(path, uri, body_size, packet_size)
            self.requests[name] = path
        return self.requests[name]

    def hello_request(self, proto):
        """The protocol's hello request file."""
        return self.request("hello", "/") if proto == "fcgi" else self.request_file(proto, "/")

    def drop(self, name):
        path = self.requests.pop(name, None)
        if path:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def drop_requests(self, proto):
        """Every SCGI or AJP13 request file of ``proto``."""
        for name in [n for n in self.requests if n.startswith(proto + "-")]:
            self.drop(name)

    def run(self, address, request, conns=1, keep=False, duration=None, warmup=0.0,
            count=None, deadline=60.0, save=None, save_hint=0, proto="fcgi"):
        """``address``: a Unix socket path or "HOST:PORT"; ``request``: a request file, or
        "hello" (the protocol's hello request)."""
        if request == "hello":
            request = self.hello_request(proto)
        cmd = [self.binary, "-P", proto, "-u" if address.startswith("/") else "-t", address,
               "-r", request, "-c", str(conns), "-T", "%.3f" % deadline]
        if keep:
            cmd.append("-k")
        if duration:
            cmd += ["-d", "%.3f" % duration, "-w", "%.3f" % warmup]
        else:
            cmd += ["-n", str(count or 1)]
        if save:
            cmd += ["-o", save, "-O", str(save_hint)]
        try:
            out = subprocess.run(cmd, capture_output=True, timeout=deadline + CLIENT_SLACK)
        except subprocess.TimeoutExpired:
            return {"requests": 0, "error": "fcgi_load did not finish", "timed_out": True}
        if out.returncode != 0:
            return {"requests": 0, "error": out.stderr.decode("utf-8", "replace").strip()}
        return json.loads(out.stdout)
