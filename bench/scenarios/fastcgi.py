"""The direct FastCGI parts (no front, Unix socket, fcgi_load): hello, the uploads
(read(65536), readline()), the download (flup also at the full size, capped) and the syscalls
per request, in that order, for each server kind."""
from bench.base import MIB, log
from bench.scenarios.hello import bench_hello
from bench.scenarios.syscalls import syscalls_per_kind
from bench.scenarios.transfers import bench_download, bench_upload
from bench.servers import KIND_LABEL


def run_fastcgi(only, kinds, client, workdir, cfg, results, strace):
    """The parts of ``only`` among hello, upload, download and syscalls (these need
    ``strace``) into ``results``."""
    if "hello" in only:
        log("hello world, %d connections, %d round(s) of %.1f s" % (
            cfg.conns, cfg.rounds, cfg.duration))
        bench_hello(kinds, cfg.modes, client, workdir, cfg, results)
    tr = results.setdefault("transfers", {})
    if "upload" in only:
        for mode_name in ("read65536", "readline"):
            for kind in kinds:
                log("upload %d MiB, %s, %s" % (cfg.upload_size // MIB, mode_name,
                                               KIND_LABEL[kind]))
                r = bench_upload(kind, mode_name, client, workdir, cfg)
                tr.setdefault(kind, {})["upload_" + mode_name] = r
                log("    %s s, %s MiB/s, peak RSS +%s MiB %s" % (
                    r.get("seconds"), r.get("mib_per_s"), r.get("peak_above_idle_mib"),
                    r.get("error") or ""))
            client.drop("upload-%s-%d" % (mode_name, cfg.upload_size))
            client.drop("upload-%s-%d-sha" % (mode_name, cfg.upload_size))
    if "download" in only:
        for kind in kinds:
            size = cfg.flup_download_size if kind == "flup" else cfg.download_size
            log("download %d MiB, %s" % (size // MIB, KIND_LABEL[kind]))
            # flup's download is quadratic in the body size: one run of it is enough.
            runs = 1 if kind == "flup" else cfg.transfer_runs
            r = bench_download(kind, client, workdir, size, runs, cfg.transfer_timeout)
            tr.setdefault(kind, {})["download"] = r
            log("    %s s, %s MiB/s, peak RSS +%s MiB %s" % (
                r.get("seconds"), r.get("mib_per_s"), r.get("peak_above_idle_mib"),
                r.get("error") or ""))
            if kind == "flup" and not cfg.quick and size != cfg.download_size:
                log("download %d MiB, flup, capped at %.0f s" % (
                    cfg.download_size // MIB, cfg.flup_full_download_timeout))
                r = bench_download(kind, client, workdir, cfg.download_size, 1,
                                   cfg.flup_full_download_timeout)
                tr[kind]["download_full"] = r
                log("    %s" % (r.get("seconds") or "> %.0f s (timeout)" %
                                cfg.flup_full_download_timeout))
    if "syscalls" in only and strace:
        syscalls_per_kind(results.setdefault("syscalls", {}),
                          "syscalls per request (strace -c -f)", kinds, client, workdir, cfg)
        if "fork" in cfg.modes:
            syscalls_per_kind(results.setdefault("syscalls_fork_new_connection", {}),
                              "syscalls per request, fork mode, new connections", kinds,
                              client, workdir, cfg, mode="fork", keep=False, count=1000)
