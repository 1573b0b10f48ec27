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
import glob
import os
import re
import shutil
import subprocess

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


def under_callgrind(server_class):
    """``server_class`` (any bench Server) run under callgrind with one output file per
    process (``out_file`` should hold ``%p``: forked children get their own), instructions
    not per line, so that ``zero``/``dump`` can count a window of requests."""
    class Traced(server_class):
        def __init__(self, *args, out_file, **kw):
            super().__init__(*args, **kw)
            self.out_file = out_file
            self.start_timeout = 180.0
            self.stop_grace = 60.0

        def command(self):
            return [VALGRIND, "--tool=callgrind", "--callgrind-out-file=" + self.out_file,
                    "--dump-instr=no", "--dump-line=no", "--compress-strings=no"] + \
                super().command()

        def env(self):
            env = super().env()
            env["PYTHONHASHSEED"] = "0"
            return env
    Traced.__name__ = "Callgrind" + server_class.__name__
    return Traced


def control(pids, option):
    """``callgrind_control -z`` (zero) or ``-d`` (dump) for each of ``pids``; the pids that
    were not callgrind tasks (valgrind's own helpers) are skipped."""
    done = []
    for pid in pids:
        out = subprocess.run(["callgrind_control", option, str(pid)], capture_output=True,
                             timeout=120)
        if out.returncode == 0 and b"not detected" not in out.stdout + out.stderr:
            done.append(pid)
    return done


def dumped_files(out_pattern):
    """The files ``-d`` wrote (``OUT.PID.N``; the final ``OUT.PID`` at exit is not one)."""
    return sorted(f for f in glob.glob(out_pattern.replace("%p", "*") + ".*")
                  if re.search(r"\.\d+\.\d+$", f))


def file_total(path):
    with open(path, "rb") as f:
        m = _TOTAL.search(f.read())
    return int(m.group(1)) if m else 0


_ANNOTATED = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\*\s+)?(.+?)\s*$")


def _short(name):
    """``/long/path/file.c:func [/lib/dir/obj.so]`` -> ``file.c:func [obj.so]``."""
    name = re.sub(r"^\S*/([^/\s]+:)", r"\1", name)
    return re.sub(r"\[\S*/([^/\]]+)\]", r"[\1]", name)


def final_files(out_pattern):
    """The files written at exit, one per process (``OUT.PID``)."""
    return sorted(f for f in glob.glob(out_pattern.replace("%p", "*"))
                  if re.search(r"\.\d+$", f))


def top_functions(paths, inclusive=True, limit=40):
    """[(instructions, function)] from callgrind_annotate of each of ``paths``, summed by
    function (callgrind_annotate reads one file at a time)."""
    found = {}
    for path in paths:
        cmd = ["callgrind_annotate", "--inclusive=%s" % ("yes" if inclusive else "no"),
               "--threshold=100", "--auto=no", path]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
        for line in out.splitlines():
            m = _ANNOTATED.match(line)
            if m and not m.group(3).startswith("PROGRAM TOTALS"):
                name = _short(m.group(3))
                found[name] = found.get(name, 0) + int(m.group(1).replace(",", ""))
    rows = sorted(((v, k) for k, v in found.items()), reverse=True)
    return rows if limit is None else rows[:limit]
