"""The AJP13 part. The servers listen on TCP loopback (flup's AJP cannot listen on a Unix
socket, and Nagle's algorithm only exists on TCP: it is what makes flup slow,
compat/known_differences.py 'ajp-upload-speed').
(a) Direct: fcgi_load -P ajp plays the web server on 16 persistent connections: hello
requests/s, and a read(65536) upload in 8 KiB packets (mod_proxy_ajp's default) and in 64 KiB
packets (ProxyIOBufferSize 65536; flupfast started with --ajp-packet-size 65536). flup takes
one Nagle + delayed-ACK round trip (~40 ms) per body packet, so its upload is measured at a
smaller size and the 100 MiB time is extrapolated linearly (marked as such).
(b) Through a real Apache (bench/fronts/apache.py), run as root: hello with ``ab`` (16
concurrent HTTP/1.0 clients), and a POST upload of 100 MiB from a Python client (one sendall;
the time is Apache's and the backend's).
"""
import os
import socket

from bench import apps
from bench.base import MIB, log
from bench.drivers.ab import AB_PATH, run_ab
from bench.drivers.http import http_request
from bench.fronts.apache import APACHE, Apache
from bench.procs import RSSSampler, tree_cpu_seconds
from bench.scenarios.hello import hello_matrix
from bench.scenarios.syscalls import bench_syscalls
from bench.scenarios.transfers import bench_upload, check_upload_answer
from bench.servers import KIND_LABEL
from bench.servers.server import Server


def _ajp_upload(kind, client, workdir, cfg, packet_size, size, runs, timeout):
    opts = {"tcp": True, "log_level": "INFO"}
    if packet_size != 8192:
        opts["extra_args"] = ["--ajp-packet-size", str(packet_size)]
    r = bench_upload(kind, "read65536", client, workdir, cfg, proto="ajp", size=size,
                     runs=runs, timeout=timeout, server_opts=opts,
                     request_opts={"packet_size": packet_size})
    r["packet_size"] = packet_size
    if r.get("seconds") and size != cfg.upload_size:
        r["extrapolated_seconds"] = round(r["seconds"] * cfg.upload_size / size, 2)
    return r


def run_ajp(kinds, client, workdir, cfg, results, strace):
    res = results.setdefault("ajp", {})
    log("AJP hello world, direct over TCP loopback, %d persistent connections, log levels %s"
        % (cfg.conns, ",".join(cfg.proto_levels)))
    res["hello"] = hello_matrix("ajp", kinds, cfg.modes, cfg.proto_levels, client, workdir,
                                cfg, tcp=True)
    tr = res.setdefault("transfers", {})
    for packet_size in (8192, 65536):
        cap = int(cfg.flup_ajp_upload_mib[packet_size] * MIB)
        for kind in kinds:
            size = min(cap, cfg.upload_size) if kind == "flup" else cfg.upload_size
            runs = 1 if kind == "flup" else cfg.transfer_runs
            log("AJP upload %g MiB in %d-byte packets, read(65536), %s" % (
                size / MIB, packet_size, KIND_LABEL[kind]))
            r = _ajp_upload(kind, client, workdir, cfg, packet_size, size, runs,
                            cfg.flup_ajp_timeout if kind == "flup" else cfg.transfer_timeout)
            tr.setdefault(kind, {})["upload_%d" % packet_size] = r
            log("    %s s%s, peak RSS +%s MiB %s" % (
                r.get("seconds"), " (100 MiB extrapolated: %s s)" % r["extrapolated_seconds"]
                if r.get("extrapolated_seconds") else "", r.get("peak_above_idle_mib"),
                r.get("error") or r.get("invalid") or ""))
            client.drop_requests("ajp")
    if os.path.exists(APACHE) and os.path.exists(AB_PATH) and os.geteuid() == 0:
        res["apache"] = run_apache(kinds, client, workdir, cfg)
    else:
        results["notes"].append("AJP through Apache skipped: needs %s, %s and root" % (
            APACHE, AB_PATH))
    if strace and not cfg.quick:
        sc = res.setdefault("syscalls", {})
        for kind in kinds:
            count = cfg.flup_ajp_syscall_requests if kind == "flup" else 2000
            log("AJP syscalls per request (strace -c -f, thread mode, one persistent "
                "connection, %d requests), %s" % (count, KIND_LABEL[kind]))
            sc[kind] = bench_syscalls(kind, client, workdir, cfg, mode="thread", keep=True,
                                      count=count, proto="ajp",
                                      server_opts={"tcp": True, "log_level": "WARNING"})
            log("    %s" % sc[kind])


