"""SCGI and AJP13 rows of the benchmark: flup 1.0.3, flupfast pure and flupfast compiled, side
by side in one run (called by bench/run.py; bench/README.md explains the numbers).

SCGI: the servers listen on a Unix socket; hello requests/s in thread and fork mode (16
concurrent connections, one request per connection, as SCGI is), 100 MiB upload (read(65536)
and readline()) and 100 MiB download, with time and peak server RSS.

AJP13: the servers listen on TCP loopback (flup's AJP cannot listen on a Unix socket, and
Nagle's algorithm only exists on TCP: it is what makes flup slow, inventory 3.2).
(a) Direct: fcgi_load -P ajp plays the web server on 16 persistent connections: hello
requests/s, and a read(65536) upload in 8 KiB packets (mod_proxy_ajp's default) and in 64 KiB
packets (ProxyIOBufferSize 65536; flupfast started with --ajp-packet-size 65536). flup takes
one Nagle + delayed-ACK round trip (~40 ms) per body packet, so its upload is measured at a
smaller size and the 100 MiB time is extrapolated linearly (marked as such).
(b) Through a real Apache (mod_proxy_ajp, connection reuse on, ProxyIOBufferSize 65536), run
as root in the foreground from its own config in the run's temporary directory, on free
loopback ports, stopped by PID: hello with ``ab`` (16 concurrent HTTP/1.0 clients), and a POST
upload of 100 MiB from a Python client (one sendall; the time is Apache's and the backend's).
"""
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time

from bench import apps
from bench.run import (
    KIND_LABEL, MIB, START_TIMEOUT, STOP_GRACE, RSSSampler, Server, _connect, _fmt,
    _proc_stat, bench_download, bench_syscalls, bench_upload, free_port, kill_orphans, log,
    process_tree, tree_cpu_seconds,
)

APACHE = "/usr/sbin/apache2"
APACHE_MODULES = "/usr/lib/apache2/modules"
AB = shutil.which("ab") or "/usr/bin/ab"


# -- request files ---------------------------------------------------------------------------

def _params(uri, body_size):
    """The CGI variables nginx's scgi_params sends (no PATH_INFO: the apps fall back to
    REQUEST_URI), CONTENT_LENGTH first as SCGI requires."""
    path_part, _, query = uri.partition("?")
    return [
        ("CONTENT_LENGTH", str(body_size)), ("SCGI", "1"),
        ("REQUEST_METHOD", "POST" if body_size else "GET"), ("REQUEST_URI", uri),
        ("QUERY_STRING", query), ("CONTENT_TYPE", "application/octet-stream" if body_size
                                  else ""),
        ("DOCUMENT_URI", path_part), ("DOCUMENT_ROOT", "/var/www"),
        ("SERVER_PROTOCOL", "HTTP/1.1"), ("REQUEST_SCHEME", "http"),
        ("REMOTE_ADDR", "127.0.0.1"), ("REMOTE_PORT", "50000"), ("SERVER_PORT", "80"),
        ("SERVER_NAME", "localhost"), ("HTTP_HOST", "localhost"),
        ("HTTP_USER_AGENT", "fcgi_load"), ("HTTP_ACCEPT", "*/*"),
    ]


def _write_body(out, size, frame=None, chunk=65536):
    """Write ``size`` pattern bytes, ``chunk`` at a time, each through ``frame``."""
    block = apps.BLOCK * 2
    sent = 0
    while sent < size:
        n = min(chunk, size - sent)
        off = sent % len(apps.BLOCK)
        piece = block[off:off + n]
        out.write(frame(piece) if frame else piece)
        sent += n


def write_scgi_request(path, uri, body_size=0):
    block = b"".join(k.encode("latin-1") + b"\0" + v.encode("latin-1") + b"\0"
                     for k, v in _params(uri, body_size))
    with open(path, "wb") as out:
        out.write(b"%d:" % len(block) + block + b",")
        _write_body(out, body_size)
    return path


# AJP13 (ajpv13a.html; httpd's ajp_header.c)
AJP_METHODS = {"GET": 2, "POST": 4}
AJP_REQ_HEADERS = {"accept": 0x01, "content-type": 0x07, "content-length": 0x08,
                   "host": 0x0B, "user-agent": 0x0E}
AJP_RESP_HEADERS = {1: "Content-Type", 2: "Content-Language", 3: "Content-Length", 4: "Date",
                    5: "Last-Modified", 6: "Location", 7: "Set-Cookie", 8: "Set-Cookie2",
                    9: "Servlet-Engine", 10: "Status", 11: "WWW-Authenticate"}


def _ajp_string(value):
    data = value.encode("latin-1")
    return struct.pack(">H", len(data)) + data + b"\0"


def _ajp_packet(payload):
    return b"\x12\x34" + struct.pack(">H", len(payload)) + payload


def ajp_forward_request(uri, body_size=0):
    """FORWARD_REQUEST as mod_proxy_ajp sends it for ``uri``."""
    path_part, _, query = uri.partition("?")
    headers = [("host", "localhost"), ("user-agent", "fcgi_load"), ("accept", "*/*")]
    if body_size:
        headers += [("content-type", "application/octet-stream"),
                    ("content-length", str(body_size))]
    out = [bytes((0x02, AJP_METHODS["POST" if body_size else "GET"])),
           _ajp_string("HTTP/1.1"), _ajp_string(path_part), _ajp_string("127.0.0.1"),
           _ajp_string("127.0.0.1"), _ajp_string("localhost"), struct.pack(">H", 80), b"\0",
           struct.pack(">H", len(headers))]
    for name, value in headers:
        out.append(bytes((0xA0, AJP_REQ_HEADERS[name])) + _ajp_string(value))
    if query:
        out.append(b"\x05" + _ajp_string(query))
    out.append(b"\xff")
    return _ajp_packet(b"".join(out))


