"""Apache httpd as a front for the peer tests: the base config (one foreground child, everything
under the test's temp dir) and the starters for mod_proxy_fcgi, mod_proxy_scgi, mod_proxy_ajp
and mod_fcgid.
"""
import os
from pathlib import Path

from tests.integration.backend_process import free_port
from tests.integration.front_confs import APACHE_HEAD, APACHE_KEEPALIVE
from tests.integration.fronts import ConnCountingProxy, Front
from tests.integration.probe_script import FCGID_SCRIPT, write_probe_script
from tests.integration.processes import (IO_TIMEOUT, SYSTEM_PYTHON, ManagedProcess, make_tempdir,
                                         require, require_root, start_backend,
                                         wait_until_connectable)

APACHE = "/usr/sbin/apache2"
APACHE_MODULES = Path("/usr/lib/apache2/modules")

APACHE_BASE_CONF = APACHE_HEAD + """\
LoadModule authz_core_module {mods}/mod_authz_core.so
LoadModule mime_module {mods}/mod_mime.so
LoadModule headers_module {mods}/mod_headers.so
{modules}
# The httpoxy mitigation of the README's recipes (docs/security.md): a client's "Proxy:"
# header must not become HTTP_PROXY, which HTTP libraries take for their proxy setting.
RequestHeader unset Proxy early
TypesConfig /etc/mime.types
LogFormat "%h %l %u %t \\"%r\\" %>s %b %D" timed
CustomLog "{root}/logs/access.log" timed

# One child process, so sequential requests meet one mod_proxy connection pool.
StartServers 1
ServerLimit 1
ThreadsPerChild 16
MaxRequestWorkers 16
MinSpareThreads 1
MaxSpareThreads 16
""" + APACHE_KEEPALIVE + """
DocumentRoot "{root}/htdocs"
<Directory />
    Require all denied
</Directory>
{body}
"""


def _start_apache(name, server, body, modules, port, loglevel="info", prefix="",
                  keeps_backend_conn=False, kind="", options=None, setup=None, split="path",
                  spools_chunked=True):
    require(APACHE, "apache2")
    require_root()
    root = make_tempdir(name)
    for sub in ("run", "logs", "htdocs"):
        (root / sub).mkdir()
        (root / sub).chmod(0o755)
    front = Front(name=name, port=port, prefix=prefix, server=server, kind=kind,
                  keeps_backend_conn=keeps_backend_conn, workdir=root, options=options or {},
                  split=split, spools_chunked=spools_chunked)
    try:
        if setup is not None:
            body = setup(front, root, body)
        conf = APACHE_BASE_CONF.format(
            root=root, mods=APACHE_MODULES, loglevel=loglevel, timeout=IO_TIMEOUT,
            modules="\n".join("LoadModule %s_module %s/mod_%s.so" % (m, APACHE_MODULES, m)
                              for m in modules),
            body=body)
        conf_path = root / "httpd.conf"
        conf_path.write_text(conf)
        apache = ManagedProcess(name, [APACHE, "-d", str(root), "-f", str(conf_path),
                                       "-DFOREGROUND"],
                                logs=[root / "logs" / "error.log"], log_dir=root,
                                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                     "LANG": "C"})
        front.processes.insert(0, apache)
        wait_until_connectable(("127.0.0.1", port), apache)
        if front.counted_port:
            wait_until_connectable(("127.0.0.1", front.counted_port), apache)
    except BaseException:
        front.stop()
        raise
    return front


def start_apache_proxy_fcgi(server, reuse=True, mode="thread", name=None):
    """Apache mod_proxy_fcgi -> 127.0.0.1:PORT (the server under test); plus a counted vhost."""
    name = name or "apache-proxy-fcgi"
    return _start_apache_proxy("fcgi", server, name,
                               proxy_args="enablereuse=%s" % ("on" if reuse else "off"),
                               mode=mode, keeps_backend_conn=reuse, split="script",
                               spools_chunked=False, options=dict(reuse=reuse, mode=mode))


def _start_apache_proxy(protocol, server, name, proxy_args="", extra_conf="", mode="thread",
                        modules=(), keeps_backend_conn=False, split="path",
                        spools_chunked=True, options=None, backend_extra=()):
    """Apache ``ProxyPass / PROTOCOL://127.0.0.1:PORT/`` -> the server under test; plus a
    counted vhost reaching it through the connection-counting proxy."""
    port, counted_port = free_port(), free_port()
    backend_port, proxy_port = free_port(), free_port()
    body = """\
Listen 127.0.0.1:{port}
Listen 127.0.0.1:{counted_port}
{extra}
<VirtualHost 127.0.0.1:{port}>
    ProxyPass "/" "{scheme}://127.0.0.1:{backend_port}/" {args} timeout={timeout}
</VirtualHost>
<VirtualHost 127.0.0.1:{counted_port}>
    ProxyPass "/" "{scheme}://127.0.0.1:{proxy_port}/" {args} timeout={timeout}
</VirtualHost>
""".format(port=port, counted_port=counted_port, backend_port=backend_port,
           proxy_port=proxy_port, scheme=protocol, args=proxy_args, timeout=IO_TIMEOUT,
           extra=extra_conf)

    def setup(front, root, body):
        front.counted_port = counted_port
        front.processes.append(start_backend(server, root, "127.0.0.1:%d" % backend_port,
                                             mode=mode, protocol=protocol,
                                             extra=backend_extra))
        front.counter = ConnCountingProxy(("127.0.0.1", proxy_port),
                                          ("127.0.0.1", backend_port))
        return body

    mod = "proxy_%s" % protocol
    front = _start_apache(name, server, body, ["proxy", mod] + list(modules), port,
                          loglevel="info proxy:info %s:info" % mod,
                          keeps_backend_conn=keeps_backend_conn, kind=mod, split=split,
                          spools_chunked=spools_chunked, options=options or {}, setup=setup)
    front.protocol = protocol
    return front


