"""Apache 2.4 as a front (event MPM, one child; 32 threads unless asked for more:
``threads`` must cover the client count, or Apache drops connections for every backend
alike): its config, with per backend a virtual host on its own port: mod_proxy_ajp,
mod_proxy_fcgi, mod_proxy_scgi or mod_proxy_http to a TCP loopback port (pooled backend
connections, ProxyIOBufferSize 65536), or a "raw" host whose directives the caller gives
(mod_wsgi, CGI, mod_fcgid: servers/apache_hosted.py); and a static virtual host for the
front's own cost. Process control is fronts.front's."""
import contextlib
import os

from bench.base import free_port
from bench.fronts.front import Front
from tests.integration.front_confs import APACHE_HEAD, APACHE_KEEPALIVE

APACHE = "/usr/sbin/apache2"
APACHE_MODULES = "/usr/lib/apache2/modules"


# The head and keep-alive lines are the peer tests' (one source: tests/integration/front_confs.py).
APACHE_CONF = APACHE_HEAD + """\
{modules}
# One child process: one mod_proxy connection pool per backend, as many connections as
# threads; no access log (the front end's own cost stays small).
StartServers 1
ServerLimit 1
ThreadLimit {thread_limit}
ThreadsPerChild {threads}
MaxRequestWorkers {threads}
MinSpareThreads 1
MaxSpareThreads {threads}
""" + APACHE_KEEPALIVE + """\
ProxyIOBufferSize {io_buffer}
{vhosts}
"""


APACHE_VHOST = """\
Listen 127.0.0.1:{port}
<VirtualHost 127.0.0.1:{port}>
    ProxyPass "/" "{scheme}://127.0.0.1:{backend}/" {reuse} timeout={timeout}
</VirtualHost>
"""

# scheme -> the module that speaks it, and how the pool is kept (enablereuse is off by
# default for mod_proxy_fcgi in 2.4.x; the others reuse unless disablereuse=On)
PROXY = {"ajp": ("proxy_ajp", "disablereuse=Off"), "fcgi": ("proxy_fcgi", "enablereuse=on"),
         "scgi": ("proxy_scgi", "disablereuse=Off"), "http": ("proxy_http", "disablereuse=Off")}


APACHE_STATIC_VHOST = """\
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


def apache_config(root, vhosts, timeout, threads=32, static=None, ports=None, io_buffer=65536):
    """The whole httpd.conf. ``vhosts``: key -> an AJP backend port (int), (scheme, backend
    port) with scheme ajp|fcgi|scgi|http, or ("raw", (modules, text)) where ``text`` has a
    ``{port}`` field; ``ports``: key -> the port Apache listens on for it; ``static``:
    (port, directory) of the static host; ``io_buffer``: ProxyIOBufferSize (8192 is
    mod_proxy_ajp's default packet)."""
    modules = ["authz_core", "proxy"]
    parts = []
    for key, spec in vhosts.items():
        scheme, target = ("ajp", spec) if isinstance(spec, int) else spec
        if scheme == "raw":
            mods, text = target
            modules += mods
            parts.append(text.replace("{port}", str(ports[key])))
            continue
        module, reuse = PROXY[scheme]
        modules.append(module)
        parts.append(APACHE_VHOST.format(port=ports[key], backend=target, scheme=scheme,
                                         reuse=reuse, timeout=int(timeout)))
    if static:
        modules.append("proxy_http")
        parts.append(APACHE_STATIC_VHOST.format(port=static[0], root=static[1]))
    seen = []
    for m in modules:
        if m not in seen:
            seen.append(m)
    mods = "".join("LoadModule %s_module %s/mod_%s.so\n" % (
        m, APACHE_MODULES, m) for m in seen)
    return APACHE_CONF.format(root=root, mods=APACHE_MODULES, loglevel="warn",
                              modules=mods.rstrip("\n"),
                              timeout=int(timeout), threads=threads,
                              thread_limit=max(64, threads), vhosts="".join(parts),
                              io_buffer=io_buffer)


def apache_root(workdir):
    """Where the front of a run in ``workdir`` keeps its config, logs and run/ (the raw hosts'
    sockets: mod_wsgi's, mod_cgid's, mod_fcgid's)."""
    return os.path.join(workdir, "apache")


class Apache(Front):
    """apache2 in the foreground from its own config; one Listen port per backend
    (``vhosts``: see apache_config), and with ``static_root`` one more (``ports["static"]``)
    serving that directory's files, also under /fwd/ through mod_proxy_http: the front's own
    cost (scenarios/behind_fronts.py)."""

    name = "apache2"

    def __init__(self, workdir, vhosts, timeout, static_root=None, threads=32, io_buffer=65536):
        root = apache_root(workdir)
        super().__init__(root, os.path.join(root, "logs"))
        self.run_dir = os.path.join(self.root, "run")
        for sub in ("", "run", "logs"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)
            os.chmod(os.path.join(self.root, sub), 0o755)
        os.chmod(workdir, 0o711)  # the workers (www-data) traverse it
        with contextlib.suppress(FileNotFoundError):   # a fresh log per front: its tail
            os.unlink(os.path.join(self.log_dir, "error.log"))   # is quoted in errors
        self.ports = {key: free_port() for key in vhosts}
        static = None
        if static_root:
            self.ports["static"] = free_port()
            static = (self.ports["static"], static_root)
        self.conf = os.path.join(self.root, "httpd.conf")
        with open(self.conf, "w") as f:
            f.write(apache_config(self.root, vhosts, timeout, threads, static, self.ports,
                                  io_buffer))

    def start(self):
        return self._start([APACHE, "-d", self.root, "-f", self.conf, "-DFOREGROUND"],
                           self.ports.values(),
                           env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C"})
