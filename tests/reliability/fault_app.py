"""The WSGI app the fault-injection and access tests run under ``python -m flupfast``.

Routes (first segment of PATH_INFO, else of REQUEST_URI), all answering ``text/plain``:
  /                     ``hello <pid>``
  /hold?tag=T           writes ``$FAULT_DIR/T.pid`` (its pid), reads the whole body (the test
                        holds the request by withholding the body), answers ``held T <pid>``
  /upload               reads the whole body, answers its length
  /download?size=N      N bytes
  /hang?how=sleep|spin  never returns on its own (the fork servers' ``timeout=`` ends it)
  /ticker               starts (once per process) a background thread counting every 10 ms, the
                        app's own SIGALRM handler and a 1000 s alarm; answers ``<pid> <count>
                        <thread alive> <SIGALRM handler> <alarm still armed>``
  /leak                 opens /dev/null and keeps it; answers ``<pid> <open fds>``
  /spool?tag=T[&raise=1]  waits for ``$FAULT_DIR/T.go``, then reads the body; answers its
                        length, or raises
Every request appends its path to ``$FAULT_DIR/calls`` so a test can prove one never ran.
Standard library only (and tests/waiting.py).
"""
import os
import signal
import threading
import time
from urllib.parse import parse_qs

from tests.waiting import wait_until

FAULT_DIR = os.environ.get("FAULT_DIR", ".")
WAIT_LIMIT = 60.0  # no route waits longer than this for the test, whatever happens

_leaked = []
_ticker = {"count": 0, "thread": None, "pid": None}


def _alarm_handler(signum, frame):
    """The app's own SIGALRM handler: the server's timeout must put it back."""


def _tick():
    while True:
        _ticker["count"] += 1
        time.sleep(0.01)


def _read_body(environ):
    stream = environ["wsgi.input"]
    total = 0
    while True:
        data = stream.read(65536)
        if not data:
            return total
        total += len(data)


def _route(environ):
    for value in (environ.get("PATH_INFO") or "", (environ.get("REQUEST_URI") or "")
                  .split("?", 1)[0]):
        segment = "/" + value.lstrip("/").split("/", 1)[0]
        if segment != "/" or value:
            return segment
    return "/"


def app(environ, start_response):
    route = _route(environ)
    query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
    with open(os.path.join(FAULT_DIR, "calls"), "a") as calls:
        calls.write("%s %s\n" % (route, environ.get("QUERY_STRING", "")))
    pid = os.getpid()

    if route == "/hold":
        tag = query["tag"]
        with open(os.path.join(FAULT_DIR, tag + ".pid"), "w") as f:
            f.write(str(pid))
        _read_body(environ)
        body = "held %s %d" % (tag, pid)
    elif route == "/upload":
        body = str(_read_body(environ))
    elif route == "/download":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return [b"x" * int(query["size"])]
    elif route == "/hang":
        if query.get("how") == "spin":
            while True:
                pass
        while True:
            time.sleep(3600)
    elif route == "/ticker":
        if _ticker["pid"] != pid:
            _ticker["pid"] = pid
            _ticker["thread"] = threading.Thread(target=_tick, daemon=True)
            _ticker["thread"].start()
            signal.signal(signal.SIGALRM, _alarm_handler)
            signal.setitimer(signal.ITIMER_REAL, 1000)  # the app's own alarm
        handler = signal.getsignal(signal.SIGALRM)
        body = "%d %d %s %s %s" % (pid, _ticker["count"], _ticker["thread"].is_alive(),
                                   getattr(handler, "__name__", handler),
                                   signal.getitimer(signal.ITIMER_REAL)[0] > 0)
    elif route == "/leak":
        _leaked.append(open(os.devnull))
        body = "%d %d" % (pid, len(os.listdir("/proc/self/fd")))
    elif route == "/spool":
        go = os.path.join(FAULT_DIR, query["tag"] + ".go")
        wait_until(lambda: os.path.exists(go), WAIT_LIMIT, what=go, interval=0.01)
        length = _read_body(environ)
        if query.get("raise"):
            raise RuntimeError("fault_app: raising after reading %d bytes" % length)
        body = str(length)
    else:
        body = "hello %d" % pid
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [body.encode("ascii")]