def write_ajp_request(path, uri, body_size=0, packet_size=8192):
    """FORWARD_REQUEST, then the body in packets of ``packet_size`` bytes (header 4, length 2,
    data: 8186 data bytes in 8 KiB packets, as mod_proxy_ajp sends them)."""
    with open(path, "wb") as out:
        out.write(ajp_forward_request(uri, body_size))
        _write_body(out, body_size, lambda d: _ajp_packet(struct.pack(">H", len(d)) + d),
                    chunk=packet_size - 6)
    return path


def decode_ajp_answer(data):
    """The container's packets -> (CGI-style head text, body bytes)."""
    head, body, pos = [], [], 0
    while pos + 4 <= len(data):
        if data[pos:pos + 2] != b"AB":
            raise ValueError("bad AJP packet header at %d" % pos)
        (length,) = struct.unpack_from(">H", data, pos + 2)
        payload = data[pos + 4:pos + 4 + length]
        pos += 4 + length
        kind = payload[0]
        if kind == 3:
            (n,) = struct.unpack_from(">H", payload, 1)
            body.append(payload[3:3 + n])
        elif kind == 4:
            status, = struct.unpack_from(">H", payload, 1)
            i = 3
            (n,) = struct.unpack_from(">H", payload, i)
            msg = payload[i + 2:i + 2 + n].decode("latin-1")
            i += 2 + n + 1
            head.append("Status: %d %s" % (status, msg))
            (count,) = struct.unpack_from(">H", payload, i)
            i += 2
            for _ in range(count):
                if payload[i] == 0xA0:
                    name = AJP_RESP_HEADERS.get(payload[i + 1], "?")
                    i += 2
                else:
                    (n,) = struct.unpack_from(">H", payload, i)
                    name = payload[i + 2:i + 2 + n].decode("latin-1")
                    i += 2 + n + 1
                (n,) = struct.unpack_from(">H", payload, i)
                head.append("%s: %s" % (name, payload[i + 2:i + 2 + n].decode("latin-1")))
                i += 2 + n + 1
        elif kind == 5:
            break
    return "\r\n".join(head), b"".join(body)


def request_file(client, proto, uri, body_size=0, packet_size=8192):
    """A prebuilt request file in the client's work directory (cached by its parameters)."""
    name = "%s-%s-%d-%d" % (proto, re.sub(r"[^A-Za-z0-9]+", "_", uri), body_size, packet_size)
    if name not in client.requests:
        path = os.path.join(client.workdir, name + ".req")
        if proto == "scgi":
            write_scgi_request(path, uri, body_size)
        else:
            write_ajp_request(path, uri, body_size, packet_size)
        client.requests[name] = path
    return client.requests[name]


def hello_request(client, proto):
    return request_file(client, proto, "/")


def drop_requests(client, proto):
    for name in [n for n in client.requests if n.startswith(proto + "-")]:
        client.drop(name)


# -- hello: interleaved rounds ---------------------------------------------------------------

