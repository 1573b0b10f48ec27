"""perf stat attached to a server's processes while a load runs: kernel event counts (futex
calls, all syscalls, context switches) without strace's slowdown, which changes how threads
contend. It starts no server and sends no request itself."""
from bench.procs import while_attached

# futex calls, every syscall, and the scheduler's switches of the traced threads.
EVENTS = ("syscalls:sys_enter_futex", "raw_syscalls:sys_enter", "context-switches")


def count_events(pids, out_path, run, events=EVENTS):
    """``perf stat`` on every thread of ``pids`` while ``run()`` runs -> (what ``run``
    returned, {event: count}); the counts are None when perf failed (no tracepoints here)."""
    cmd = ["perf", "stat", "-x", ",", "-o", out_path, "-e", ",".join(events),
           "-p", ",".join(str(pid) for pid in pids)]
    res, ended = while_attached(cmd, run, attach=0.5)
    if not ended:
        return res, None
    counts = {}
    with open(out_path) as f:
        for line in f:
            parts = line.strip().split(",")
            if len(parts) >= 3 and parts[2] in events and parts[0].isdigit():
                counts[parts[2]] = int(parts[0])
    return res, counts or None
