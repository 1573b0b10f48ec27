"""lighttpd 1.4 as a front for the peer tests: mod_fastcgi to a socket the server under test
listens on, mod_fastcgi spawning the backend itself (``bin-path``), and mod_scgi.

Owns the lighttpd config and start-up only; processes, backends, the counting proxy, the
mod_fcgid-style probe script and venv, and the Front they return come from processes.py,
fronts.py and probe_script.py (see peers.py). lighttpd runs in the foreground (``-D``) with its
config, pid file, logs and upload spool in the test's temp dir, on a free loopback port, and is
stopped by PID; as root it drops to www-data like the other fronts, otherwise it runs as the
caller.
"""
import os
import pwd

from tests.integration.backend_process import free_port
from tests.integration.fronts import ConnCountingProxy, Front
from tests.integration.probe_script import FCGID_SCRIPT, write_probe_script
from tests.integration.processes import (ManagedProcess, make_tempdir, require, start_backend,
                                         wait_until_connectable)

LIGHTTPD = "/usr/sbin/lighttpd"

# What every test lighttpd shares; ``{gateway}`` is the fastcgi.server / scgi.server block.
# fix-root-scriptname: the app mounted at "/" sees SCRIPT_NAME "" and PATH_INFO = the decoded
# path (lighttpd's documented setting for a WSGI app at the root; without it SCRIPT_NAME is the
# whole path). The request body is spooled whole (stream-request-body 0, the default), so a
# chunked upload reaches the backend with a CONTENT_LENGTH.
LIGHTTPD_CONF = """\
server.modules = ("{module}")
server.document-root = "{root}/htdocs"
server.bind = "127.0.0.1"
server.port = {port}
$SERVER["socket"] == "127.0.0.1:{counted_port}" {{ }}
server.pid-file = "{root}/run/lighttpd.pid"
server.errorlog = "{root}/run/error.log"
server.upload-dirs = ("{root}/spool")
server.max-request-size = 0
server.stream-request-body = 0
server.max-keep-alive-requests = 10000
server.max-read-idle = {timeout}
server.max-write-idle = {timeout}
{user}
$SERVER["socket"] == "127.0.0.1:{counted_port}" {{
{counted}
}}
else $SERVER["socket"] == "127.0.0.1:{port}" {{
{gateway}
}}
"""

GATEWAY = """\
    {prefix}.server = ("/" => ((
        {target},
        "check-local" => "disable",
        "fix-root-scriptname" => "enable",
{more}    )))"""


def _gateway(protocol, target, more=""):
    return GATEWAY.format(prefix="fastcgi" if protocol == "fcgi" else "scgi", target=target,
                          more=more)


def _unix_target(path):
    return '"socket" => "%s"' % path


def _tcp_target(port):
    return '"host" => "127.0.0.1", "port" => %d' % port


def start_lighttpd(server, protocol="fcgi", spawn=False, mode="thread", name=None):
    """lighttpd -> the server under test over FastCGI (``protocol="fcgi"``, a Unix socket) or
    SCGI (``"scgi"``, loopback TCP); ``spawn=True``: FastCGI with lighttpd starting the
    backend itself from ``bin-path`` (one process, its listening socket as fd 0).

    The counted port reaches the backend through the connection-counting proxy (not with
    ``spawn``, where lighttpd owns the socket). lighttpd opens one backend connection per
    request (no FCGI_KEEP_CONN).
    """
    require(LIGHTTPD, "lighttpd")
    name = name or "lighttpd-%s%s" % (protocol, "-spawn" if spawn else "")
    root = make_tempdir(name)
    port, counted_port = free_port(), free_port()
    as_root = os.geteuid() == 0
    for sub in ("htdocs", "spool", "run"):
        (root / sub).mkdir()
        # lighttpd opens its error log, writes the spool and creates bin-path's socket after
        # dropping to www-data.
        if as_root:
            www = pwd.getpwnam("www-data")
            os.chown(str(root / sub), www.pw_uid, www.pw_gid)
    # truncation_signalled=False: lighttpd buffers a response whole by default
    # (server.stream-response-body 0) and sends it with a Content-Length it computed, so a
    # failed response looks complete whatever the backend signals (docs/reliability.md).
    front = Front(name=name, port=port, prefix="", server=server, kind="lighttpd",
                  truncation_signalled=False,
                  keeps_backend_conn=False, workdir=root, split="path", spools_chunked=True,
                  protocol=protocol, options=dict(protocol=protocol, spawn=spawn, mode=mode))
    try:
        if spawn:
            assert protocol == "fcgi", "lighttpd's bin-path spawns FastCGI backends"
            write_probe_script(server, root / "htdocs", "probe.fcgi", FCGID_SCRIPT,
                               server_import=server.fcgid_import())
            env = ['"PYTHONUNBUFFERED" => "1"', '"PYTHONDONTWRITEBYTECODE" => "1"']
            if server.speedups is not None:
                env.append('"FLUPFAST_SPEEDUPS" => "%s"' % server.speedups)
            more = ('        "bin-path" => "%s",\n        "max-procs" => 1,\n'
                    '        "bin-environment" => (%s),\n'
                    % (root / "htdocs" / "probe.fcgi", ", ".join(env)))
            gateway = _gateway(protocol, _unix_target(root / "run" / "spawn.sock"), more)
            counted = gateway
            front.counted_port = None
        else:
            if protocol == "fcgi":
                backend_addr = str(root / "backend.sock")
                counted_addr = str(root / "counted.sock")
                bind = "unix:%s" % backend_addr
                target, counted_target = _unix_target(backend_addr), _unix_target(counted_addr)
            else:
                backend_port, proxy_port = free_port(), free_port()
                backend_addr, counted_addr = ("127.0.0.1", backend_port), ("127.0.0.1", proxy_port)
                bind = "127.0.0.1:%d" % backend_port
                target, counted_target = _tcp_target(backend_port), _tcp_target(proxy_port)
            front.processes.append(start_backend(server, root, bind, mode=mode,
                                                 protocol=protocol))
            front.counter = ConnCountingProxy(counted_addr, backend_addr)
            front.counted_port = counted_port
            gateway = _gateway(protocol, target)
            counted = _gateway(protocol, counted_target)
        conf = LIGHTTPD_CONF.format(
            module="mod_fastcgi" if protocol == "fcgi" else "mod_scgi", root=root, port=port,
            counted_port=counted_port, timeout=120, gateway=gateway, counted=counted,
            user='server.username = "www-data"\nserver.groupname = "www-data"'
            if as_root else "")
        conf_path = root / "lighttpd.conf"
        conf_path.write_text(conf)
        lighttpd = ManagedProcess(name, [LIGHTTPD, "-D", "-f", str(conf_path)],
                                  logs=[root / "run" / "error.log"], log_dir=root)
        front.processes.insert(0, lighttpd)
        wait_until_connectable(("127.0.0.1", port), lighttpd)
    except BaseException:
        front.stop()
        raise
    return front
