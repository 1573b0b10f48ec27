"""Uploads and downloads direct (fcgi_load, no front) on a fresh thread-mode server: the time,
the server's peak RSS, and whether the answer is right (length, sha256, and for uploads the
file API's contract: read(65536) and readline() cut the body as they must). Also the check of
an upload answer that came through a front (``check_upload_answer``)."""
import contextlib
import hashlib
import json
import os

from bench import apps, wire
from bench.base import MIB
from bench.procs import RSSSampler
from bench.servers.server import Server


def _transfer(kind, client, workdir, runs, build, check, env_extra=None, timeout=120.0,
              proto="fcgi", server_opts=None):
    """One transfer on a fresh thread-mode server: idle RSS, then ``runs`` runs under the RSS
    sampler, each checked by ``check`` on the saved answer. ``server_opts``: more Server
    arguments (tcp, log_level, extra_args)."""
    srv = Server(kind, "thread", "bench.apps:app", workdir, env_extra, protocol=proto,
                 **(server_opts or {}))
    if not srv.start(client):
        srv.stop()
        return {"error": "server did not start: %s" % srv.error}
    result = {"runs": []}
    try:
        with RSSSampler(srv.proc.pid) as sampler:
            for _ in range(runs):
                req, save, hint = build()
                res = client.run(srv.address, req, count=1, deadline=timeout, save=save,
                                 save_hint=hint, proto=proto)
                res["check"] = check(res, save)
                result["runs"].append(res)
                if res.get("timed_out") or not res.get("requests"):
                    break
        result.update(sampler.as_dict())
        good = [r for r in result["runs"] if r.get("requests") and r["check"] == "ok"]
        if good:
            secs = sorted(r["seconds"] for r in good)
            result["seconds"] = secs[len(secs) // 2]
            result["best_seconds"] = secs[0]
            result["seconds_runs"] = [round(r["seconds"], 4) for r in result["runs"]]
        else:
            last = result["runs"][-1] if result["runs"] else {}
            if last.get("timed_out"):
                result["timed_out_after"] = timeout
            result["error"] = last.get("error") or last.get("first_error") or last.get("check")
        if srv.proc.poll() is not None:
            result["crashed"] = "exited with %s: %s" % (srv.proc.returncode, srv.log_tail())
    finally:
        srv.stop()
        if srv.notes:
            result["stop_notes"] = srv.notes
    return result


def _read_saved(path, proto="fcgi"):
    """(CGI-style head text, body) of a saved answer; AJP packets are decoded first."""
    with open(path, "rb") as f:
        data = f.read()
    if proto == "ajp":
        return wire.decode_ajp_answer(data)
    head, _, body = data.partition(b"\r\n\r\n")
    return head.decode("latin-1"), body


def bench_upload(kind, mode_name, client, workdir, cfg, proto="fcgi", size=None, runs=None,
                 timeout=None, server_opts=None, request_opts=None):
    """``request_opts``: LoadClient.request_file options (AJP: packet_size)."""
    size = cfg.upload_size if size is None else size
    runs = runs or cfg.transfer_runs
    expect = apps.pattern_sha256(size)
    if proto == "fcgi":
        timed = client.request("upload-%s-%d" % (mode_name, size),
                               "/upload?mode=%s&check=len" % mode_name, size)
        checked = client.request("upload-%s-%d-sha" % (mode_name, size),
                                 "/upload?mode=%s&check=sha256" % mode_name, size)
    else:
        timed = client.request_file(proto, "/upload?mode=%s&check=len" % mode_name, size,
                                    **(request_opts or {}))
        checked = client.request_file(proto, "/upload?mode=%s&check=sha256" % mode_name, size,
                                      **(request_opts or {}))
    save = os.path.join(workdir, "upload.out")
    state = {"n": 0}

    def build():
        # The timed runs count bytes only; the last run hashes (sha256) to check the content.
        state["n"] += 1
        return (checked if state["n"] == runs else timed), save, 0

    body = apps.pattern_bytes(size)
    if mode_name == "readline":
        pieces = body.count(b"\n") + (not body.endswith(b"\n"))
        contract = "readline() returns one line"
    else:
        pieces = -(-size // 65536)
        contract = "read(65536) returns 65536 bytes until the end"
    del body

    def check(res, path):
        if not res.get("requests"):
            return "no answer"
        try:
            answer = json.loads(_read_saved(path, proto)[1])
        except (OSError, ValueError) as exc:
            return "bad answer: %s" % exc
        res["app"] = answer
        if answer["length"] != size:
            return "length %d != %d" % (answer["length"], size)
        if answer["sha256"] is not None and answer["sha256"] != expect:
            return "sha256 mismatch"
        if answer["pieces"] != pieces or answer.get("violations"):
            # The bytes are right but cut wrongly: a file-API bug in wsgi.input.
            return "contract broken (%s): %d pieces, expected %d; %s bad pieces" % (
                contract, answer["pieces"], pieces, answer.get("violations", "?"))
        return "ok"

    result = _transfer(kind, client, workdir, runs, build, check,
                       timeout=timeout or cfg.transfer_timeout, proto=proto,
                       server_opts=server_opts)
    # The check run hashes inside the request: its time is not a server number.
    usable = ("ok", "contract")
    timed_runs = [r for r in result.get("runs", [])[:-1]
                  if r.get("requests") and r.get("check", "").startswith(usable)] or \
        [r for r in result.get("runs", [])
         if r.get("requests") and r.get("check", "").startswith(usable)]
    broken = [r["check"] for r in result.get("runs", []) if r.get("check", "").startswith(
        "contract")]
    if broken:
        result["invalid"] = broken[-1]
    if timed_runs:
        result.pop("error", None)
        secs = sorted(r["seconds"] for r in timed_runs)
        result["seconds"] = secs[len(secs) // 2]
        result["best_seconds"] = secs[0]
        result["seconds_runs"] = [round(r["seconds"], 4) for r in timed_runs]
        result["mib_per_s"] = round(size / MIB / result["seconds"], 1)
        result["gb_per_s"] = round(size / 1e9 / result["seconds"], 3)
        result["checked"] = result["runs"][-1].get("check") == "ok" and \
            result["runs"][-1].get("app", {}).get("sha256") == expect
    result["size_mib"] = size / MIB
    for r in result.get("runs", []):
        r.pop("latency_ms", None)
    return result


def bench_download(kind, client, workdir, size, runs, timeout, proto="fcgi", server_opts=None):
    save = os.path.join(workdir, "download.out")
    if proto == "fcgi":
        req = client.request("download-%d" % size, "/download?size=%d" % size)
    else:
        req = client.request_file(proto, "/download?size=%d" % size)
    expect = apps.pattern_sha256(size)

    def build():
        return req, save, size + 4096

    def check(res, path):
        if not res.get("requests"):
            return "no answer"
        head, body = _read_saved(path, proto)
        if len(body) != size:
            return "length %d != %d" % (len(body), size)
        if "X-Sha256: %s" % expect not in head:
            return "X-Sha256 header missing or wrong"
        if hashlib.sha256(body).hexdigest() != expect:
            return "sha256 mismatch"
        return "ok"

    try:
        result = _transfer(kind, client, workdir, runs, build, check,
                           {"FLUPFAST_BENCH_DOWNLOAD_SIZES": str(size)}, timeout=timeout,
                           proto=proto, server_opts=server_opts)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(save)
    result["size_mib"] = size / MIB
    if "seconds" in result:
        result["mib_per_s"] = round(size / MIB / result["seconds"], 1)
        # every run's answer is checked (length, X-Sha256, sha256 of what arrived)
        result["checked"] = all(r.get("check") == "ok" for r in result["runs"])
    for r in result.get("runs", []):
        r.pop("latency_ms", None)
    return result


def check_upload_answer(status, answer, size, check, expect):
    """"ok", or what is wrong with the upload app's JSON answer for a ``size``-byte body read
    with read(65536) (``check``: len or sha256, ``expect`` the sha256)."""
    try:
        app = json.loads(answer)
    except ValueError:
        app = None
    if status != 200 or not app:
        return "status %d: %r" % (status, answer[:120])
    if app["length"] != size:
        return "length %d != %d" % (app["length"], size)
    if app["pieces"] != -(-size // 65536) or app.get("violations"):
        return "read(65536) contract broken: %d pieces" % app["pieces"]
    if check == "sha256" and app["sha256"] != expect:
        return "sha256 mismatch"
    return "ok"
