"""Where a slow request waited, read from ``strace -f -tt -T`` of a threaded server (issue
17's persistent-connection tail): per request, the time from reading it to answering
(in-server) and from the previous answer on its connection to reading it (parked: the load
client sends the next request at once), and how much of each the serving thread spent
waiting for the GIL (futex waits on the interpreter's GIL words; a wait that times out after
the 5 ms switch interval is a forced switch). It starts nothing; it reads a trace."""
import collections
import re

_LINE = re.compile(r"(\d+) (\d+):(\d+):([\d.]+) (.*)")
_DUR = re.compile(r"<([\d.]+)>$")
_FUTEX_WAIT = re.compile(r"futex\((0x[0-9a-f]+), FUTEX_WAIT")
_EPOLL = re.compile(r"epoll_wait\((\d+), .*?, (\d+), (-?\d+)\)\s*=\s*(\d+)")
_IO = re.compile(r"(recvfrom|sendmsg)\((\d+),")


def read_calls(path):
    """[(tid, start, call text)] with unfinished/resumed pairs joined."""
    pending, calls = {}, []
    with open(path) as f:
        for line in f:
            m = _LINE.match(line.rstrip("\n"))
            if not m:
                continue
            tid, rest = m.group(1), m.group(5)
            t = int(m.group(2)) * 3600 + int(m.group(3)) * 60 + float(m.group(4))
            if rest.endswith("<unfinished ...>"):
                pending[tid] = (t, rest[:-16])
            elif rest.startswith("<..."):
                if tid in pending:
                    t0, head = pending.pop(tid)
                    calls.append((tid, t0, head + rest.split("resumed>", 1)[-1]))
            else:
                calls.append((tid, t, rest))
    return calls


def _dur(text):
    m = _DUR.search(text)
    return float(m.group(1)) if m else 0.0


def gil_words(calls, count=3):
    """The futex addresses most threads wait on: the GIL's condition variables and mutex."""
    threads = collections.defaultdict(set)
    for tid, _, text in calls:
        m = _FUTEX_WAIT.match(text)
        if m:
            threads[m.group(1)].add(tid)
    return {a for a, _ in sorted(threads.items(), key=lambda kv: -len(kv[1]))[:count]}


def _bands(rows):
    """Mean of each column over the requests p0-50, p50-90, p90-99, p99-100 (by column 0)."""
    rows = sorted(rows, key=lambda r: r[0])
    n, out = len(rows), {}
    for lo, hi in ((0, 0.5), (0.5, 0.9), (0.9, 0.99), (0.99, 1.0)):
        part = rows[int(n * lo):int(n * hi)] or rows[-1:]
        out["p%d-p%d" % (lo * 100, hi * 100)] = {
            "mean_ms": round(1000 * sum(r[0] for r in part) / len(part), 1),
            "gil_wait_ms": round(1000 * sum(r[1] for r in part) / len(part), 1),
            "gil_timeouts": round(sum(r[2] for r in part) / len(part), 2),
            "picked_up_by": dict(collections.Counter(r[3] for r in part).most_common(3))}
    return out


def analyse(path):
    calls = read_calls(path)
    gil = gil_words(calls)
    waits = collections.defaultdict(list)  # tid -> [(start, duration, timed out)]
    for tid, t, text in calls:
        m = _FUTEX_WAIT.match(text)
        if m and m.group(1) in gil:
            waits[tid].append((t, _dur(text), "ETIMEDOUT" in text))

    def gil_in(tid, t0, t1):
        w = [g for g in waits[tid] if t0 <= g[0] <= t1]
        return sum(g[1] for g in w), sum(1 for g in w if g[2])

    served, parked = [], []
    last_recv, last_send, last_epoll = {}, {}, {}
    for tid, t, text in calls:
        m = _EPOLL.match(text)
        if m:
            last_epoll[tid] = (t + _dur(text), m.group(3))
            continue
        m = _IO.match(text)
        if not m:
            continue
        fd = m.group(2)
        if m.group(1) == "sendmsg":
            if fd in last_recv and last_recv[fd][0] == tid:
                t0 = last_recv.pop(fd)[1]
                served.append((t - t0,) + gil_in(tid, t0, t) + ("",))
            last_send[fd] = t
        else:
            if fd in last_send:
                t0 = last_send.pop(fd)
                e = last_epoll.get(tid)
                via = ("the worker's own epoll_wait (timeout %s ms)" % e[1]
                       if e and e[0] >= t0 else "the pool (waiter hand-off or offered list)")
                parked.append((t - t0,) + gil_in(tid, t0, t) + (via,))
            last_recv[fd] = (tid, t)
    timeouts = [_dur(x) for tid, _, x in calls
                if _FUTEX_WAIT.match(x) and _FUTEX_WAIT.match(x).group(1) in gil
                and "ETIMEDOUT" in x]
    requests = max(1, len(served))
    return {"requests": len(served), "gil_words": sorted(gil),
            "futex_per_request": round(sum(1 for _, _, x in calls
                                           if x.startswith("futex")) / requests, 1),
            "gil_timeouts_per_request": round(len(timeouts) / requests, 2),
            "in_server": _bands(served), "parked": _bands(parked)}


if __name__ == "__main__":
    import json
    import sys
    print(json.dumps(analyse(sys.argv[1]), indent=1))
