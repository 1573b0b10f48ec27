"""ApacheBench: HTTP load for whole seconds, with keep-alive (``-k``: wrk's stand-in) or
without (Apache's AJP rows: mod_proxy_ajp drops the backend's Content-Length, so Apache closes
HTTP/1.0 connections anyway); its report parsed."""
import re
import shutil
import subprocess

AB = shutil.which("ab")
AB_PATH = AB or "/usr/bin/ab"


def _ab(args, url, duration, timeout):
    """Run ab for ``duration`` whole seconds -> (report text, stderr text, exit status), or
    (None, what went wrong, None)."""
    # -n after -t (which sets 50000): ab allocates its statistics for -n requests up front,
    # so it is kept near what can be done in ``duration`` (100 M made it take 20 s to start).
    # ab's -t is whole seconds (atoi: "-t 0.5" means no limit at all).
    cmd = [AB_PATH, "-q"] + args + ["-t", str(duration), "-n", str(30000 * duration), url]
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "ab did not finish within %.0f s" % timeout, None
    return (out.stdout.decode("utf-8", "replace"), out.stderr.decode("utf-8", "replace"),
            out.returncode)


def _p99(text):
    m = re.search(r"^\s+99%\s+(\d+)", text, re.M)
    return m.group(1) if m else None


def run_ab_keepalive(url, conns, duration):
    """``ab -k`` (wrk's stand-in) -> dict (rps, requests, errors, non_2xx, p99_ms)."""
    duration = max(1, int(round(duration)))
    text, err, _ = _ab(["-k", "-c", str(conns)], url, duration, duration + 30)
    if text is None:
        return {"error": err}
    m = re.search(r"^Requests per second:\s+([\d.]+)", text, re.M)
    if not m:
        return {"error": (err or text).strip()[-300:]}
    res = {"rps": float(m.group(1)), "errors": 0, "non_2xx": 0}
    for key, label in (("requests", "Complete requests"), ("errors", "Failed requests"),
                       ("non_2xx", "Non-2xx responses")):
        m = re.search(r"^%s:\s+(\d+)" % label, text, re.M)
        if m:
            res[key] = int(m.group(1))
    if _p99(text):
        res["p99_ms"] = float(_p99(text))
    return res


def run_ab(port, conns, duration, timeout):
    """``ab`` for ``duration`` seconds -> dict (rps, requests, failed, non_2xx). No -k:
    mod_proxy_ajp drops the backend's Content-Length, so Apache closes ab's HTTP/1.0
    connections anyway (one client connection per request; the AJP ones are reused)."""
    duration = max(1, int(round(duration)))
    text, err, status = _ab(["-c", str(conns)], "http://127.0.0.1:%d/" % port, duration,
                            timeout)
    if text is None:
        return {"error": err}

    def num(label, cast=float):
        m = re.search(r"^%s:\s+([\d.]+)" % re.escape(label), text, re.M)
        return cast(m.group(1)) if m else None

    res = {"rps": num("Requests per second"), "requests": num("Complete requests", int),
           "failed": num("Failed requests", int) or 0,
           "non_2xx": num("Non-2xx responses", int) or 0,
           "keepalive": num("Keep-Alive requests", int) or 0,
           "seconds": num("Time taken for tests")}
    if _p99(text):
        res["p99_ms"] = int(_p99(text))
    if status != 0 or res["rps"] is None:
        res["error"] = (err or text).strip()[-300:]
    return res


def parse_ab_requests(text):
    """ab's report of a run of -n requests -> dict: mean_ms (mean time per request across all
    concurrent requests, ab's second "Time per request"; at -c 1 both are the same), rps,
    requests, failed, non_2xx, seconds; None without a rate."""
    def num(label, cast=float):
        m = re.search(r"^%s:\s+([\d.]+)" % re.escape(label), text, re.M)
        return cast(m.group(1)) if m else None

    rps = num("Requests per second")
    if rps is None:
        return None
    times = re.findall(r"^Time per request:\s+([\d.]+) \[ms\]", text, re.M)
    return {"rps": rps, "mean_ms": float(times[-1]) if times else None,
            "requests": num("Complete requests", int), "seconds": num("Time taken for tests"),
            "failed": num("Failed requests", int) or 0,
            "non_2xx": num("Non-2xx responses", int) or 0}


def run_ab_requests(url, requests, conns=1, timeout=300, body_file=None, time_limit=None):
    """``ab -n requests -c conns`` (no keep-alive: a new connection per request, as the seeds
    ran it), optionally POSTing ``body_file`` -> parse_ab_requests' dict, or {"error"}.
    ``time_limit`` (seconds): ab stops there (``-t``), and a run that did not complete its
    requests by then is an error (a server answering each request late, such as a fork pool
    whose children a front's pooled connections hold, would otherwise take the whole
    ``timeout``)."""
    cmd = [AB_PATH, "-q"] + (["-t", str(int(time_limit))] if time_limit else []) + \
        ["-n", str(requests), "-c", str(conns)]  # -n after -t: -t alone means 50,000
    if body_file:
        cmd += ["-p", body_file, "-T", "application/octet-stream"]
    try:
        out = subprocess.run(cmd + [url], capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": "ab did not finish within %.0f s" % timeout}
    text = out.stdout.decode("utf-8", "replace")
    res = parse_ab_requests(text)
    if res is None or out.returncode:
        return {"error": (out.stderr.decode("utf-8", "replace") or text).strip()[-300:]}
    if time_limit and (res.get("requests") or 0) < requests:
        return dict(res, error="ab reached its %d s limit after %s of %d requests"
                    % (time_limit, res.get("requests"), requests))
    return res
