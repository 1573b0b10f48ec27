"""The WSGI apps the benchmarks serve, the same for flup and flupfast.

It owns the body pattern both sides check transfers with; it must import nothing but the
standard library and keep per-request work out of the measurement: the download body and its
sha256 are built at import (``FLUPFAST_BENCH_DOWNLOAD_SIZES``), so the timed request only
hands one prebuilt bytes object to the server, and the upload app hashes only when asked.

  hello                      ``Hello world!\\n`` (flup's README example; one-item list)
  app  /upload?mode=M&check=C   read all of wsgi.input with M (read65536 | readline);
                                C = len (count bytes only: the timed run) or sha256 (the
                                check run); JSON {"length", "pieces", "sha256", "app_seconds"}
       /download?size=N         ONE bytes object of N pattern bytes, prebuilt; X-Sha256 header
       /sleep                   hello after time.sleep(0.05): a slow backend call; the
                                requests/s it reaches show how many run at once (pool growth)
       /cpu                     hello after a fixed pure-Python loop (CPU_LOOP iterations,
                                about 2 ms of one core here): the GIL and the fork pool
       /echo                    the request body (CONTENT_LENGTH bytes) sent back: seed 001's
                                71,453-byte POST (bench/scenarios/seeds.py)
       /                        hello
"""
import hashlib
import json
import os
import time

MIB = 1 << 20
HELLO = b"Hello world!\n"
SLEEP_SECONDS = 0.05
CPU_LOOP = 20000


def _block():
    # 1 MiB of sha256 output: random-looking bytes, a newline about every 256 bytes (random
    # data's density, so readline() meets lines of a realistic length).
    return b"".join(hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(MIB // 32))


_BLOCK = []


def block():
    """BLOCK, built on first use (a hello server does not pay for it: under callgrind,
    bench/drivers/callgrind.py, it was 40% of the start-up's instructions)."""
    if not _BLOCK:
        _BLOCK.append(_block())
    return _BLOCK[0]


def __getattr__(name):  # ``apps.BLOCK``, lazily (PEP 562)
    if name == "BLOCK":
        return block()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def pattern_bytes(size):
    """The first ``size`` bytes of BLOCK repeated."""
    data = block()
    reps, rest = divmod(size, len(data))
    return data * reps + data[:rest]


def pattern_chunks(size, chunk=MIB):
    """The same bytes as ``pattern_bytes(size)``, as an iterator of chunks."""
    data = block()
    sent = 0
    while sent < size:
        n = min(chunk, size - sent)
        yield data[:n] if n < len(data) else data
        sent += n


def pattern_sha256(size):
    h = hashlib.sha256()
    for piece in pattern_chunks(size):
        h.update(piece)
    return h.hexdigest()


# size -> (body, sha256 hex), built once at import so that a fork server's children share it.
_DOWNLOADS = {}
for _size in os.environ.get("FLUPFAST_BENCH_DOWNLOAD_SIZES", "").split(","):
    if _size.strip():
        _body = pattern_bytes(int(_size))
        _DOWNLOADS[len(_body)] = (_body, hashlib.sha256(_body).hexdigest())
del _size


def hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [HELLO]


def _query(environ):
    out = {}
    for part in environ.get("QUERY_STRING", "").split("&"):
        key, _, value = part.partition("=")
        out[key] = value
    return out


def _upload(environ, start_response, query):
    # As PEP 3333 asks, nothing is read beyond CONTENT_LENGTH: flup's SCGI wsgi.input is the
    # socket itself, and a read at the end would wait for bytes that never come.
    stream = environ["wsgi.input"]
    limit = int(environ.get("CONTENT_LENGTH") or -1)
    mode = query.get("mode", "read65536")
    check = query.get("check", "len")
    h = hashlib.sha256() if check == "sha256" else None
    length = pieces = 0
    held = []   # readline pieces are hashed in ~1 MiB batches (update() per line is slow)
    held_bytes = 0
    violations = 0  # check run only: pieces that break the file API (too long, inner newline)
    started = time.perf_counter()
    if mode == "read65536":
        read = stream.read
        while length != limit:
            left = limit - length
            data = read(65536 if limit < 0 or left >= 65536 else left)
            if not data:
                break
            length += len(data)
            pieces += 1
            if h is not None:
                h.update(data)
                violations += len(data) > 65536
    elif mode == "readline":
        readline = stream.readline
        while length != limit:
            left = limit - length
            # unbounded, as apps call it; bounded only near the end (a last line without a
            # newline must not wait on flup's SCGI socket)
            data = readline() if limit < 0 or left >= 65536 else readline(left)
            if not data:
                break
            length += len(data)
            pieces += 1
            if h is not None:
                violations += data.find(b"\n") not in (-1, len(data) - 1)
                held.append(data)
                held_bytes += len(data)
                if held_bytes >= MIB:
                    h.update(b"".join(held))
                    held = []
                    held_bytes = 0
    else:
        raise ValueError("unknown upload mode %r" % mode)
    if h is not None and held:
        h.update(b"".join(held))
    body = json.dumps({
        "length": length, "pieces": pieces, "mode": mode,
        "sha256": h.hexdigest() if h is not None else None, "violations": violations,
        "app_seconds": round(time.perf_counter() - started, 6),
        "pid": os.getpid(),
    }).encode("ascii")
    start_response("200 OK", [("Content-Type", "application/json"),
                              ("Content-Length", str(len(body)))])
    return [body]


def _download(environ, start_response, query):
    size = int(query.get("size", "0"))
    cached = _DOWNLOADS.get(size)
    if cached is None:
        # Not prebuilt: build it now (then the timing includes this; run.py always prebuilds).
        body = pattern_bytes(size)
        cached = _DOWNLOADS[size] = (body, hashlib.sha256(body).hexdigest())
    body, digest = cached
    start_response("200 OK", [("Content-Type", "application/octet-stream"),
                              ("X-Sha256", digest)])
    return [body]


def _sleep(environ, start_response):
    time.sleep(SLEEP_SECONDS)
    return hello(environ, start_response)


def _cpu(environ, start_response):
    x = 0
    for i in range(CPU_LOOP):
        x += i * i
    return hello(environ, start_response)


def _echo(environ, start_response):
    # read() up to CONTENT_LENGTH, never beyond (see _upload)
    left = int(environ.get("CONTENT_LENGTH") or 0)
    read = environ["wsgi.input"].read
    chunks = []
    while left > 0:
        data = read(min(left, 65536))
        if not data:
            break
        chunks.append(data)
        left -= len(data)
    body = b"".join(chunks)
    start_response("200 OK", [("Content-Type", "application/octet-stream"),
                              ("Content-Length", str(len(body)))])
    return [body]


def app(environ, start_response):
    path = environ.get("PATH_INFO") or environ.get("REQUEST_URI", "/").split("?", 1)[0]
    if path == "/echo":
        return _echo(environ, start_response)
    if path == "/sleep":
        return _sleep(environ, start_response)
    if path == "/cpu":
        return _cpu(environ, start_response)
    query = _query(environ)
    if path == "/upload":
        return _upload(environ, start_response, query)
    if path == "/download":
        return _download(environ, start_response, query)
    return hello(environ, start_response)