def run_apache(kinds, client, workdir, cfg):
    """Hello through Apache with ab -k, and a 100 MiB POST, per backend kind."""
    out = {"levels": {}}
    backends = {}
    try:
        for level in cfg.proto_levels:
            for kind in kinds:
                srv = Server(kind, "thread", "bench.apps:app", workdir, protocol="ajp", tcp=True,
                             log_level=level, extra_args=["--ajp-packet-size", "65536"])
                log("  starting %s ajp (thread mode, log level %s) behind Apache" % (
                    KIND_LABEL[kind], level))
                if srv.start(client):
                    backends[level, kind] = srv
                else:
                    out["levels"].setdefault(level, {})[kind] = {"error": srv.error}
                    log("    FAILED: %s" % srv.error)
                    srv.stop()
        apache = Apache(workdir, {key: srv.port for key, srv in backends.items()},
                        max(cfg.flup_ajp_timeout, cfg.transfer_timeout) + 30)
        log("  starting apache2 (mod_proxy_ajp, ProxyIOBufferSize 65536)")
        if not apache.start():
            out["error"] = apache.error
            log("    FAILED: %s" % apache.error)
            apache.stop()
            return out
        try:
            _apache_scenarios(kinds, backends, apache, cfg, out)
        finally:
            # flup's backends first (Apache's children otherwise outlive SIGTERM), then
            # Apache, which closes its pooled AJP connections (a flupfast AJP server with an
            # idle persistent connection takes 5 s to exit on SIGTERM), then the rest.
            _stop_backends({k: v for k, v in backends.items() if k[1] == "flup"}, out)
            apache.stop()
            if apache.notes:
                out["stop_notes"] = apache.notes
    finally:
        _stop_backends(backends, out)
    return out


def _stop_backends(backends, out):
    for key, srv in backends.items():
        if srv.proc is not None and srv.proc.poll() is not None:
            out["levels"].setdefault(key[0], {}).setdefault(key[1], {})["crashed"] = \
                "exited with %s: %s" % (srv.proc.returncode, srv.log_tail())
        srv.stop()
        if srv.notes:
            out["levels"].setdefault(key[0], {}).setdefault(key[1], {})["stop_notes"] = \
                srv.notes


