"""What the bench reads in /proc: a server's process tree, its CPU time, and its memory sampled
while it works (RSS, and PSS for fork pools), and the SIGKILL of children that outlive their
parent. It starts nothing and knows no server, front or protocol."""
import contextlib
import os
import signal
import subprocess
import threading
import time

from bench.base import MIB, STOP_GRACE


def proc_status(pid):
    values = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    values[line[:5]] = int(line.split()[1]) * 1024
    except OSError:
        return None
    return values


def _stat_fields(pid):
    """The fields of /proc/PID/stat after the command name (which may hold spaces and
    parentheses: flupfast's process titles do), from ``state`` on; None if it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(")") + 2:].split()


def proc_stat(pid):
    """(ppid, utime+stime+cutime+cstime in clock ticks, starttime) or None."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return int(fields[1]), sum(int(x) for x in fields[11:15]), int(fields[19])


def process_tree(root):
    """``root`` and its descendants (no /proc/PID/task/*/children here: scan /proc)."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st:
                children.setdefault(st[0], []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def user_system_ticks(pid):
    """(utime, stime) of ``pid`` in clock ticks (its own, not its reaped children's), or None."""
    fields = _stat_fields(pid)
    return None if fields is None else (int(fields[11]), int(fields[12]))


def tree_cpu_seconds(pids):
    tick = os.sysconf("SC_CLK_TCK")
    return sum((proc_stat(p) or (0, 0, 0))[1] for p in pids) / tick


def tree_rss(pids):
    return sum((proc_status(p) or {}).get("VmRSS", 0) for p in pids)


class _Sampler:
    """A daemon thread running ``_run`` (which samples every ``interval`` seconds until
    ``_stop`` is set) between ``__enter__`` and ``__exit__``; ``_finish`` takes the last
    sample."""

    def __init__(self, interval, join_timeout):
        self.interval = interval
        self._join_timeout = join_timeout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(self._join_timeout)
        self._finish()
        return False


class RSSSampler(_Sampler):
    """Samples the summed VmRSS of a server's process tree every ``interval`` seconds and,
    for each process, VmHWM after resetting it (clear_refs 5), so a peak between two samples
    is still seen. ``peak_above_idle`` is the larger of the two estimates."""

    def __init__(self, root, interval=0.005):
        self.root = root
        self.pids = process_tree(root)
        self.idle = tree_rss(self.pids)
        self.idle_by_pid = {p: (proc_status(p) or {}).get("VmRSS", 0) for p in self.pids}
        self.peak = self.idle
        self.hwm_ok = True
        for pid in self.pids:
            try:
                with open("/proc/%d/clear_refs" % pid, "w") as f:
                    f.write("5")
            except OSError:
                self.hwm_ok = False
        super().__init__(interval, 2)

    def _run(self):
        tick = 0
        while not self._stop.is_set():
            if tick % 40 == 0:  # new prefork children
                self.pids = process_tree(self.root)
            tick += 1
            self.peak = max(self.peak, tree_rss(self.pids))
            self._stop.wait(self.interval)

    def _finish(self):
        self.peak = max(self.peak, tree_rss(self.pids))
        hwm_delta = 0
        if self.hwm_ok:
            for pid in self.pids:
                st = proc_status(pid) or {}
                base = self.idle_by_pid.get(pid, st.get("VmRSS", 0))
                hwm_delta = max(hwm_delta, st.get("VmHWM", 0) - base)
        self.hwm_delta = hwm_delta
        self.peak_above_idle = max(self.peak - self.idle, hwm_delta)

    def as_dict(self):
        return {"idle_rss_mib": round(self.idle / MIB, 1),
                "peak_rss_mib": round(max(self.peak, self.idle + self.hwm_delta) / MIB, 1),
                "peak_above_idle_mib": round(self.peak_above_idle / MIB, 1),
                "processes": len(self.pids)}


def _pss(pid):
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_pss(root):
    return sum(_pss(p) for p in process_tree(root))


class PSSSampler(_Sampler):
    """The PSS of a server's process tree, summed, every ``interval`` seconds: idle (at
    start) and peak."""

    def __init__(self, root, interval):
        self.root = root
        self.idle = self.peak = tree_pss(root)
        super().__init__(interval, 5)

    def _run(self):
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, tree_pss(self.root))

    def _finish(self):
        self.peak = max(self.peak, tree_pss(self.root))

    def as_dict(self):
        return {"idle_mib": round(self.idle / MIB, 1), "peak_mib": round(self.peak / MIB, 1),
                "peak_above_idle_mib": round((self.peak - self.idle) / MIB, 1),
                "processes": len(process_tree(self.root))}


def start_times(root):
    """{pid: start time} of ``root``'s tree, for ``kill_orphans`` after the root is gone."""
    return {p: (proc_stat(p) or (0, 0, None))[2] for p in process_tree(root)}


def kill_orphans(family, notes, label):
    """Processes of ``family`` ({pid: start time}) still alive after their parent went (or
    STOP_GRACE later): SIGKILL by PID, the start time checked so a reused PID is left alone;
    each noted in ``notes``."""
    end = time.monotonic() + STOP_GRACE
    for pid, started in family.items():
        while time.monotonic() < end and (proc_stat(pid) or (0, 0, None))[2] == started:
            time.sleep(0.05)
        if (proc_stat(pid) or (0, 0, None))[2] == started:
            notes.append("%s %d outlived its parent: SIGKILL" % (label, pid))
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def terminate(proc, waits, notes, who, orphans, poke=None):
    """Stop ``proc`` (running) and its children by PID: SIGTERM, then the seconds of ``waits``
    one after the other, ``poke()`` called between two; then SIGKILL, noted in ``notes``
    ("``who``did not exit ..."); then ``kill_orphans`` (``orphans``: their label)."""
    family = start_times(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    for i, wait in enumerate(waits):
        if i and poke:
            poke()
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            pass
    else:
        notes.append("%sdid not exit within %.0f s of SIGTERM: SIGKILL" % (who, sum(waits)))
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
    kill_orphans(family, notes, orphans)


def tree_ctxt_switches(pids):
    """(voluntary, involuntary) context switches of every thread of ``pids``, summed."""
    vol = invol = 0
    for pid in pids:
        try:
            tids = os.listdir("/proc/%d/task" % pid)
        except OSError:
            continue
        for tid in tids:
            try:
                with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                    for line in f:
                        if line.startswith("voluntary_ctxt_switches:"):
                            vol += int(line.split()[1])
                        elif line.startswith("nonvoluntary_ctxt_switches:"):
                            invol += int(line.split()[1])
            except OSError:
                continue
    return vol, invol


def while_attached(cmd, run, attach, settle=0.0):
    """Start the tracer ``cmd`` (strace, perf stat) on running processes, let it attach for
    ``attach`` seconds, ``run()``, wait ``settle`` seconds, stop it with SIGINT (it writes its
    summary then) -> (what ``run`` returned, True when the tracer ended in time). A tracer that
    cannot start: (``run()``, False)."""
    try:
        tracer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return run(), False
    time.sleep(attach)
    res = run()
    time.sleep(settle)
    tracer.send_signal(signal.SIGINT)
    try:
        tracer.wait(15)
    except subprocess.TimeoutExpired:
        tracer.kill()
        tracer.wait(5)
        return res, False
    return res, True
