"""Instructions per hello request, counted by ``valgrind --tool=callgrind`` (called by
bench/run.py; bench/README.md explains the numbers).

Wall-clock numbers on a shared 2-core machine move by up to 2x from one round to the next;
the number of instructions a server executes for a request does not. For each server kind
(flup 1.0.3, flupfast pure, flupfast compiled) and protocol, the server runs in thread mode
under callgrind (all threads counted together, PYTHONHASHSEED fixed) and the load client
sends N hello requests, then the server is stopped with SIGTERM and callgrind writes its
total. The same is done with 2N requests; (total(2N) - total(N)) / N is the cost of one
request with the start-up, the first request and the shutdown subtracted:

  FastCGI  N requests on one kept connection (FCGI_KEEP_CONN), as nginx with keepalive
  SCGI     N sequential connections (SCGI has one request per connection)
  AJP13    N requests on one persistent connection, as mod_proxy_ajp

Log level WARNING for everybody (flup's SCGI/AJP would log one INFO line per request).
"""
import contextlib
import os
import re
import shutil
import threading

from bench import protocols
from bench.run import KIND_LABEL, Server, log

VALGRIND = shutil.which("valgrind")
PROTOCOLS = ("fcgi", "scgi", "ajp")
PROTO_LABEL = {"fcgi": "FastCGI, one kept connection (KEEP_CONN)",
               "scgi": "SCGI, one connection per request",
               "ajp": "AJP13, one persistent connection"}
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


def run_callgrind(kinds, protocols_, n, client, workdir, results):
    """Fill results["callgrind"][proto][kind]; a missing valgrind is said per row. The runs
    of one protocol (each kind, N and 2N) go at once: valgrind runs each on one core, the
    counts do not depend on the clock, and the start-up under valgrind is what takes time."""
    out = results.setdefault("callgrind", {"n": n})
    for proto in protocols_:
        row = out.setdefault(proto, {})
        if not VALGRIND:
            for kind in kinds:
                row[kind] = {"error": "not run: valgrind is not installed "
                                      "(apt-get install valgrind)"}
            continue
        log("callgrind, %s: %s, N=%d and 2N, all at once" % (
            PROTO_LABEL[proto], ", ".join(KIND_LABEL[k] for k in kinds), n))
        if proto == "fcgi":   # the request file, written before the threads use it
            client.request("hello", "/")
        else:
            protocols.hello_request(client, proto)
        found = {}

        def one_run(kind, count):
            found[kind, count] = count_instructions(kind, proto, count, client, workdir)

        todo = list(kinds)
        for attempt in range(2):
            threads = [threading.Thread(target=one_run, args=(kind, count))
                       for kind in todo for count in (n, 2 * n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            # A start-up that cost more in one run than in the other (seen once in a dozen
            # runs on a loaded machine) shows as a count that does not grow with N: redo it.
            todo = [k for k in todo if per_request(found[k, n], found[k, 2 * n]).get(
                "per_request", 1) <= 0]
            if not todo:
                break
            log("    inconsistent counts (2N <= N) for %s: %s" % (
                ", ".join(todo), "measured again" if attempt == 0 else "given up"))
        for kind in kinds:
            r = row[kind] = per_request(found[kind, n], found[kind, 2 * n])
            if r.get("per_request", 1) <= 0:
                r = row[kind] = {"error": "inconsistent counts twice: %d instructions for N, "
                                          "%d for 2N" % (r["instructions_n"],
                                                         r["instructions_2n"])}
            log("    %-18s %s" % (KIND_LABEL[kind], ("%d instructions per request"
                                                     % r["per_request"])
                                  if "per_request" in r else r["error"]))
    return out


def render_section(results, kinds):
    """Markdown lines for the instruction-count table."""
    cg = results.get("callgrind")
    if not cg:
        return []
    others = [k for k in kinds if k != "flup"]
    head = ["instructions per hello request (callgrind)"] + [KIND_LABEL[k] for k in kinds] + \
        ["%s vs flup" % KIND_LABEL[k].replace("flupfast ", "") for k in others]
    lines = ["## Instructions per request (callgrind, N = %d and 2N, thread mode)" % cg["n"],
             "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for proto in PROTOCOLS:
        row = cg.get(proto)
        if not row:
            continue
        cells = [PROTO_LABEL[proto]]
        for kind in kinds:
            r = row.get(kind, {})
            cells.append("{:,}".format(r["per_request"]) if "per_request" in r else
                         ("not run" if not r else str(r.get("error", "?"))[:80]))
        for kind in others:
            a = row.get(kind, {}).get("per_request")
            b = row.get("flup", {}).get("per_request")
            cells.append("%.2fx fewer" % (b / a) if a and b else "")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Start-up and shutdown subtracted (runs of N and 2N requests); lower is "
              "better; \"x fewer\" is flup's count divided by flupfast's.", ""]
    return lines
