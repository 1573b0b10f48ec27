"""wrk: HTTP/1.1 keep-alive load through a front (1 thread, N connections, whole seconds),
its report parsed; ``ab -k`` (drivers/ab.py) stands in when wrk is missing."""
import re
import shutil
import subprocess

from bench.drivers import ab

WRK = shutil.which("wrk")


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


POST_SCRIPT = """\
-- bench/drivers/wrk.py: every request is a POST of the file's bytes
local f = assert(io.open("{path}", "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "{content_type}"
"""


def post_script(workdir, name, body, content_type="application/octet-stream"):
    """Write ``body`` and a wrk Lua script POSTing it into ``workdir``; -> the script's
    path (for run_wrk's ``script``)."""
    data = "%s/%s.body" % (workdir, name)
    with open(data, "wb") as f:
        f.write(body)
    script = "%s/%s.lua" % (workdir, name)
    with open(script, "w") as f:
        f.write(POST_SCRIPT.format(path=data, content_type=content_type))
    return script


def run_wrk(port, path, conns, duration, script=None):
    """wrk (1 thread, ``conns`` keep-alive connections) for ``duration`` s -> dict with rps,
    requests, p99_ms, errors (socket errors), non_2xx; ``error`` when it did not run.
    ``script``: a Lua script (post_script). Falls back to ``ab -k`` (whole seconds) when wrk
    is missing (GET only)."""
    url = "http://127.0.0.1:%d%s" % (port, path)
    if not WRK:
        if script:
            return {"error": "wrk is missing (apt-get install wrk)"}
        return ab.run_ab_keepalive(url, conns, duration)
    duration = max(1, int(round(duration)))  # wrk takes whole seconds
    cmd = [WRK, "-t1", "-c%d" % conns, "-d%ds" % duration, "--timeout", "10s", "--latency"]
    cmd += (["-s", script] if script else []) + [url]
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=duration + 30)
    except subprocess.TimeoutExpired:
        return {"error": "wrk did not finish within %.0f s" % (duration + 30)}
    text = out.stdout.decode("utf-8", "replace")
    res = parse_wrk(text)
    if out.returncode != 0 or res is None:
        return {"error": (out.stderr.decode("utf-8", "replace") or text).strip()[-300:]}
    return res


def parse_wrk(text):
    """wrk's report -> dict (rps, requests, p99_ms, errors, non_2xx), None without a rate."""
    m = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if not m:
        return None
    res = {"rps": float(m.group(1))}
    m = re.search(r"(\d+) requests in ([\d.]+)(\w+),", text)
    if m:
        res["requests"] = int(m.group(1))
    m = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s|m)\s*$", text, re.M)
    if m:
        res["p99_ms"] = round(float(m.group(1)) * _UNITS[m.group(2)], 3)
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    res["errors"] = sum(int(x) for x in m.groups()) if m else 0
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    res["non_2xx"] = int(m.group(1)) if m else 0
    if res["non_2xx"] and res.get("requests"):
        # only the answers that succeeded count (a 502 from the front is fast)
        res["rps_all"] = res["rps"]
        res["rps"] = round(res["rps"] * max(0, res["requests"] - res["non_2xx"]) /
                           res["requests"], 2)
    return res
