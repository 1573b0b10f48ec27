"""Instructions a server executes, counted by ``valgrind --tool=callgrind``.

Wall-clock numbers on a shared 2-core machine move by up to 2x from one round to the next;
the number of instructions a server executes for a request does not. A server runs in thread
mode under callgrind (all threads counted together, PYTHONHASHSEED fixed) while the load
client sends N hello requests, then it is stopped with SIGTERM and callgrind writes its
total. The same is done with 2N requests; (total(2N) - total(N)) / N is the cost of one
request with the start-up, the first request and the shutdown subtracted (``per_request``).
Which protocols and connections are counted is scenarios/instructions.py's.
"""
import contextlib
import os
import re
import shutil

from bench.servers.server import Server

VALGRIND = shutil.which("valgrind")
_TOTAL = re.compile(rb"^(?:summary|totals):\s+(\d+)", re.M)


class CallgrindServer(Server):
    """A bench server whose command runs under callgrind; slow to start and to stop."""

    def __init__(self, *args, out_file, **kw):
        super().__init__(*args, **kw)
        self.out_file = out_file
        self.start_timeout = 180.0
        self.stop_grace = 60.0   # SIGKILL would lose callgrind's output

    def command(self):
        return [VALGRIND, "--tool=callgrind", "--callgrind-out-file=" + self.out_file,
                "--dump-line=no", "--compress-strings=no"] + super().command()

    def env(self):
        env = super().env()
        env["PYTHONHASHSEED"] = "0"
        return env


def count_instructions(kind, proto, requests, client, workdir):
    """{"instructions": total, "requests": served} for one server life, or {"error"}."""
    out_file = os.path.join(workdir, "callgrind-%s-%s-%d.out" % (kind, proto, requests))
    srv = CallgrindServer(kind, "thread", "bench.apps:hello", workdir, protocol=proto,
                          tcp=proto == "ajp", log_level="WARNING", out_file=out_file)
    try:
        if not srv.start(client):
            return {"error": "server did not start under valgrind: %s" % srv.error}
        res = client.run(srv.address, "hello", conns=1, keep=proto == "fcgi", count=requests,
                         proto=proto, deadline=max(120.0, requests * 0.5))
        served = res.get("requests", 0)
        if served != requests or res.get("errors") or res.get("bad_status"):
            return {"error": "%d of %d requests answered: %s" % (
                served, requests, res.get("error") or res.get("first_error") or
                res.get("first_bad_status"))}
        if srv.proc.poll() is not None:
            return {"error": "died mid-run (exit status %s): %s" % (srv.proc.returncode,
                                                                    srv.log_tail())}
    finally:
        srv.stop()
    if srv.notes:
        return {"error": "; ".join(srv.notes)}
    try:
        with open(out_file, "rb") as f:
            data = f.read()
    except OSError as exc:
        return {"error": "no callgrind output: %s" % exc}
    finally:
        with contextlib.suppress(OSError):
            os.unlink(out_file)
    m = _TOTAL.search(data)
    if not m:
        return {"error": "no total in callgrind output"}
    return {"instructions": int(m.group(1)), "requests": requests}


def per_request(one, two):
    """Instructions per request from a run with N and one with 2N requests."""
    for r in (one, two):
        if "error" in r:
            return r
    n = one["requests"]
    diff = two["instructions"] - one["instructions"]
    return {"n": n, "instructions_n": one["instructions"],
            "instructions_2n": two["instructions"],
            "per_request": round(diff / n),
            "startup_and_shutdown": one["instructions"] - diff}
