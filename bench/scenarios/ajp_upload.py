"""The AJP13 upload through Apache at mod_proxy_ajp's default 8 KiB packets (ProxyIOBufferSize
8192, flupfast at its default packetSize), the app reading read(65536): the measure of the
request body pipeline (flupfast/ajp_connection.py's _BodySource; the target is 100 MiB in
<= 0.3 s). The ``ajp`` part of ``python -m bench`` measures Apache at 64 KiB packets only.
Run on its own, as root (Apache's children run as www-data), one tree at a time:

    python -m bench.scenarios.ajp_upload [--kind compiled] [--mode thread] [--mib 100]
        [--runs 5] [--io-buffer 8192]

Prints one JSON line: each POST's seconds (the last checked by sha256, the others by length)
and their median. Alternate trees (base, new, base, new) and compare the medians.
"""
import argparse
import json
import os
import socket
import tempfile

from bench import apps
from bench.base import MIB, log
from bench.drivers.fcgi_load import LoadClient
from bench.drivers.http import http_request
from bench.fronts.apache import APACHE, Apache
from bench.scenarios.transfers import check_upload_answer
from bench.servers.server import Server

TIMEOUT = 120.0


def measure(kind, mode, size, runs, io_buffer, workdir):
    """{'seconds_runs', 'seconds' (median), 'checks'} or {'error'}."""
    client = LoadClient(workdir)
    srv = Server(kind, mode, "bench.apps:app", workdir, protocol="ajp", tcp=True,
                 log_level="WARNING",
                 extra_args=[] if io_buffer == 8192 else ["--ajp-packet-size", str(io_buffer)])
    if not srv.start(client):
        srv.stop()
        return {"error": srv.error}
    apache = Apache(workdir, {"ajp": srv.port}, TIMEOUT + 30, io_buffer=io_buffer)
    try:
        if not apache.start():
            return {"error": apache.error}
        body, expect = apps.pattern_bytes(size), apps.pattern_sha256(size)
        out = {"seconds_runs": [], "checks": []}
        for i in range(runs):
            check = "sha256" if i == runs - 1 else "len"
            try:
                status, _, answer, secs = http_request(
                    apache.ports["ajp"], "POST", "/upload?mode=read65536&check=%s" % check,
                    body, timeout=TIMEOUT)
            except (OSError, socket.timeout) as exc:
                out["error"] = repr(exc)
                break
            out["seconds_runs"].append(round(secs, 4))
            out["checks"].append(check_upload_answer(status, answer, size, check, expect))
        ordered = sorted(out["seconds_runs"])
        if ordered:
            out["seconds"] = ordered[len(ordered) // 2]
        return out
    finally:
        apache.stop()
        srv.stop()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", default="compiled", choices=("pure", "compiled"))
    parser.add_argument("--mode", default="thread", choices=("thread", "fork"))
    parser.add_argument("--mib", type=float, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--io-buffer", type=int, default=8192)
    args = parser.parse_args(argv)
    if not os.path.exists(APACHE) or os.geteuid() != 0:
        parser.error("needs %s and root" % APACHE)
    with tempfile.TemporaryDirectory(prefix="ajp-upload-") as workdir:
        log("AJP upload %g MiB via Apache (ProxyIOBufferSize %d), read(65536), %s, %s mode"
            % (args.mib, args.io_buffer, args.kind, args.mode))
        result = measure(args.kind, args.mode, int(args.mib * MIB), args.runs, args.io_buffer,
                         workdir)
    result.update(kind=args.kind, mode=args.mode, mib=args.mib, io_buffer=args.io_buffer)
    print(json.dumps(result))
    return 0 if "error" not in result and set(result["checks"]) == {"ok"} else 1


if __name__ == "__main__":
    raise SystemExit(main())