def hello_matrix(proto, kinds, modes, levels, client, workdir, cfg, tcp):
    """{level: {kind: {mode: result}}}: 16 connections (SCGI: one request per connection;
    AJP: persistent), one server per (level, kind, mode), all started first; rounds interleave
    the configurations and the median round is kept (as run.bench_hello)."""
    out, servers, runs = {}, {}, {}
    try:
        for level in levels:
            for kind in kinds:
                for mode in modes:
                    srv = Server(kind, mode, "bench.apps:hello", workdir, protocol=proto,
                                 tcp=tcp, log_level=level)
                    log("  starting %s %s (%s mode, log level %s)" % (
                        KIND_LABEL[kind], proto, mode, level))
                    if srv.start(client):
                        servers[level, kind, mode] = srv
                    else:
                        out.setdefault(level, {}).setdefault(kind, {})[mode] = {
                            "error": srv.error}
                        log("    FAILED: %s" % srv.error)
                        srv.stop()
        for rnd in range(cfg.rounds):
            for key, srv in servers.items():
                if srv.proc is None or srv.proc.poll() is not None:
                    continue
                pids = srv.pids()
                cpu0 = tree_cpu_seconds(pids)
                res = client.run(srv.address, "hello", conns=cfg.conns, keep=True,
                                 duration=cfg.proto_duration, warmup=cfg.warmup,
                                 deadline=cfg.proto_duration + cfg.warmup + 20, proto=proto)
                cpu = tree_cpu_seconds(list(set(pids) | set(srv.pids()))) - cpu0
                total = res.get("requests", 0) / max(res.get("seconds", 1), 1e-9) * (
                    cfg.proto_duration + cfg.warmup)
                res["server_cpu_us_per_request"] = round(cpu / total * 1e6, 1) \
                    if total else None
                res.pop("latency_ms_all", None)
                runs.setdefault(key, []).append(res)
                log("  round %d %s %-18s %-6s %-7s %8.0f req/s  errors %d  bad %d  stalled %d%s"
                    % (rnd + 1, proto, KIND_LABEL[key[1]], key[2], key[0], res.get("rps", 0),
                       res.get("errors", 0), res.get("bad_status", 0),
                       res.get("stalled_connections", 0),
                       "  " + res["error"] if res.get("error") else ""))
        for (level, kind, mode), rs in runs.items():
            ordered = sorted(rs, key=lambda r: r.get("rps", 0))
            best = dict(ordered[len(ordered) // 2])
            best["rps_rounds"] = [r.get("rps", 0) for r in rs]
            out.setdefault(level, {}).setdefault(kind, {})[mode] = best
        for (level, kind, mode), srv in servers.items():
            if srv.proc is not None and srv.proc.poll() is not None:
                out.setdefault(level, {}).setdefault(kind, {}).setdefault(mode, {})[
                    "crashed"] = "exited with %s: %s" % (srv.proc.returncode, srv.log_tail())
    finally:
        for (level, kind, mode), srv in servers.items():
            srv.stop()
            if srv.notes:
                out.setdefault(level, {}).setdefault(kind, {}).setdefault(mode, {})[
                    "stop_notes"] = srv.notes
    return out


# -- SCGI ------------------------------------------------------------------------------------

def run_scgi(kinds, client, workdir, cfg, results, strace):
    res = results.setdefault("scgi", {})
    log("SCGI hello world, %d connections (one request each), log levels %s" % (
        cfg.conns, ",".join(cfg.proto_levels)))
    res["hello"] = hello_matrix("scgi", kinds, cfg.modes, cfg.proto_levels, client, workdir,
                                cfg, tcp=False)
    tr = res.setdefault("transfers", {})
    opts = {"log_level": "INFO"}
    for mode_name in ("read65536", "readline"):
        for kind in kinds:
            log("SCGI upload %d MiB, %s, %s" % (cfg.upload_size // MIB, mode_name,
                                               KIND_LABEL[kind]))
            r = bench_upload(kind, mode_name, client, workdir, cfg, proto="scgi",
                             server_opts=opts)
            tr.setdefault(kind, {})["upload_" + mode_name] = r
            log("    %s s, %s MiB/s, peak RSS +%s MiB %s" % (
                r.get("seconds"), r.get("mib_per_s"), r.get("peak_above_idle_mib"),
                r.get("error") or r.get("invalid") or ""))
        drop_requests(client, "scgi")
    for kind in kinds:
        log("SCGI download %d MiB, %s" % (cfg.download_size // MIB, KIND_LABEL[kind]))
        r = bench_download(kind, client, workdir, cfg.download_size, cfg.transfer_runs,
                           cfg.transfer_timeout, proto="scgi", server_opts=opts)
        tr.setdefault(kind, {})["download"] = r
        log("    %s s, %s MiB/s, peak RSS +%s MiB %s" % (
            r.get("seconds"), r.get("mib_per_s"), r.get("peak_above_idle_mib"),
            r.get("error") or ""))
    if strace and not cfg.quick:
        sc = res.setdefault("syscalls", {})
        for kind in kinds:
            log("SCGI syscalls per request (strace -c -f, thread mode, 1000 sequential "
                "requests), %s" % KIND_LABEL[kind])
            sc[kind] = bench_syscalls(kind, client, workdir, cfg, mode="thread", keep=False,
                                      count=1000, proto="scgi",
                                      server_opts={"log_level": "WARNING"})
            log("    %s" % sc[kind])
        if "fork" in cfg.modes:
            scf = res.setdefault("syscalls_fork", {})
            for kind in kinds:
                log("SCGI syscalls per request, fork mode (all processes), %s"
                    % KIND_LABEL[kind])
                scf[kind] = bench_syscalls(kind, client, workdir, cfg, mode="fork", keep=False,
                                           count=1000, proto="scgi",
                                           server_opts={"log_level": "WARNING"})
                log("    %s" % scf[kind])


# -- AJP -------------------------------------------------------------------------------------

def _ajp_upload(kind, client, workdir, cfg, packet_size, size, runs, timeout):
    opts = {"tcp": True, "log_level": "INFO"}
    if packet_size != 8192:
        opts["extra_args"] = ["--ajp-packet-size", str(packet_size)]
    r = bench_upload(kind, "read65536", client, workdir, cfg, proto="ajp", size=size,
                     runs=runs, timeout=timeout, server_opts=opts,
                     request_opts={"packet_size": packet_size})
    r["packet_size"] = packet_size
    if r.get("seconds") and size != cfg.upload_size:
        r["extrapolated_seconds"] = round(r["seconds"] * cfg.upload_size / size, 2)
    return r


def run_ajp(kinds, client, workdir, cfg, results, strace):
    res = results.setdefault("ajp", {})
    log("AJP hello world, direct over TCP loopback, %d persistent connections, log levels %s"
        % (cfg.conns, ",".join(cfg.proto_levels)))
    res["hello"] = hello_matrix("ajp", kinds, cfg.modes, cfg.proto_levels, client, workdir,
                                cfg, tcp=True)
    tr = res.setdefault("transfers", {})
    for packet_size in (8192, 65536):
        cap = int(cfg.flup_ajp_upload_mib[packet_size] * MIB)
        for kind in kinds:
            size = min(cap, cfg.upload_size) if kind == "flup" else cfg.upload_size
            runs = 1 if kind == "flup" else cfg.transfer_runs
            log("AJP upload %g MiB in %d-byte packets, read(65536), %s" % (
                size / MIB, packet_size, KIND_LABEL[kind]))
            r = _ajp_upload(kind, client, workdir, cfg, packet_size, size, runs,
                            cfg.flup_ajp_timeout if kind == "flup" else cfg.transfer_timeout)
            tr.setdefault(kind, {})["upload_%d" % packet_size] = r
            log("    %s s%s, peak RSS +%s MiB %s" % (
                r.get("seconds"), " (100 MiB extrapolated: %s s)" % r["extrapolated_seconds"]
                if r.get("extrapolated_seconds") else "", r.get("peak_above_idle_mib"),
                r.get("error") or r.get("invalid") or ""))
            drop_requests(client, "ajp")
    if os.path.exists(APACHE) and os.path.exists(AB) and os.geteuid() == 0:
        res["apache"] = run_apache(kinds, client, workdir, cfg)
    else:
        results["notes"].append("AJP through Apache skipped: needs %s, %s and root" % (
            APACHE, AB))
    if strace and not cfg.quick:
        sc = res.setdefault("syscalls", {})
        for kind in kinds:
            count = cfg.flup_ajp_syscall_requests if kind == "flup" else 2000
            log("AJP syscalls per request (strace -c -f, thread mode, one persistent "
                "connection, %d requests), %s" % (count, KIND_LABEL[kind]))
            sc[kind] = bench_syscalls(kind, client, workdir, cfg, mode="thread", keep=True,
                                      count=count, proto="ajp",
                                      server_opts={"tcp": True, "log_level": "WARNING"})
            log("    %s" % sc[kind])


# -- Apache mod_proxy_ajp --------------------------------------------------------------------

APACHE_CONF = """\
ServerRoot "{root}"
DefaultRuntimeDir "{root}/run"
PidFile "{root}/run/httpd.pid"
Mutex file:{root}/run default
ServerName localhost
User www-data
Group www-data
ErrorLog "{root}/logs/error.log"
LogLevel warn
LoadModule mpm_event_module {mods}/mod_mpm_event.so
LoadModule authz_core_module {mods}/mod_authz_core.so
LoadModule proxy_module {mods}/mod_proxy.so
LoadModule proxy_ajp_module {mods}/mod_proxy_ajp.so
# One child process: one mod_proxy connection pool per backend, as many connections as
# threads; no access log (the front end's own cost stays small).
StartServers 1
ServerLimit 1
ThreadsPerChild 32
MaxRequestWorkers 32
MinSpareThreads 1
MaxSpareThreads 32
Timeout {timeout}
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout 30
LimitRequestBody 0
ProxyIOBufferSize 65536
{vhosts}
"""

APACHE_VHOST = """\
Listen 127.0.0.1:{port}
<VirtualHost 127.0.0.1:{port}>
    ProxyPass "/" "ajp://127.0.0.1:{backend}/" disablereuse=Off timeout={timeout}
</VirtualHost>
"""


APACHE_STATIC_VHOST = """\
LoadModule proxy_http_module {mods}/mod_proxy_http.so
Listen 127.0.0.1:{port}
<VirtualHost 127.0.0.1:{port}>
    DocumentRoot "{root}"
    <Directory "{root}">
        Require all granted
    </Directory>
    # the same file through Apache's own proxy: the front forwarding a body
    ProxyPass "/fwd/" "http://127.0.0.1:{port}/"
</VirtualHost>
"""


class Apache:
    """apache2 in the foreground from its own config; one Listen port per backend, and with
    ``static_root`` one more (``ports["static"]``) serving that directory's files, also
    under /fwd/ through mod_proxy_http: the front's own cost (bench/fronts.py)."""

    def __init__(self, workdir, backends, timeout, static_root=None):
        self.root = os.path.join(workdir, "apache")
        for sub in ("", "run", "logs"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)
            os.chmod(os.path.join(self.root, sub), 0o755)
        os.chmod(workdir, 0o711)  # the workers (www-data) traverse it
        self.ports = {key: free_port() for key in backends}
        vhosts = "".join(APACHE_VHOST.format(port=self.ports[key], backend=bport,
                                             timeout=int(timeout))
                         for key, bport in backends.items())
        if static_root:
            self.ports["static"] = free_port()
            vhosts += APACHE_STATIC_VHOST.format(port=self.ports["static"], root=static_root,
                                                 mods=APACHE_MODULES)
        self.conf = os.path.join(self.root, "httpd.conf")
        with open(self.conf, "w") as f:
            f.write(APACHE_CONF.format(root=self.root, mods=APACHE_MODULES,
                                       timeout=int(timeout), vhosts=vhosts))
        self.proc = None
        self.error = None
        self.notes = []

    def start(self):
        self._log = open(os.path.join(self.root, "logs", "stdout.log"), "wb")
        self.proc = subprocess.Popen(
            [APACHE, "-d", self.root, "-f", self.conf, "-DFOREGROUND"], stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C"})
        deadline = time.monotonic() + START_TIMEOUT
        pending = set(self.ports.values())
        while pending and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.error = "apache2 exited with %s: %s" % (self.proc.returncode,
                                                             self.log_tail())
                return False
            for port in list(pending):
                with contextlib.suppress(OSError):
                    _connect("127.0.0.1:%d" % port)
                    pending.discard(port)
            time.sleep(0.05)
        if pending:
            self.error = "apache2 did not listen within %.0f s" % START_TIMEOUT
            return False
        return True

    def log_tail(self, size=800):
        text = ""
        for name in ("stdout.log", "error.log"):
            with contextlib.suppress(OSError), open(os.path.join(self.root, "logs", name),
                                                    "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - size))
                text += f.read().decode("utf-8", "replace").strip() + " "
        return text.strip()

    def stop(self):
        stop_front(self, "apache2")


def stop_front(front, name):
    """Stop a web server started in the foreground (``front.proc``; notes go to
    ``front.notes``): SIGTERM to the parent's PID (it stops its children), then SIGKILL by
    PID, the parent's and then any child's that outlived it (start time checked)."""
    if front.proc is None:
        return
    proc = front.proc
    if proc.poll() is None:
        family = {p: (_proc_stat(p) or (0, 0, None))[2] for p in process_tree(proc.pid)}
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(3 * STOP_GRACE)
        except subprocess.TimeoutExpired:
            front.notes.append("%s did not exit within %.0f s of SIGTERM: SIGKILL"
                               % (name, 3 * STOP_GRACE))
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)
        kill_orphans(family, front.notes, "%s process" % name)
    front._log.close()
    front.proc = None


def http_request(port, method, uri, body=None, timeout=30.0, headers=()):
    """One HTTP/1.0 request (no chunked answer) -> (status, head text, body, seconds from
    connect to the last byte). ``body`` is sent with one sendall. Raises socket.timeout when
    ``timeout`` (in all) passes."""
    end = time.monotonic() + timeout
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = ["%s %s HTTP/1.0" % (method, uri), "Host: localhost"]
        head += ["%s: %s" % kv for kv in headers]
        if body is not None:
            head += ["Content-Type: application/octet-stream", "Content-Length: %d" % len(body)]
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        if body is not None:
            s.settimeout(max(0.1, end - time.monotonic()))
            s.sendall(body)
        chunks = []
        while True:
            s.settimeout(max(0.1, end - time.monotonic()))
            data = s.recv(1 << 20)
            if not data:
                break
            chunks.append(data)
    seconds = time.perf_counter() - t0
    data = b"".join(chunks)
    head, _, rest = data.partition(b"\r\n\r\n")
    text = head.decode("latin-1")
    m = re.match(r"HTTP/1\.\d (\d+)", text)
    return (int(m.group(1)) if m else 0), text, rest, seconds


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


def run_ab(port, conns, duration, timeout):
    """``ab`` for ``duration`` seconds -> dict (rps, requests, failed, non_2xx). No -k:
    mod_proxy_ajp drops the backend's Content-Length, so Apache closes ab's HTTP/1.0
    connections anyway (one client connection per request; the AJP ones are reused)."""
    # -n after -t (which sets 50000): ab allocates its statistics for -n requests up front,
    # so it is kept near what can be done in ``duration`` (100 M made it take 20 s to start).
    # ab's -t is whole seconds (atoi: "-t 0.5" means no limit at all).
    duration = max(1, int(round(duration)))
    cmd = [AB, "-q", "-c", str(conns), "-t", str(duration), "-n", str(30000 * duration),
           "http://127.0.0.1:%d/" % port]
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": "ab did not finish within %.0f s" % timeout}
    text = out.stdout.decode("utf-8", "replace")

    def num(label, cast=float):
        m = re.search(r"^%s:\s+([\d.]+)" % re.escape(label), text, re.M)
        return cast(m.group(1)) if m else None

    res = {"rps": num("Requests per second"), "requests": num("Complete requests", int),
           "failed": num("Failed requests", int) or 0,
           "non_2xx": num("Non-2xx responses", int) or 0,
           "keepalive": num("Keep-Alive requests", int) or 0,
           "seconds": num("Time taken for tests")}
    m = re.search(r"^\s+99%\s+(\d+)", text, re.M)
    if m:
        res["p99_ms"] = int(m.group(1))
    if out.returncode != 0 or res["rps"] is None:
        res["error"] = (out.stderr.decode("utf-8", "replace") or text).strip()[-300:]
    return res


def run_apache(kinds, client, workdir, cfg):
    """Hello through Apache with ab -k, and a 100 MiB POST, per backend kind."""
    out = {"levels": {}}
    backends = {}
    try:
        for level in cfg.proto_levels:
            for kind in kinds:
                srv = Server(kind, "thread", "bench.apps:app", workdir, protocol="ajp", tcp=True,
                             log_level=level, extra_args=["--ajp-packet-size", "65536"])
                log("  starting %s ajp (thread mode, log level %s) behind Apache" % (
                    KIND_LABEL[kind], level))
                if srv.start(client):
                    backends[level, kind] = srv
                else:
                    out["levels"].setdefault(level, {})[kind] = {"error": srv.error}
                    log("    FAILED: %s" % srv.error)
                    srv.stop()
        apache = Apache(workdir, {key: srv.port for key, srv in backends.items()},
                        max(cfg.flup_ajp_timeout, cfg.transfer_timeout) + 30)
        log("  starting apache2 (mod_proxy_ajp, ProxyIOBufferSize 65536)")
        if not apache.start():
            out["error"] = apache.error
            log("    FAILED: %s" % apache.error)
            apache.stop()
            return out
        try:
            _apache_scenarios(kinds, backends, apache, cfg, out)
        finally:
            # flup's backends first (Apache's children otherwise outlive SIGTERM), then
            # Apache, which closes its pooled AJP connections (a flupfast AJP server with an
            # idle persistent connection takes 5 s to exit on SIGTERM), then the rest.
            _stop_backends({k: v for k, v in backends.items() if k[1] == "flup"}, out)
            apache.stop()
            if apache.notes:
                out["stop_notes"] = apache.notes
    finally:
        _stop_backends(backends, out)
    return out


def _stop_backends(backends, out):
    for key, srv in backends.items():
        if srv.proc is not None and srv.proc.poll() is not None:
            out["levels"].setdefault(key[0], {}).setdefault(key[1], {})["crashed"] = \
                "exited with %s: %s" % (srv.proc.returncode, srv.log_tail())
        srv.stop()
        if srv.notes:
            out["levels"].setdefault(key[0], {}).setdefault(key[1], {})["stop_notes"] = \
                srv.notes


def _apache_scenarios(kinds, backends, apache, cfg, out):
    # Every backend answers one hello through Apache first (content checked).
    for key in backends:
        try:
            status, head, body, _ = http_request(apache.ports[key], "GET", "/", timeout=20)
        except OSError as exc:
            status, body = 0, repr(exc).encode()
        ok = status == 200 and body == apps.HELLO
        out["levels"].setdefault(key[0], {}).setdefault(key[1], {})["hello_check"] = \
            "ok" if ok else "status %d, body %r" % (status, body[:80])
    runs = {}
    for rnd in range(cfg.rounds):
        for key, srv in backends.items():
            if srv.proc.poll() is not None:
                continue
            port = apache.ports[key]
            run_ab(port, cfg.conns, 1, 30)  # warm-up (1 s): connections, pool
            pids = srv.pids()
            cpu0 = tree_cpu_seconds(pids)
            res = run_ab(port, cfg.conns, cfg.proto_duration, cfg.proto_duration + 30)
            cpu = tree_cpu_seconds(list(set(pids) | set(srv.pids()))) - cpu0
            if res.get("requests"):
                res["backend_cpu_us_per_request"] = round(cpu / res["requests"] * 1e6, 1)
            runs.setdefault(key, []).append(res)
            log("  round %d apache+ajp %-18s %-7s %8.0f req/s  failed %s  non-2xx %s  "
                "keep-alive %s/%s%s" % (rnd + 1, KIND_LABEL[key[1]], key[0], res.get("rps") or 0,
                                         res.get("failed"), res.get("non_2xx"),
                                         res.get("keepalive"), res.get("requests"),
                                         "  " + res["error"] if res.get("error") else ""))
    for key, rs in runs.items():
        ordered = sorted(rs, key=lambda r: r.get("rps") or 0)
        best = dict(ordered[len(ordered) // 2])
        best["rps_rounds"] = [r.get("rps") for r in rs]
        out["levels"][key[0]][key[1]]["hello"] = best
    # The upload: on the backends of the first level (INFO: as users run them).
    level = cfg.proto_levels[0]
    uploads = out.setdefault("upload", {"log_level": level})
    body_cache = {}
    for kind in kinds:
        srv = backends.get((level, kind))
        if srv is None or srv.proc.poll() is not None:
            uploads[kind] = {"error": "backend not running"}
            continue
        size = min(int(cfg.flup_apache_upload_mib * MIB), cfg.upload_size) if kind == "flup" \
            else cfg.upload_size
        runs_n = 1 if kind == "flup" else cfg.transfer_runs
        if size not in body_cache:
            body_cache.clear()
            body_cache[size] = (apps.pattern_bytes(size), apps.pattern_sha256(size))
        body, expect = body_cache[size]
        timeout = cfg.flup_ajp_timeout if kind == "flup" else cfg.transfer_timeout
        log("AJP upload %g MiB via Apache (HTTP POST, ProxyIOBufferSize 65536), read(65536), "
            "%s" % (size / MIB, KIND_LABEL[kind]))
        r = {"size_mib": size / MIB, "runs": []}
        with RSSSampler(srv.proc.pid) as sampler:
            for i in range(runs_n):
                check = "sha256" if i == runs_n - 1 else "len"
                one = {"check_mode": check}
                try:
                    status, head, answer, secs = http_request(
                        apache.ports[level, kind], "POST",
                        "/upload?mode=read65536&check=%s" % check, body, timeout=timeout)
                except OSError as exc:  # socket.timeout included
                    one["error"] = "%s after %.0f s" % (type(exc).__name__, timeout) \
                        if isinstance(exc, socket.timeout) else repr(exc)
                    if isinstance(exc, socket.timeout):
                        r["timed_out_after"] = timeout
                    r["runs"].append(one)
                    break
                one["seconds"] = round(secs, 4)
                one["status"] = status
                one["check"] = check_upload_answer(status, answer, size, check, expect)
                r["runs"].append(one)
        r.update(sampler.as_dict())
        good = [x for x in r["runs"] if x.get("check") == "ok"]
        timed = [x for x in good if x["check_mode"] == "len"] or good
        if timed:
            secs = sorted(x["seconds"] for x in timed)
            r["seconds"] = secs[len(secs) // 2]
            r["best_seconds"] = secs[0]
            r["seconds_runs"] = [x["seconds"] for x in timed]
            r["mib_per_s"] = round(size / MIB / r["seconds"], 1)
            r["checked"] = r["runs"][-1].get("check") == "ok" and \
                r["runs"][-1]["check_mode"] == "sha256"
            if size != cfg.upload_size:
                r["extrapolated_seconds"] = round(r["seconds"] * cfg.upload_size / size, 2)
        else:
            r["error"] = (r["runs"][-1].get("error") or r["runs"][-1].get("check")) \
                if r["runs"] else "no run"
        uploads[kind] = r
        log("    %s s%s, peak RSS +%s MiB %s" % (
            r.get("seconds"), " (100 MiB extrapolated: %s s)" % r["extrapolated_seconds"]
            if r.get("extrapolated_seconds") else "", r.get("peak_above_idle_mib"),
            r.get("error") or ""))
    body_cache.clear()


# -- report ----------------------------------------------------------------------------------

def _ratio(kind_num, flup_num, higher):
    if not kind_num or not flup_num:
        return None
    return kind_num / flup_num if higher else flup_num / kind_num


def _table(rows, kinds):
    """rows: (metric, {kind: display}, {kind: number or None}, higher_is_better, note);
    a ratio is shown where flup and the kind both have a number; ``note`` follows it."""
    others = [k for k in kinds if k != "flup"]
    head = ["metric"] + [KIND_LABEL[k] for k in kinds]
    if "flup" in kinds:
        head += ["%s vs flup" % KIND_LABEL[k].replace("flupfast ", "") for k in others]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for metric, disp, num, higher, note in rows:
        cells = [metric] + [disp.get(k, "n/a") for k in kinds]
        if "flup" in kinds:
            for k in others:
                r = _ratio(num.get(k), num.get("flup"), higher) if higher is not None else None
                cells.append("%.2fx%s" % (r, note) if r else "")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _hello_rows(hello, kinds, levels, modes, what):
    rows = []
    for level in levels:
        for mode in modes:
            disp, num, ldisp, lnum, cdisp, cnum = {}, {}, {}, {}, {}, {}
            for kind in kinds:
                r = hello.get(level, {}).get(kind, {}).get(mode, {})
                if "rps" not in r:
                    disp[kind] = "failed: %s" % str(r.get("error") or r.get("crashed") or
                                                    "not run")[:80]
                    continue
                extra = []
                if r.get("errors"):
                    extra.append("%d errors" % r["errors"])
                if r.get("bad_status"):
                    extra.append("%d bad status" % r["bad_status"])
                if r.get("stalled_connections"):
                    extra.append("%d/%d conns stalled" % (r["stalled_connections"],
                                                          r["connections"]))
                if r.get("crashed"):
                    extra.append("server died")
                num[kind] = r["rps"] if not r.get("bad_status") else None
                disp[kind] = _fmt(r["rps"]) + (" (%s)" % ", ".join(extra) if extra else "")
                lnum[kind] = r.get("latency_ms", {}).get("p99")
                ldisp[kind] = _fmt(lnum[kind], " ms")
                cnum[kind] = r.get("server_cpu_us_per_request")
                cdisp[kind] = _fmt(cnum[kind], " us")
            rows.append(("hello req/s, %s mode, %s, log level %s" % (mode, what, level), disp,
                         num, True, ""))
            rows.append(("  p99 latency (%s, %s)" % (mode, level), ldisp, lnum, False, ""))
            rows.append(("  server CPU per request (%s, %s)" % (mode, level), cdisp, cnum,
                         False, ""))
    return rows


def _transfer_rows(label, per_kind, full_mib):
    """Rows for one transfer: seconds (flup possibly capped and extrapolated), throughput,
    peak RSS."""
    sdisp, snum, tdisp, tnum, rdisp = {}, {}, {}, {}, {}
    note = ""
    for kind, r in per_kind.items():
        if not r:
            continue
        if r.get("seconds"):
            best = " (best %s)" % _fmt(r["best_seconds"], " s") if len(
                r.get("seconds_runs", ())) > 2 else ""
            if r.get("extrapolated_seconds"):
                sdisp[kind] = "%s at %g MiB%s; **~%s per %d MiB (extrapolated)**" % (
                    _fmt(r["seconds"], " s"), r["size_mib"], best,
                    _fmt(r["extrapolated_seconds"], " s"), full_mib)
                snum[kind] = r["extrapolated_seconds"]
                note = " (vs extrapolated)"
            else:
                sdisp[kind] = _fmt(r["seconds"], " s") + best
                snum[kind] = r["seconds"]
            tnum[kind] = r.get("mib_per_s")
            tdisp[kind] = _fmt(tnum[kind], " MiB/s") + (
                " (at %g MiB)" % r["size_mib"] if r["size_mib"] != full_mib else "") + (
                " (INVALID: %s)" % r["invalid"] if r.get("invalid") else
                "" if r.get("checked") else " (UNCHECKED)")
        elif r.get("timed_out_after"):
            sdisp[kind] = "> %.0f s at %g MiB (timeout)" % (r["timed_out_after"], r["size_mib"])
        else:
            sdisp[kind] = "failed: %s" % str(r.get("error") or r.get("crashed"))[:80]
        if r.get("crashed"):
            sdisp[kind] += " (server died: %s)" % r["crashed"][:60]
        if "peak_above_idle_mib" in r:
            rdisp[kind] = _fmt(r["peak_above_idle_mib"], " MiB") + (
                " (%g MiB)" % r["size_mib"] if r["size_mib"] != full_mib else "")
    return [(label + ": seconds", sdisp, snum, False, note),
            ("  throughput", tdisp, tnum, True, ""),
            ("  peak RSS above idle", rdisp, {}, None, "")]


def _syscall_row(label, sc, kinds):
    disp = {}
    for kind in kinds:
        r = sc.get(kind)
        if r and "total_per_request" in r:
            disp[kind] = "%s: %s" % (_fmt(r["total_per_request"]), ", ".join(
                "%s %g" % kv for kv in list(r["per_request"].items())[:6]))
        elif r:
            disp[kind] = "failed: %s" % r.get("error")
    return (label, disp, {}, None, "")


def render_sections(results):
    """Markdown lines of the SCGI and AJP tables (empty when they did not run)."""
    kinds = results["kinds"]
    cfg = results["config"]
    levels = cfg.get("proto_levels", ["INFO"])
    modes = results.get("modes", ["thread", "fork"])
    full = cfg["upload_mib"]
    lines = []
    scgi = results.get("scgi")
    if scgi:
        rows = _hello_rows(scgi.get("hello", {}), kinds, levels, modes,
                           "%d conns, one request per connection" % cfg["conns"])
        tr = scgi.get("transfers", {})
        for key, label in (("upload_read65536", "%d MiB upload, app read(65536)" % full),
                           ("upload_readline", "%d MiB upload, app readline()" % full),
                           ("download", "%d MiB download, one bytes object"
                            % cfg["download_mib"])):
            rows += _transfer_rows(label, {k: tr.get(k, {}).get(key) for k in kinds}, full)
        if scgi.get("syscalls"):
            rows.append(_syscall_row("syscalls per request, thread mode, 1000 sequential "
                                     "requests, log level WARNING", scgi["syscalls"], kinds))
        if scgi.get("syscalls_fork"):
            rows.append(_syscall_row("syscalls per request, fork mode (all processes), 1000 "
                                     "sequential requests, log level WARNING",
                                     scgi["syscalls_fork"], kinds))
        lines += ["## SCGI (Unix socket)", ""] + _table(rows, kinds) + [""]
    ajp = results.get("ajp")
    if ajp:
        rows = _hello_rows(ajp.get("hello", {}), kinds, levels, modes,
                           "%d persistent conns, direct" % cfg["conns"])
        tr = ajp.get("transfers", {})
        for packet in (8192, 65536):
            rows += _transfer_rows(
                "%d MiB upload, direct, %d KiB packets%s, app read(65536)" % (
                    full, packet // 1024, " (flupfast --ajp-packet-size 65536)"
                    if packet != 8192 else ""),
                {k: tr.get(k, {}).get("upload_%d" % packet) for k in kinds}, full)
        ap = ajp.get("apache")
        if ap:
            if ap.get("error"):
                rows.append(("via Apache: failed", {k: ap["error"][:100] for k in kinds}, {},
                             None, ""))
            for level in levels:
                disp, num, cdisp, cnum, pdisp, pnum = {}, {}, {}, {}, {}, {}
                for kind in kinds:
                    r = ap.get("levels", {}).get(level, {}).get(kind, {})
                    h = r.get("hello")
                    if not h or not h.get("rps"):
                        disp[kind] = "failed: %s" % str(r.get("error") or r.get("crashed") or
                                                        (h or {}).get("error"))[:80]
                        continue
                    bad = []
                    if r.get("hello_check") != "ok":
                        bad.append("check: %s" % r.get("hello_check"))
                    if h.get("failed") or h.get("non_2xx"):
                        bad.append("%s failed, %s non-2xx" % (h["failed"], h["non_2xx"]))
                    if r.get("crashed"):
                        bad.append("backend died")
                    num[kind] = h["rps"] if not bad else None
                    disp[kind] = _fmt(h["rps"]) + (" (%s)" % "; ".join(bad) if bad else "")
                    pnum[kind] = h.get("p99_ms")
                    pdisp[kind] = "%s ms" % h.get("p99_ms")
                    cnum[kind] = h.get("backend_cpu_us_per_request")
                    cdisp[kind] = _fmt(cnum[kind], " us")
                rows.append(("hello req/s via Apache mod_proxy_ajp (ab, %d conns), thread "
                             "mode, log level %s" % (cfg["conns"], level), disp, num, True, ""))
                rows.append(("  p99 latency (ab, whole ms)", pdisp, pnum, False, ""))
                rows.append(("  backend CPU per request", cdisp, cnum, False, ""))
            up = ap.get("upload", {})
            rows += _transfer_rows(
                "%d MiB upload via Apache (HTTP POST, ProxyIOBufferSize 65536), read(65536)"
                % full, {k: up.get(k) for k in kinds}, full)
        if ajp.get("syscalls"):
            rows.append(_syscall_row("syscalls per request, thread mode, one persistent "
                                     "connection, log level WARNING", ajp["syscalls"], kinds))
        lines += ["## AJP13 (TCP loopback)", ""] + _table(rows, kinds) + [""]
    return lines


def evaluate_targets(results):
    """Issue 3 (SCGI) and issue 4 (AJP) targets, for the compiled backend."""
    kind = "compiled" if "compiled" in results["kinds"] else "pure"
    out = []
    for level, per in results.get("scgi", {}).get("hello", {}).items():
        f = per.get("flup", {}).get("fork", {}).get("rps")
        m = per.get(kind, {}).get("fork", {}).get("rps")
        if f and m:
            out.append({"target": "SCGI, %s, fork mode, log level %s: >= 1.5x flup hello "
                                  "requests/s" % (kind, level),
                        "value": "%.2fx (%.0f vs %.0f req/s)" % (m / f, m, f),
                        "met": m / f >= 1.5})
    ajp = results.get("ajp", {})
    for level, per in ajp.get("hello", {}).items():
        for mode in ("thread", "fork"):
            f = per.get("flup", {}).get(mode, {}).get("rps")
            m = per.get(kind, {}).get(mode, {}).get("rps")
            if f and m:
                out.append({"target": "AJP direct, %s, %s mode, log level %s: >= 10x flup "
                                      "hello requests/s" % (kind, mode, level),
                            "value": "%.1fx (%.0f vs %.0f req/s)" % (m / f, m, f),
                            "met": m / f >= 10})
    for level, per in ajp.get("apache", {}).get("levels", {}).items():
        f = (per.get("flup", {}).get("hello") or {}).get("rps")
        m = (per.get(kind, {}).get("hello") or {}).get("rps")
        if f and m:
            out.append({"target": "AJP via Apache, %s, log level %s: >= 10x flup hello "
                                  "requests/s" % (kind, level),
                        "value": "%.1fx (%.0f vs %.0f req/s)" % (m / f, m, f),
                        "met": m / f >= 10})
    size = results["config"]["upload_mib"]
    for label, r in (("direct, 8 KiB packets", ajp.get("transfers", {}).get(kind, {}).get(
            "upload_8192")), ("direct, 64 KiB packets", ajp.get("transfers", {}).get(
                kind, {}).get("upload_65536")), ("via Apache, ProxyIOBufferSize 65536",
                                                 ajp.get("apache", {}).get("upload", {}).get(
                                                     kind))):
        if r and r.get("seconds"):
            out.append({"target": "AJP %s, %s: %d MiB upload <= 0.5 s" % (label, kind, size),
                        "value": "median %.3f s, best %.3f s" % (r["seconds"],
                                                                r["best_seconds"]),
                        "met": r["seconds"] <= 0.5})
    return out
