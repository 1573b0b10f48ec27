"""strace -c -f attached to a server's processes while a load runs: the calls per syscall
name. It starts no server and sends no request itself."""
import contextlib
import signal
import subprocess
import time


def count_syscalls(pids, out_path, run):
    """strace -c -f on ``pids`` (its summary to ``out_path``) while ``run()`` runs ->
    (what ``run`` returned, {syscall: calls}); the calls are None when strace did not
    detach."""
    cmd = ["strace", "-c", "-f", "-o", out_path]
    for pid in pids:
        cmd += ["-p", str(pid)]
    tracer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # attach
    res = run()
    time.sleep(0.2)
    tracer.send_signal(signal.SIGINT)
    try:
        tracer.wait(15)
    except subprocess.TimeoutExpired:
        tracer.kill()
        tracer.wait(5)
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
