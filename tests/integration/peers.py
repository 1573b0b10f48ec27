"""Real-peer harness: start nginx, Apache and the server under test as subprocesses with
generated configs, talk HTTP to them, and run the shared checks. The names the peer tests use,
gathered from the modules that own them (imports point down this list):

processes.py     requirements, temp dirs, processes stopped by PID, the server under test
http_client.py   the HTTP client, its Response, raw HTTP and SCGI exchanges
fronts.py        Front (what a starter returns) and the connection-counting proxy
probe_script.py  the probe as a script a front spawns (mod_fcgid, CGI, lighttpd) and its venv
nginx.py         nginx configs and starters    (lighttpd.py: lighttpd's, imported directly)
apache.py        Apache configs and starters
scenarios.py     FrontSuite, ScgiChecks, the smoke sets and their helpers
"""
from tests.integration.apache import (APACHE, APACHE_BASE_CONF, APACHE_MODULES, _start_apache,
                                      start_apache_fcgid, start_apache_proxy_ajp,
                                      start_apache_proxy_fcgi, start_apache_proxy_scgi,
                                      start_apache_proxy_uwsgi)
from tests.integration.backend_process import free_port
from tests.integration.fronts import ConnCountingProxy, Front, apache_canonenc
from tests.integration.http_client import (HTTPClient, Response, is_connection_error, raw_exchange,
                                           raw_http, scgi_request)
from tests.integration.nginx import (NGINX, NGINX_FRAME, nginx_config, start_nginx,
                                     start_nginx_scgi, start_nginx_uwsgi)
from tests.integration.probe_script import FCGID_SCRIPT, fcgid_venv, write_probe_script
from tests.integration.processes import (IO_TIMEOUT, REPO, SYSTEM_PYTHON, ManagedProcess,
                                         ServerSpec, make_tempdir, remove_tempdir, require,
                                         require_root, start_backend, tail, wait_for_log,
                                         wait_until_connectable)
from tests.integration.scenarios import (BIG, CHUNKED, FLUP_SCGI_UNBOUNDED_INPUT, MEDIUM,
                                         SCGI_FLUP_BUGS, SITE_MOUNT_PATHS, FrontSuite,
                                         assert_same_as_under_uwsgi,
                                         ScgiChecks, ScgiSmoke, UwsgiSmoke, check_upload,
                                         covered_over_tcp, expected_sha256, front_fixture,
                                         latin1_of_utf8, probe,
                                         site_mount_environ, upload, upload_limit,
                                         uwsgi_exchanges, wait_for_front_log)

__all__ = [
    "APACHE", "APACHE_BASE_CONF", "APACHE_MODULES", "BIG", "CHUNKED", "FCGID_SCRIPT",
    "FLUP_SCGI_UNBOUNDED_INPUT", "IO_TIMEOUT", "MEDIUM", "NGINX", "NGINX_FRAME", "REPO",
    "SCGI_FLUP_BUGS", "SITE_MOUNT_PATHS", "SYSTEM_PYTHON",
    "ConnCountingProxy", "Front", "FrontSuite", "HTTPClient", "ManagedProcess", "Response",
    "ScgiChecks", "ScgiSmoke", "ServerSpec", "UwsgiSmoke", "_start_apache", "apache_canonenc",
    "assert_same_as_under_uwsgi",
    "check_upload", "covered_over_tcp",
    "expected_sha256", "fcgid_venv", "front_fixture", "free_port", "is_connection_error",
    "latin1_of_utf8", "make_tempdir", "nginx_config", "probe", "raw_exchange", "raw_http",
    "remove_tempdir", "require", "require_root", "scgi_request", "site_mount_environ",
    "start_apache_fcgid",
    "start_apache_proxy_ajp", "start_apache_proxy_fcgi", "start_apache_proxy_scgi",
    "start_apache_proxy_uwsgi", "start_backend", "start_nginx", "start_nginx_scgi",
    "start_nginx_uwsgi", "tail", "upload", "upload_limit", "uwsgi_exchanges",
    "wait_for_front_log", "wait_for_log", "wait_until_connectable", "write_probe_script",
]
