"""The probe WSGI application: every integration test and benchmark talks to it.

It owns the routes below and the deterministic body patterns both sides use to check
transfers by sha256. It must import nothing but the standard library (it is copied next
to a mod_fcgid script and run by Debian's python3 in a throw-away venv).

Routes (dispatch on the first segment of PATH_INFO; when PATH_INFO is empty or names no
route, on the path of REQUEST_URI: nginx's stock ``fastcgi_params`` and mod_proxy_fcgi send
no PATH_INFO, and flup then slices one out of the raw REQUEST_URI):

  /                     ``Hello world!\\n`` as a one-element list
  /environ[/...]        JSON: str/int/bool environ values, wsgi.* flags, input type name
  /upload?mode=M        read all of wsgi.input with M (read, read65536, readline,
                        readline65536, iter); JSON {"length": n, "sha256": hex, ...}
  /upload?limit=N       read only the first N bytes (read(65536) calls), then answer
  /upload?pad=N         the JSON answer carries N more bytes ("pad"): a large answer
  /download?size=N      ONE bytes object of N pattern bytes; header X-Sha256
  /stream?chunks=N&size=M   a generator of N chunks of M pattern bytes
  /write                body sent through start_response's write(); returns []
  /error                raises before start_response
  /error-after          raises after yielding a first chunk
  /str                  a str body (flup encodes it latin-1)
  /sleep?ms=N           sleeps, then answers ``slept N``
  /barrier?dir=D&n=N    a rendezvous across processes: leaves a file in directory D, waits
                        (at most 15 s) until D holds N files, then answers ``met N``; else
                        ``alone K``. Only N requests served at once can all meet.
  /head                 a fixed body with Content-Length, for HEAD requests
  /redirect?<text>      302 with ``Location: /x`` + the percent-decoded query string, as an
                        app that trusts its input would (response splitting:
                        known_differences 'response-head-checked')
  /bigheader?size=N     a header X-Big of N bytes
  /headers?count=N      N headers X-Header-<i>
"""
import hashlib
import json
import os
import tempfile
import threading
import time
from urllib.parse import parse_qs, unquote

HELLO = b"Hello world!\n"
HEAD_BODY = b"head body: 0123456789\n" * 3
STR_BODY = "caf\xe9 na\xefve \xa9 latin-1\n"  # only latin-1 code points
WRITE_CHUNKS = (b"written ", b"through ", b"write()\n")
ERROR_AFTER_FIRST = b"first chunk\n"

_MIB = 1 << 20
_LONG_LINE = 150 * 1024  # each MiB of the pattern opens with a line longer than 64 KiB
_pattern_lock = threading.Lock()
_pattern = None


def pattern_block():
    """1 MiB of deterministic bytes; the unit every body in the tests repeats.

    sha256 of a counter, so a misplaced or repeated chunk changes the digest. Newlines fall
    about every 256 bytes (readline stays cheap), except in the first 150 KiB, which hold no
    newline at all, so readline() and readline(65536) also meet a line longer than 64 KiB.
    """
    global _pattern
    if _pattern is None:
        with _pattern_lock:
            if _pattern is None:
                raw = b"".join(hashlib.sha256(i.to_bytes(4, "big")).digest()
                               for i in range(_MIB // 32))
                _pattern = raw[:_LONG_LINE].replace(b"\n", b" ") + raw[_LONG_LINE:]
    return _pattern


def pattern_bytes(size):
    """The first ``size`` bytes of the repeated pattern, as one bytes object."""
    block = pattern_block()
    reps, rest = divmod(size, len(block))
    return block * reps + block[:rest]


def pattern_chunks(size, chunk=256 * 1024):
    """The first ``size`` pattern bytes as an iterator of chunks (for uploads)."""
    block = pattern_block()
    sent = 0
    while sent < size:
        offset = sent % len(block)
        n = min(chunk, len(block) - offset, size - sent)
        yield block[offset:offset + n]
        sent += n


def pattern_sha256(size):
    h = hashlib.sha256()
    for piece in pattern_chunks(size, chunk=_MIB):
        h.update(piece)
    return h.hexdigest()


ROUTES = ("/", "/environ", "/upload", "/download", "/stream", "/write", "/error",
          "/error-after", "/str", "/sleep", "/head", "/redirect", "/bigheader", "/headers",
          "/barrier")
BARRIER_WAIT = 15.0


def _first_segment(path):
    return "/" + path.lstrip("/").split("/", 1)[0]


def _route(environ):
    path_info = environ.get("PATH_INFO") or ""
    if path_info:
        route = _first_segment(path_info)
        if route in ROUTES:
            return route
    request_uri = environ.get("REQUEST_URI") or ""
    if request_uri:
        route = _first_segment(request_uri.split("?", 1)[0])
        if route in ROUTES:
            return route
    return _first_segment(path_info)


def _query(environ):
    return {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}


def _environ_view(environ):
    view = {}
    for key, value in environ.items():
        if isinstance(value, (str, bool, int)):
            view[key] = value
    view["wsgi.version"] = list(environ.get("wsgi.version", ()))
    for key in ("wsgi.multithread", "wsgi.multiprocess", "wsgi.run_once",
                "wsgi.url_scheme", "wsgi.input_terminated"):
        if key in environ:
            view[key] = environ[key]
    view["wsgi.input.type"] = type(environ["wsgi.input"]).__name__
    view["wsgi.errors.type"] = type(environ["wsgi.errors"]).__name__
    view["probe.pid"] = os.getpid()
    return view


def _read_all(stream, mode, limit=None):
    """Yield every piece of ``stream`` read with ``mode``; each piece is non-empty."""
    if limit is not None:
        while limit > 0:
            data = stream.read(min(65536, limit))
            if not data:
                return
            limit -= len(data)
            yield data
    elif mode == "read":
        data = stream.read()
        if data:
            yield data
    elif mode == "read65536":
        while True:
            data = stream.read(65536)
            if not data:
                return
            yield data
    elif mode == "readline":
        while True:
            data = stream.readline()
            if not data:
                return
            yield data
    elif mode == "readline65536":
        while True:
            data = stream.readline(65536)
            if not data:
                return
            if len(data) > 65536:
                raise AssertionError("readline(65536) returned %d bytes" % len(data))
            yield data
    elif mode == "iter":
        for data in stream:
            yield data
    else:
        raise ValueError("unknown upload mode %r" % mode)


def _json(start_response, obj, status="200 OK"):
    body = json.dumps(obj, sort_keys=True).encode("ascii")
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(body)))])
    return [body]


