"""The servers under test that Apache runs itself, as www-data, with Debian's python3
(servers/wwwdata.py): mod_wsgi in daemon mode, a CGI script (mod_cgid) and a mod_fcgid
``.fcgi`` script. Here their scripts and the Apache directives that serve them, as text; the
Apache config around them is fronts/apache.py's (a "raw" virtual host), the composition
scenarios/'s."""

MODWSGI_SCRIPT = """\
# mod_wsgi daemon mode: the WSGI script file (bench/servers/apache_hosted.py)
from {module} import {attr} as application  # noqa: F401
"""


# WSGIRestrictEmbedded: no interpreter in Apache's own children, everything in the daemon.
MODWSGI_VHOST = """\
WSGISocketPrefix {run_dir}/wsgi
WSGIRestrictEmbedded On
Listen 127.0.0.1:{port}
<VirtualHost 127.0.0.1:{port}>
    WSGIDaemonProcess bench processes={processes} threads={threads} python-path={path}{home} \
display-name=%{{GROUP}} listen-backlog=1024
    WSGIProcessGroup bench
    WSGIApplicationGroup %{{GLOBAL}}
    WSGIScriptAlias / "{script}"
    <Directory "{script_dir}">
        Require all granted
    </Directory>
</VirtualHost>
"""


def modwsgi_script(app):
    """The .wsgi file for ``module:callable``."""
    module, _, attr = app.partition(":")
    return MODWSGI_SCRIPT.format(module=module, attr=attr or "application")


def modwsgi_vhost(port, run_dir, script, tree, processes, threads):
    """The directives of a mod_wsgi daemon-mode virtual host on ``port``: ``processes`` x
    ``threads``, the www-data tree on sys.path, its venv (Flask) as python-home."""
    return MODWSGI_VHOST.format(
        port=port, run_dir=run_dir, script=script, script_dir=script.rsplit("/", 1)[0],
        processes=processes, threads=threads, path=tree.path,
        home=" python-home=%s" % tree.home if tree.home else "")


CGI_SCRIPT = """\
#!{python}
# {what} (bench/servers/apache_hosted.py): the bench's hello through flupfast's {server}
import sys
sys.path.insert(0, {path!r})
from {module} import {attr} as app  # noqa: E402
from {server} import WSGIServer  # noqa: E402

WSGIServer(app).run()
"""


def cgi_script(kind, app, tree):
    """The script for ``kind`` cgi (one process per request: flupfast.server.cgi) or fcgid
    (mod_fcgid's listening socket on fd 0: flupfast.server.fcgi, thread mode)."""
    module, _, attr = app.partition(":")
    server = {"cgi": "flupfast.server.cgi", "fcgid": "flupfast.server.fcgi"}[kind]
    what = {"cgi": "a CGI script", "fcgid": "a mod_fcgid script"}[kind]
    return CGI_SCRIPT.format(python=tree.python, path=tree.path, module=module,
                             attr=attr or "application", server=server, what=what)


CGI_VHOST = """\
ScriptSock {run_dir}/cgid.sock
Listen 127.0.0.1:{port}
<VirtualHost 127.0.0.1:{port}>
    ScriptAlias /cgi/ "{script_dir}/"
    <Directory "{script_dir}">
        Options +ExecCGI
        Require all granted
    </Directory>
</VirtualHost>
"""


# mod_fcgid's process class: up to {processes} copies of the script, started on demand and
# kept (no idle timeout during a run).
FCGID_VHOST = """\
TypesConfig /etc/mime.types
FcgidIPCDir "{run_dir}/fcgid"
FcgidProcessTableFile "{run_dir}/fcgid_shm"
FcgidMaxRequestLen 209715200
FcgidIOTimeout 60
FcgidMaxProcessesPerClass {processes}
FcgidMinProcessesPerClass 0
FcgidIdleTimeout 0
FcgidInitialEnv FLUPFAST_SPEEDUPS {speedups}
FcgidInitialEnv PYTHONDONTWRITEBYTECODE 1
Listen 127.0.0.1:{port}
<VirtualHost 127.0.0.1:{port}>
    Alias /cgi/ "{script_dir}/"
    <Directory "{script_dir}">
        Options +ExecCGI
        AddHandler fcgid-script .fcgi
        Require all granted
    </Directory>
</VirtualHost>
"""


def cgi_vhost(kind, port, run_dir, script_dir, processes=2, speedups="1"):
    """The directives serving ``script_dir`` under /cgi/ as CGI (mod_cgid) or mod_fcgid
    scripts; -> (Apache modules to load, text)."""
    if kind == "cgi":
        return ["cgid", "alias"], CGI_VHOST.format(port=port, run_dir=run_dir,
                                                   script_dir=script_dir)
    return ["fcgid", "alias", "mime"], FCGID_VHOST.format(
        port=port, run_dir=run_dir, script_dir=script_dir, processes=processes,
        speedups=speedups)


class ModWsgiDaemon:
    """mod_wsgi daemon mode as a server under test: Apache starts and stops its processes, so
    this object only carries the app and the settings ({"processes", "threads"}) into the
    virtual host (modwsgi_vhost); start/stop are no-ops, its processes are Apache's."""

    protocol = "wsgi"
    error = None
    notes = ()
    proc = None

    def __init__(self, app, settings):
        self.app, self.settings = app, dict(settings)

    def start(self, client=None):
        return True

    def stop(self):
        pass

    def log_tail(self, size=600):
        return ""

    def vhost(self, run_dir, script, tree):
        return modwsgi_vhost("{port}", run_dir, script, tree, self.settings.get("processes", 1),
                             self.settings.get("threads", 15))
