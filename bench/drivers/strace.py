"""strace -c -f attached to a server's processes while a load runs: the calls per syscall
name. It starts no server and sends no request itself."""
import contextlib

from bench.procs import while_attached


def count_syscalls(pids, out_path, run):
    """strace -c -f on ``pids`` (its summary to ``out_path``) while ``run()`` runs ->
    (what ``run`` returned, {syscall: calls}); the calls are None when strace did not
    detach."""
    cmd = ["strace", "-c", "-f", "-o", out_path]
    for pid in pids:
        cmd += ["-p", str(pid)]
    res, ended = while_attached(cmd, run, attach=1.0, settle=0.2)
    if not ended:
        return res, None
    calls = {}
    with open(out_path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and parts[0].replace(".", "").isdigit() and \
                    parts[-1] not in ("total",):
                name = parts[-1]
                with contextlib.suppress(ValueError):
                    calls[name] = int(parts[3])
    return res, calls
