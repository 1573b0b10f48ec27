"""perf stat attached to a server's processes while a load runs: kernel event counts (futex
calls, all syscalls, context switches) without strace's slowdown, which changes how threads
contend. It starts no server and sends no request itself."""
import signal
import subprocess
import time

# futex calls, every syscall, and the scheduler's switches of the traced threads.
EVENTS = ("syscalls:sys_enter_futex", "raw_syscalls:sys_enter", "context-switches")


def count_events(pids, out_path, run, events=EVENTS):
    """``perf stat`` on every thread of ``pids`` while ``run()`` runs -> (what ``run``
    returned, {event: count}); the counts are None when perf failed (no tracepoints here)."""
    cmd = ["perf", "stat", "-x", ",", "-o", out_path, "-e", ",".join(events),
           "-p", ",".join(str(pid) for pid in pids)]
    try:
        tracer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return run(), None
    time.sleep(0.5)  # attach
    res = run()
    tracer.send_signal(signal.SIGINT)
    try:
        tracer.wait(15)
    except subprocess.TimeoutExpired:
        tracer.kill()
        tracer.wait(5)
        return res, None
    counts = {}
    with open(out_path) as f:
        for line in f:
            parts = line.strip().split(",")
            if len(parts) >= 3 and parts[2] in events and parts[0].isdigit():
                counts[parts[2]] = int(parts[0])
    return res, counts or None
