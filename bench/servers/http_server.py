"""Servers under test that speak HTTP themselves (gunicorn, uWSGI's ``--http-socket``): what
they share, the hello check at start-up over HTTP/1.0 instead of the load client's protocols.
A front reaches them with ``proxy_pass`` (nginx) or mod_proxy_http (Apache)."""
import re
import socket

from bench.servers.server import Server


def http_hello(address, timeout):
    """GET / over HTTP/1.0 on ``address`` (a Unix socket path or "HOST:PORT") -> the status
    code, or raises OSError."""
    if address.startswith("/"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        target = address
    else:
        host, _, port = address.rpartition(":")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        target = (host, int(port))
    with sock:
        sock.settimeout(timeout)
        sock.connect(target)
        sock.sendall(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
        data = b""
        while b"\r\n" not in data:
            more = sock.recv(4096)
            if not more:
                break
            data += more
    m = re.match(rb"HTTP/1\.\d (\d{3})", data)
    if not m:
        raise OSError("not an HTTP answer: %r" % data[:80])
    return int(m.group(1))


class HTTPServer(Server):
    """A server subprocess answering HTTP on a Unix socket (nginx) or TCP loopback (Apache,
    whose www-data workers cannot connect to root's sockets). ``settings`` (workers,
    threads...) are shown beside its figures."""

    def __init__(self, kind, app, workdir, settings, tcp=False, env_extra=None,
                 protocol="http"):
        super().__init__(kind, "http", app, workdir, env_extra=env_extra, protocol=protocol,
                         tcp=tcp)
        self.settings = dict(settings)

    def bind(self, unix_prefix):
        return "127.0.0.1:%d" % self.port if self.port else unix_prefix + self.sock_path

    def hello_problem(self, client, timeout):
        if self.protocol != "http":   # gunicorn --protocol uwsgi: the load client's hello
            return super().hello_problem(client, timeout)
        try:
            status = http_hello(self.address, timeout)
        except OSError as exc:
            return "%s: %s" % (type(exc).__name__, exc)
        return None if status == 200 else "status %d" % status
