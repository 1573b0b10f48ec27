"""The direct SCGI part (Unix socket, fcgi_load -P scgi): hello requests/s in thread and fork
mode (16 concurrent connections, one request per connection, as SCGI is) per log level, the
100 MiB uploads (read(65536), readline()) and download with time and peak server RSS, and in
the full run the syscalls per request."""
from bench.base import MIB, log
from bench.scenarios.hello import hello_matrix
from bench.scenarios.syscalls import syscalls_per_kind
from bench.scenarios.transfers import bench_download, bench_upload
from bench.servers import KIND_LABEL


def run_scgi(kinds, client, workdir, cfg, results, strace):
    res = results.setdefault("scgi", {})
    log("SCGI hello world, %d connections (one request each), log levels %s" % (
        cfg.conns, ",".join(cfg.proto_levels)))
    res["hello"] = hello_matrix("scgi", kinds, cfg.modes, cfg.proto_levels, client, workdir,
                                cfg, tcp=False)
    tr = res.setdefault("transfers", {})
    opts = {"log_level": "INFO"}
    for mode_name in ("read65536", "readline"):
        for kind in kinds:
            log("SCGI upload %d MiB, %s, %s" % (cfg.upload_size // MIB, mode_name,
                                               KIND_LABEL[kind]))
            r = bench_upload(kind, mode_name, client, workdir, cfg, proto="scgi",
                             server_opts=opts)
            tr.setdefault(kind, {})["upload_" + mode_name] = r
            log("    %s s, %s MiB/s, peak RSS +%s MiB %s" % (
                r.get("seconds"), r.get("mib_per_s"), r.get("peak_above_idle_mib"),
                r.get("error") or r.get("invalid") or ""))
        client.drop_requests("scgi")
    for kind in kinds:
        log("SCGI download %d MiB, %s" % (cfg.download_size // MIB, KIND_LABEL[kind]))
        r = bench_download(kind, client, workdir, cfg.download_size, cfg.transfer_runs,
                           cfg.transfer_timeout, proto="scgi", server_opts=opts)
        tr.setdefault(kind, {})["download"] = r
        log("    %s s, %s MiB/s, peak RSS +%s MiB %s" % (
            r.get("seconds"), r.get("mib_per_s"), r.get("peak_above_idle_mib"),
            r.get("error") or ""))
    if strace and not cfg.quick:
        opts = {"keep": False, "count": 1000, "proto": "scgi",
                "server_opts": {"log_level": "WARNING"}}
        syscalls_per_kind(res.setdefault("syscalls", {}), "SCGI syscalls per request (strace "
                          "-c -f, thread mode, 1000 sequential requests)", kinds, client,
                          workdir, cfg, mode="thread", **opts)
        if "fork" in cfg.modes:
            syscalls_per_kind(res.setdefault("syscalls_fork", {}), "SCGI syscalls per request, "
                              "fork mode (all processes)", kinds, client, workdir, cfg,
                              mode="fork", **opts)
