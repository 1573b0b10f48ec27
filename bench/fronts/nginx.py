"""nginx as the front of the FastCGI, SCGI and HTTP backends (fastcgi_pass, scgi_pass,
proxy_pass): its config (one worker, no access log; per backend an upstream with or without a
keepalive pool, on its own port) and a static server for the front's own cost. Process control
is fronts.front's."""
import contextlib
import os

from bench.base import free_port
from bench.fronts.front import Front
from tests.integration.front_confs import nginx_config

NGINX = "/usr/sbin/nginx"


# The http block; the frame around it is the peer tests' (tests/integration/front_confs.py).
NGINX_HTTP = """\
    client_max_body_size 0;
    # A body up to 128 KiB stays in memory (seed 001's 71,453 bytes, the peers' echo): at the
    # default 16 KiB nginx writes each to a temporary file and reads it back, 0.5-0.7 ms of
    # its own per request, and the echo rows then measure nginx's disk path, not the backend.
    client_body_buffer_size 128k;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
{servers}
    # The front's own cost: a static file, and a POST read and thrown away; /fwd/ the same
    # through nginx's own proxy (buffered as the backends' bodies are): nginx forwarding
    # 100 MiB to and from a backend that costs nothing.
    server {{
        listen 127.0.0.1:{static_port};
        root {root}/static;
        location = /discard {{
            return 204;
        }}
        location /fwd/ {{
            proxy_pass http://127.0.0.1:{static_port}/;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
"""


NGINX_FCGI_SERVER = """
    upstream b{n} {{
        server unix:{sock};
        {keepalive}
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_NAME "";
            fastcgi_param PATH_INFO $uri;
            fastcgi_pass b{n};
            fastcgi_keep_conn {keep};
            fastcgi_read_timeout {timeout}s;
            fastcgi_send_timeout {timeout}s;
        }}
    }}
"""


# SCGI and uwsgi: nginx's two modules of the same shape (a connection per request); {mod} is
# scgi or uwsgi, with its stock params file.
NGINX_CGI_MODULE_SERVER = """
    server {{{{
        listen 127.0.0.1:{{port}};
        location / {{{{
            include /etc/nginx/{mod}_params;
            {mod}_param SCRIPT_NAME "";
            {mod}_param PATH_INFO $uri;
            {mod}_pass unix:{{sock}};
            {mod}_read_timeout {{timeout}}s;
            {mod}_send_timeout {{timeout}}s;
        }}}}
    }}}}
"""


# HTTP backends (gunicorn, uWSGI --http-socket): without a pool nginx speaks HTTP/1.0 and
# closes each upstream connection; with ``keepalive`` it needs HTTP/1.1 and no "Connection:
# close" passed on.
NGINX_HTTP_SERVER = """
    upstream b{n} {{
        server unix:{sock};
        {keepalive}
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://b{n};
            proxy_set_header Host $host;
            {http11}
            proxy_read_timeout {timeout}s;
            proxy_send_timeout {timeout}s;
        }}
    }}
"""


TEMPLATES = {"fcgi": NGINX_FCGI_SERVER, "scgi": NGINX_CGI_MODULE_SERVER.format(mod="scgi"),
             "uwsgi": NGINX_CGI_MODULE_SERVER.format(mod="uwsgi"), "http": NGINX_HTTP_SERVER}


def server_block(n, proto, sock, port, keep, timeout, pool=16):
    """One backend's upstream and server blocks; ``keep``: an upstream keepalive pool of
    ``pool`` connections (FastCGI: and fastcgi_keep_conn on)."""
    return TEMPLATES[proto].format(
        n=n, sock=sock, port=port, keep="on" if keep else "off",
        keepalive="keepalive %d;" % pool if keep else "", timeout=int(timeout),
        http11='proxy_http_version 1.1;\n            proxy_set_header Connection "";'
        if keep else "")


class Nginx(Front):
    """nginx in the foreground from its own config; ``backends`` maps a key to (protocol,
    Unix socket path, keep_conn); ``ports[key]`` is where each is served, ``ports["static"]``
    the static server (``static_root``)."""

    name = "nginx"

    def __init__(self, workdir, backends, timeout, static_root, pool=16):
        root = os.path.join(workdir, "nginx")
        super().__init__(root, root)
        os.makedirs(os.path.join(self.root, "tmp"), exist_ok=True)
        with contextlib.suppress(FileNotFoundError):   # a fresh log per front
            os.unlink(os.path.join(self.root, "error.log"))
        if os.path.lexists(os.path.join(self.root, "static")):
            os.unlink(os.path.join(self.root, "static"))
        os.symlink(static_root, os.path.join(self.root, "static"))
        servers = []
        for n, (key, (proto, sock, keep)) in enumerate(backends.items()):
            self.ports[key] = free_port()
            servers.append(server_block(n, proto, sock, self.ports[key], keep, timeout, pool))
        self.ports["static"] = free_port()
        self.conf = os.path.join(self.root, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(nginx_config(
                self.root, NGINX_HTTP.format(root=self.root, servers="".join(servers),
                                             static_port=self.ports["static"]),
                worker_connections=2048, user="root root", error_level="warn",
                access_log=False, main="worker_rlimit_nofile 4096;"))

    def start(self):
        return self._start([NGINX, "-p", self.root, "-c", self.conf, "-e",
                            os.path.join(self.root, "error.log")], [self.ports["static"]])
