"""Instructions per hello request (bench/drivers/callgrind.py counts them) for each server
kind and protocol, log level WARNING for everybody (flup's SCGI/AJP would log one INFO line
per request):

  FastCGI  N requests on one kept connection (FCGI_KEEP_CONN), as nginx with keepalive
  SCGI     N sequential connections (SCGI has one request per connection)
  AJP13    N requests on one persistent connection, as mod_proxy_ajp
"""
import threading

from bench.base import log
from bench.drivers.callgrind import VALGRIND, count_instructions, per_request
from bench.servers import KIND_LABEL


PROTOCOLS = ("fcgi", "scgi", "ajp")


PROTO_LABEL = {"fcgi": "FastCGI, one kept connection (KEEP_CONN)",
               "scgi": "SCGI, one connection per request",
               "ajp": "AJP13, one persistent connection"}


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
        client.hello_request(proto)   # the request file, written before the threads use it
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