def start_apache_proxy_scgi(server, pathinfo=False, mode="thread", name=None):
    """Apache mod_proxy_scgi (one backend connection per request). Without
    ``proxy-scgi-pathinfo`` Apache sends SCRIPT_NAME = the decoded path and no PATH_INFO;
    with it, PATH_INFO = the decoded path."""
    name = name or "apache-scgi%s" % ("-pathinfo" if pathinfo else "")
    # mod_proxy_scgi reads the variable in its canon hook (translate_name), before mod_env's
    # fixups: ``SetEnv proxy-scgi-pathinfo 1`` is too late and does nothing; SetEnvIf (post
    # read request) is in time.
    extra = "SetEnvIf Request_URI . proxy-scgi-pathinfo=1" if pathinfo else ""
    return _start_apache_proxy("scgi", server, name, extra_conf=extra, mode=mode,
                               modules=["setenvif"] if pathinfo else [],
                               split="path" if pathinfo else "script",
                               options=dict(pathinfo=pathinfo, mode=mode))


def start_apache_proxy_uwsgi(server, mode="thread", name=None):
    """Apache mod_proxy_uwsgi (``ProxyPass / uwsgi://127.0.0.1:PORT/``, one backend connection
    per request): it sends SCRIPT_NAME "" and PATH_INFO = the decoded path, and reads an HTTP
    status line back."""
    require(str(APACHE_MODULES / "mod_proxy_uwsgi.so"), "mod_proxy_uwsgi")
    front = _start_apache_proxy("uwsgi", server, name or "apache-uwsgi", mode=mode,
                                split="path", options=dict(mode=mode))
    # mod_proxy_uwsgi passes the backend's reset on only when it meets it waiting for data
    # (curl: 18, transfer closed); when the reset comes with the last bytes it ends the
    # client's response normally (measured both ways): the signal is not reliable through it.
    front.truncation_signalled = None
    return front


def start_apache_proxy_ajp(server, ping=None, secret=None, io_buffer=None, mode="thread",
                           name=None, backend_extra=()):
    """Apache mod_proxy_ajp with its pooled, reused backend connections (``disablereuse=Off``,
    the default, kept explicit); ``ping=N`` sends CPING before requests, ``secret=`` sends
    attribute 0x0C, ``io_buffer=65536`` (ProxyIOBufferSize) allows 64 KiB packets;
    ``backend_extra``: more of the backend's command-line options."""
    name = name or "apache-ajp"
    args = ["disablereuse=Off"]
    if ping is not None:
        args.append("ping=%d" % ping)
    if secret is not None:
        args.append("secret=%s" % secret)
    extra = "ProxyIOBufferSize %d" % io_buffer if io_buffer else ""
    front = _start_apache_proxy("ajp", server, name, proxy_args=" ".join(args),
                                extra_conf=extra, mode=mode, keeps_backend_conn=True,
                                split="raw", spools_chunked=False, backend_extra=backend_extra,
                                options=dict(ping=ping, secret=secret, io_buffer=io_buffer,
                                             mode=mode))
    front.uri_has_query = False
    return front


def start_apache_fcgid(server, name=None):
    """Apache mod_fcgid spawning ``probe.fcgi`` (Debian's python3 in a venv with the server)."""
    require(str(APACHE_MODULES / "mod_fcgid.so"), "libapache2-mod-fcgid")
    require(SYSTEM_PYTHON, "Debian python3")
    name = name or "apache-fcgid"
    port = free_port()

    def setup(front, root, body):
        write_probe_script(server, root / "htdocs", "probe.fcgi", FCGID_SCRIPT,
                           server_import=server.fcgid_import())
        env_lines = ["FcgidInitialEnv PYTHONUNBUFFERED 1",
                     "FcgidInitialEnv PYTHONDONTWRITEBYTECODE 1"]
        if server.speedups is not None:
            env_lines.append("FcgidInitialEnv FLUPFAST_SPEEDUPS %s" % server.speedups)
        return body.format(root=root, port=port, env="\n".join(env_lines),
                           timeout=IO_TIMEOUT, maxlen=200 * 1024 * 1024)

    body = """\
Listen 127.0.0.1:{port}
FcgidIPCDir "{root}/run/fcgid"
FcgidProcessTableFile "{root}/run/fcgid_shm"
FcgidMaxRequestLen {maxlen}
FcgidMaxRequestInMem 65536
FcgidIOTimeout {timeout}
FcgidConnectTimeout 20
FcgidMaxProcessesPerClass 2
FcgidMinProcessesPerClass 0
{env}
<VirtualHost 127.0.0.1:{port}>
    <Directory "{root}/htdocs">
        Options +ExecCGI
        AddHandler fcgid-script .fcgi
        Require all granted
    </Directory>
</VirtualHost>
"""
    return _start_apache(name, server, body, ["fcgid"], port, prefix="/probe.fcgi",
                         loglevel="info fcgid:info", kind="fcgid", split="prefix", setup=setup)
