"""Apache 2.4 as the front of the AJP13 backends (mod_proxy_ajp, event MPM, one child of 32
threads, ProxyIOBufferSize 65536, pooled backend connections): its config, and a static
virtual host for the front's own cost. Process control is fronts.front's."""
import os

from bench.base import free_port
from bench.fronts.front import Front

APACHE = "/usr/sbin/apache2"
APACHE_MODULES = "/usr/lib/apache2/modules"


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


class Apache(Front):
    """apache2 in the foreground from its own config; one Listen port per backend, and with
    ``static_root`` one more (``ports["static"]``) serving that directory's files, also
    under /fwd/ through mod_proxy_http: the front's own cost (scenarios/behind_fronts.py)."""

    name = "apache2"

    def __init__(self, workdir, backends, timeout, static_root=None):
        root = os.path.join(workdir, "apache")
        super().__init__(root, os.path.join(root, "logs"))
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

    def start(self):
        return self._start([APACHE, "-d", self.root, "-f", self.conf, "-DFOREGROUND"],
                           self.ports.values(),
                           env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C"})