def _apache_scenarios(kinds, backends, apache, cfg, out):
    # Every backend answers one hello through Apache first (content checked).
    for key in backends:
        try:
            status, head, body, _ = http_request(apache.ports[key], "GET", "/", timeout=20)
        except OSError as exc:
            status, body = 0, repr(exc).encode()
        ok = status == 200 and body == apps.HELLO
        out["levels"].setdefault(key[0], {}).setdefault(key[1], {})["hello_check"] = \
            "ok" if ok else "status %d, body %r" % (status, body[:80])
    runs = {}
    for rnd in range(cfg.rounds):
        for key, srv in backends.items():
            if srv.proc.poll() is not None:
                continue
            port = apache.ports[key]
            run_ab(port, cfg.conns, 1, 30)  # warm-up (1 s): connections, pool
            pids = srv.pids()
            cpu0 = tree_cpu_seconds(pids)
            res = run_ab(port, cfg.conns, cfg.proto_duration, cfg.proto_duration + 30)
            cpu = tree_cpu_seconds(list(set(pids) | set(srv.pids()))) - cpu0
            if res.get("requests"):
                res["backend_cpu_us_per_request"] = round(cpu / res["requests"] * 1e6, 1)
            runs.setdefault(key, []).append(res)
            log("  round %d apache+ajp %-18s %-7s %8.0f req/s  failed %s  non-2xx %s  "
                "keep-alive %s/%s%s" % (rnd + 1, KIND_LABEL[key[1]], key[0], res.get("rps") or 0,
                                         res.get("failed"), res.get("non_2xx"),
                                         res.get("keepalive"), res.get("requests"),
                                         "  " + res["error"] if res.get("error") else ""))
    for key, rs in runs.items():
        ordered = sorted(rs, key=lambda r: r.get("rps") or 0)
        best = dict(ordered[len(ordered) // 2])
        best["rps_rounds"] = [r.get("rps") for r in rs]
        out["levels"][key[0]][key[1]]["hello"] = best
    # The upload: on the backends of the first level (INFO: as users run them).
    level = cfg.proto_levels[0]
    uploads = out.setdefault("upload", {"log_level": level})
    body_cache = {}
    for kind in kinds:
        srv = backends.get((level, kind))
        if srv is None or srv.proc.poll() is not None:
            uploads[kind] = {"error": "backend not running"}
            continue
        size = min(int(cfg.flup_apache_upload_mib * MIB), cfg.upload_size) if kind == "flup" \
            else cfg.upload_size
        runs_n = 1 if kind == "flup" else cfg.transfer_runs
        if size not in body_cache:
            body_cache.clear()
            body_cache[size] = (apps.pattern_bytes(size), apps.pattern_sha256(size))
        body, expect = body_cache[size]
        timeout = cfg.flup_ajp_timeout if kind == "flup" else cfg.transfer_timeout
        log("AJP upload %g MiB via Apache (HTTP POST, ProxyIOBufferSize 65536), read(65536), "
            "%s" % (size / MIB, KIND_LABEL[kind]))
        r = {"size_mib": size / MIB, "runs": []}
        with RSSSampler(srv.proc.pid) as sampler:
            for i in range(runs_n):
                check = "sha256" if i == runs_n - 1 else "len"
                one = {"check_mode": check}
                try:
                    status, head, answer, secs = http_request(
                        apache.ports[level, kind], "POST",
                        "/upload?mode=read65536&check=%s" % check, body, timeout=timeout)
                except OSError as exc:  # socket.timeout included
                    one["error"] = "%s after %.0f s" % (type(exc).__name__, timeout) \
                        if isinstance(exc, socket.timeout) else repr(exc)
                    if isinstance(exc, socket.timeout):
                        r["timed_out_after"] = timeout
                    r["runs"].append(one)
                    break
                one["seconds"] = round(secs, 4)
                one["status"] = status
                one["check"] = check_upload_answer(status, answer, size, check, expect)
                r["runs"].append(one)
        r.update(sampler.as_dict())
        good = [x for x in r["runs"] if x.get("check") == "ok"]
        timed = [x for x in good if x["check_mode"] == "len"] or good
        if timed:
            secs = sorted(x["seconds"] for x in timed)
            r["seconds"] = secs[len(secs) // 2]
            r["best_seconds"] = secs[0]
            r["seconds_runs"] = [x["seconds"] for x in timed]
            r["mib_per_s"] = round(size / MIB / r["seconds"], 1)
            r["checked"] = r["runs"][-1].get("check") == "ok" and \
                r["runs"][-1]["check_mode"] == "sha256"
            if size != cfg.upload_size:
                r["extrapolated_seconds"] = round(r["seconds"] * cfg.upload_size / size, 2)
        else:
            r["error"] = (r["runs"][-1].get("error") or r["runs"][-1].get("check")) \
                if r["runs"] else "no run"
        uploads[kind] = r
        log("    %s s%s, peak RSS +%s MiB %s" % (
            r.get("seconds"), " (100 MiB extrapolated: %s s)" % r["extrapolated_seconds"]
            if r.get("extrapolated_seconds") else "", r.get("peak_above_idle_mib"),
            r.get("error") or ""))
    body_cache.clear()