def app(environ, start_response):
    route = _route(environ)
    query = _query(environ)

    if route == "/":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [HELLO]

    if route == "/environ":
        return _json(start_response, _environ_view(environ))

    if route == "/upload":
        mode = query.get("mode", "read65536")
        limit = int(query["limit"]) if "limit" in query else None
        h = hashlib.sha256()
        length = pieces = 0
        started = time.monotonic()
        for piece in _read_all(environ["wsgi.input"], mode, limit):
            h.update(piece)
            length += len(piece)
            pieces += 1
        return _json(start_response, {
            "length": length, "sha256": h.hexdigest(), "mode": mode, "pieces": pieces,
            "content_length": environ.get("CONTENT_LENGTH"),
            "seconds": round(time.monotonic() - started, 3),
            "pad": "x" * int(query.get("pad", "0"))})

    if route == "/download":
        body = pattern_bytes(int(query.get("size", "0")))
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("X-Sha256", hashlib.sha256(body).hexdigest())])
        return [body]

    if route == "/stream":
        chunks, size = int(query.get("chunks", "4")), int(query.get("size", "1024"))
        total = chunks * size
        start_response("200 OK", [("Content-Type", "application/octet-stream"),
                                  ("X-Sha256", pattern_sha256(total))])

        def generate():
            block = pattern_bytes(total)
            for i in range(chunks):
                yield block[i * size:(i + 1) * size]
        return generate()

    if route == "/write":
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        for piece in WRITE_CHUNKS:
            write(piece)
        return []

    if route == "/error":
        raise RuntimeError("probe: error before start_response")

    if route == "/error-after":
        start_response("200 OK", [("Content-Type", "text/plain")])

        def generate():
            yield ERROR_AFTER_FIRST
            raise RuntimeError("probe: error after the first chunk")
        return generate()

    if route == "/str":
        start_response("200 OK", [("Content-Type", "text/plain; charset=latin-1")])
        return [STR_BODY]

    if route == "/sleep":
        ms = int(query.get("ms", "100"))
        time.sleep(ms / 1000.0)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [("slept %d\n" % ms).encode("ascii")]

    if route == "/barrier":
        folder, count = query["dir"], int(query.get("n", "2"))
        fd, _ = tempfile.mkstemp(dir=folder)
        os.close(fd)
        deadline = time.monotonic() + BARRIER_WAIT
        while True:
            seen = len(os.listdir(folder))
            if seen >= count or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [(("met %d\n" % count) if seen >= count else ("alone %d\n" % seen)).encode()]

    if route == "/head":
        start_response("200 OK", [("Content-Type", "text/plain"),
                                  ("Content-Length", str(len(HEAD_BODY)))])
        return [HEAD_BODY]

    if route == "/redirect":
        start_response("302 Found", [
            ("Location", "/x" + unquote(environ.get("QUERY_STRING", ""), "latin-1")),
            ("Content-Type", "text/plain")])
        return [b"moved\n"]

    if route == "/bigheader":
        start_response("200 OK", [("Content-Type", "text/plain"),
                                  ("X-Big", "b" * int(query.get("size", "0")))])
        return [HELLO]

    if route == "/headers":
        start_response("200 OK", [("Content-Type", "text/plain")] + [
            ("X-Header-%d" % i, "v") for i in range(int(query.get("count", "0")))])
        return [HELLO]

    body = ("no route %s (SCRIPT_NAME=%r PATH_INFO=%r REQUEST_URI=%r)\n" % (
        route, environ.get("SCRIPT_NAME"), environ.get("PATH_INFO"),
        environ.get("REQUEST_URI"))).encode("latin-1")
    start_response("404 Not Found", [("Content-Type", "text/plain"),
                                     ("Content-Length", str(len(body)))])
    return [body]
