"""A running front as the peer tests see it (:class:`Front`: its processes, port, prefix and
how it splits paths and bodies) and the connection-counting proxy that proves or disproves
backend connection reuse. The nginx, Apache and lighttpd starters build these.
"""
import contextlib
import os
import selectors
import socket
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from tests.integration.http_client import HTTPClient
from tests.integration.processes import IO_TIMEOUT, ManagedProcess, ServerSpec, remove_tempdir

# --------------------------------------------------------------------------------------------
# Connection-counting proxy: proves (or disproves) FastCGI connection reuse end to end

class ConnCountingProxy:
    """Accepts on ``listen`` (Unix path or (host, port)), counts connections, and pipes each
    to ``target``. A server that closes after each response makes the front reconnect, which
    the count shows.
    """

    def __init__(self, listen, target):
        self.target = target
        self.accepted = 0
        self._lock = threading.Lock()
        self._closing = False
        self._conns = []
        if isinstance(listen, (str, Path)):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(listen))
            self.sock.bind(str(listen))
            os.chmod(str(listen), 0o777)
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind(listen)
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self._thread = threading.Thread(target=self._accept_loop, name="conn-counter",
                                        daemon=True)
        self._thread.start()

    def reset(self):
        with self._lock:
            self.accepted = 0

    def count(self):
        with self._lock:
            return self.accepted

    def _connect_target(self):
        family = socket.AF_UNIX if isinstance(self.target, (str, Path)) else socket.AF_INET
        up = socket.socket(family, socket.SOCK_STREAM)
        up.connect(str(self.target) if family == socket.AF_UNIX else self.target)
        return up

    def _accept_loop(self):
        while not self._closing:
            try:
                down, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            try:
                up = self._connect_target()
            except OSError:
                down.close()
                continue
            down.settimeout(None)
            self._conns += [down, up]
            threading.Thread(target=self._pipe, args=(down, up), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        """Copy both ways until both sides are done; half-closes are forwarded."""
        sel = selectors.DefaultSelector()
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        open_ends = 2
        try:
            while open_ends:
                for key, _ in sel.select(timeout=IO_TIMEOUT):
                    src, dst = key.fileobj, key.data
                    try:
                        data = src.recv(262144)
                    except OSError:
                        data = b""
                    if data:
                        try:
                            dst.sendall(data)
                        except OSError:
                            return
                    else:
                        sel.unregister(src)
                        open_ends -= 1
                        with contextlib.suppress(OSError):
                            dst.shutdown(socket.SHUT_WR)
        finally:
            sel.close()
            a.close()
            b.close()

    def close(self):
        self._closing = True
        self.sock.close()
        self._thread.join(5)
        for s in self._conns:
            with contextlib.suppress(OSError):
                s.close()


# --------------------------------------------------------------------------------------------
# Fronts

def apache_canonenc(wire_path):
    """A request path as mod_proxy re-encodes it for the backend (ap_proxy_canonenc):
    ``%21`` -> ``!``, ``%20`` stays, raw UTF-8 -> ``%C3%A9``. Seen in mod_proxy_ajp's req_uri
    and mod_proxy_scgi's PATH_INFO (``proxy-scgi-pathinfo``)."""
    raw = urllib.parse.unquote_to_bytes(wire_path.encode("latin-1"))
    return urllib.parse.quote(raw, safe="/!$&'()*+,;=:@~")


@dataclass
class Front:
    """A running web server in front of the app, plus what is behind it."""
    name: str
    port: int
    prefix: str                    # URL path mounted on the app ("" or "/probe.fcgi")
    server: ServerSpec
    processes: List[ManagedProcess] = field(default_factory=list)
    counted_port: Optional[int] = None       # same front, but via the counting proxy
    counter: Optional[ConnCountingProxy] = None
    keeps_backend_conn: bool = False         # the front asks for FCGI_KEEP_CONN and reuses
    kind: str = ""                           # nginx | proxy_fcgi | fcgid | lighttpd ...
    options: dict = field(default_factory=dict)
    workdir: Optional[Path] = None
    host: str = "127.0.0.1"
    # How the front splits the decoded path: "prefix" (SCRIPT_NAME = prefix), "script"
    # (SCRIPT_NAME = whole path, no PATH_INFO: nginx's stock fastcgi_params), "path"
    # (SCRIPT_NAME empty, PATH_INFO = whole path) or "raw" (SCRIPT_NAME empty, PATH_INFO = the
    # path as the front re-encodes it: AJP sends no PATH_INFO and flup's scriptName='' cut of
    # req_uri is not percent-decoded; flupfast keeps flup's undecoded cut).
    split: str = "path"
    # AJP13's req_uri is the path alone (the query is attribute 5) and becomes REQUEST_URI.
    uri_has_query: bool = True
    spools_chunked: bool = True    # the front reads a chunked body whole, then sets the length
    protocol: str = "fcgi"         # what the front speaks to the backend: fcgi, scgi, ajp
    # The backend can tell this front that a response was cut short (truncated-response-
    # signalled): false for SCGI and uwsgi over a Unix socket, which end at EOF and cannot
    # reset; None where the front passes the reset on only sometimes (mod_proxy_uwsgi).
    truncation_signalled: Optional[bool] = True

    def expected_split(self, full):
        """(SCRIPT_NAME, PATH_INFO) the app should see for the decoded request path."""
        if self.split == "prefix":
            return self.prefix, full[len(self.prefix):]
        if self.split == "script":
            return full, ""
        return "", full

    def sent_path(self, wire_path):
        """The request path as the front forwards it: mod_proxy_ajp re-encodes it (see
        apache_canonenc); the others send REQUEST_URI as it came."""
        return apache_canonenc(wire_path) if self.protocol == "ajp" else wire_path

    def expected_request_uri(self, path):
        """REQUEST_URI for ``path`` (relative to the app, possibly with a query)."""
        if self.uri_has_query:
            return self.url(path)
        return self.sent_path(self.url(path).split("?", 1)[0])

    def url(self, path):
        return self.prefix + path

    def client(self, port=None, timeout=IO_TIMEOUT):
        return HTTPClient(self.host, port or self.port, timeout=timeout)

    def request(self, method, path, **kw):
        """One request on a fresh connection to the front; path is relative to the app."""
        with contextlib.closing(self.client()) as c:
            return c.request(method, self.url(path), **kw)

    def log_sections(self):
        sections = []
        for p in self.processes:
            sections += p.log_sections()
        return sections

    def describe(self):
        return "\n".join("----- %s -----\n%s" % s for s in self.log_sections())

    def assert_alive(self):
        dead = [p for p in self.processes if not p.alive()]
        assert not dead, "died: %s\n%s" % (", ".join(p.name for p in dead), self.describe())

    def stop(self):
        try:
            for p in self.processes:
                p.stop()
            if self.counter is not None:
                self.counter.close()
        finally:
            if self.workdir is not None and not os.environ.get("FLUPFAST_PEER_KEEP"):
                remove_tempdir(self.workdir)
