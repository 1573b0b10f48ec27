"""How every nginx and Apache config of the peer tests and of the bench begins (bench/fronts
imports this module): the nginx frame around an http block, Apache's head and keep-alive lines.
Text only: no pytest, no processes, nothing started.
"""

# How every nginx begins: in the foreground, one worker process, its pid, logs and temp files
# under ``root``; ``main`` more main-context lines; ``http`` the rest of the http block.
NGINX_FRAME = """\
daemon off;
master_process {master};
worker_processes 1;
{user}
error_log {root}/error.log {error_level};
pid {root}/nginx.pid;
{main}
events {{
    worker_connections {worker_connections};
}}

http {{
    access_log {access_log};
    client_body_temp_path {root}/tmp/client_body;
    fastcgi_temp_path {root}/tmp/fastcgi;
    proxy_temp_path {root}/tmp/proxy;
    uwsgi_temp_path {root}/tmp/uwsgi;
    scgi_temp_path {root}/tmp/scgi;
{http}}}
"""


def nginx_config(root, http, master_process=True, worker_connections=512, user=None,
                 error_level="info", access_log=True, main=""):
    """A whole nginx.conf: NGINX_FRAME around ``http`` (already formatted). With a master
    process nginx runs its workers as ``user`` (default www-data); without one everything runs
    as the caller. ``access_log`` False: none (the bench: the front's own cost stays small)."""
    if user is None:
        user = "www-data www-data" if master_process else ""
    return NGINX_FRAME.format(root=root, http=http, worker_connections=worker_connections,
                              master="on" if master_process else "off",
                              user="user %s;" % user if user else "", error_level=error_level,
                              access_log="%s/access.log" % root if access_log else "off",
                              main=main + "\n" if main else "")


# How every Apache begins: one foreground server, its run/ and logs/ under ``root``, children
# as www-data, the event MPM.
APACHE_HEAD = """\
ServerRoot "{root}"
DefaultRuntimeDir "{root}/run"
PidFile "{root}/run/httpd.pid"
Mutex file:{root}/run default
ServerName localhost
User www-data
Group www-data
ErrorLog "{root}/logs/error.log"
LogLevel {loglevel}
LoadModule mpm_event_module {mods}/mod_mpm_event.so
"""

# Client connections kept open without a request limit; request bodies of any size.
APACHE_KEEPALIVE = """\
Timeout {timeout}
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout 30
LimitRequestBody 0
"""
