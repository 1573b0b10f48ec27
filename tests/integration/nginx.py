"""nginx as a front for the peer tests: its config (one foreground nginx per test, everything
under the test's temp dir) and the starters for fastcgi_pass, scgi_pass and uwsgi_pass to the
server under test.
"""

from tests.integration.backend_process import free_port
from tests.integration.front_confs import NGINX_FRAME, nginx_config  # noqa: F401
from tests.integration.fronts import ConnCountingProxy, Front
from tests.integration.processes import (IO_TIMEOUT, ManagedProcess, make_tempdir, require,
                                         require_root, start_backend, wait_until_connectable)

NGINX = "/usr/sbin/nginx"

def _prepare(name):
    """Skip unless nginx and root are there; (a temp dir with its tmp/, a port, a counted port)."""
    require(NGINX, "nginx")
    require_root()
    root = make_tempdir(name)
    (root / "tmp").mkdir()
    return root, free_port(), free_port()


def _pass_options(module, *options):
    """The directives of each location passing to the backend with ``module`` (fastcgi, scgi):
    the httpoxy line of the README's recipes (docs/security.md), ``options`` (``name value``,
    prefixed with the module) and the backend timeouts."""
    lines = (['%s_param HTTP_PROXY "";' % module] + ["%s_%s;" % (module, o) for o in options]
             + ["%s_%s_timeout %ds;" % (module, way, IO_TIMEOUT) for way in ("read", "send")])
    return "\n".join("            %s" % line for line in lines)


# The http block of start_nginx's config (after NGINX_FRAME's common lines).
NGINX_HTTP = """\
    client_max_body_size 0;
    keepalive_requests 10000;

    upstream app {{
        server {backend};
        {keepalive}
    }}
    upstream counted {{
        server {counted};
        {keepalive}
    }}

    server {{
        listen 127.0.0.1:{port};
        server_name localhost;

        # The stock Debian parameters only: no PATH_INFO, SCRIPT_NAME = the decoded URI.
        location / {{
            include /etc/nginx/fastcgi_params;
            fastcgi_pass app;
{fastcgi_common}
        }}

        # What a typical site adds: the app mounted on a prefix with PATH_INFO split off.
        location /app/ {{
            include /etc/nginx/fastcgi_params;
            fastcgi_split_path_info ^(/app)(/.*)$;
            fastcgi_param SCRIPT_NAME $fastcgi_script_name;
            fastcgi_param PATH_INFO $fastcgi_path_info;
            fastcgi_pass app;
{fastcgi_common}
        }}
    }}

    # The same app through the connection-counting proxy.
    server {{
        listen 127.0.0.1:{counted_port};
        server_name localhost;
        location / {{
            include /etc/nginx/fastcgi_params;
            fastcgi_pass counted;
{fastcgi_common}
        }}
    }}
"""


def start_nginx(server, keep_conn=True, request_buffering=True, master_process=True,
                mode="thread", name=None, unix=True):
    """nginx -> Unix socket (or loopback TCP) -> the server under test; also a counted port
    via the proxy."""
    name = name or "nginx"
    root, port, counted_port = _prepare(name)
    if unix:
        backend_sock, counted_sock = root / "backend.sock", root / "counted.sock"
        backend, counted = "unix:%s" % backend_sock, "unix:%s" % counted_sock
        bind, listen, target = backend, str(counted_sock), str(backend_sock)
    else:
        backend_port, proxy_port = free_port(), free_port()
        backend, counted = "127.0.0.1:%d" % backend_port, "127.0.0.1:%d" % proxy_port
        bind, listen, target = backend, ("127.0.0.1", proxy_port), ("127.0.0.1", backend_port)
    common = _pass_options("fastcgi",
                           "keep_conn %s" % ("on" if keep_conn else "off"),
                           "request_buffering %s" % ("on" if request_buffering else "off"))
    conf = nginx_config(root, NGINX_HTTP.format(
        backend=backend, counted=counted,
        keepalive="keepalive 4;" if keep_conn else "",
        port=port, counted_port=counted_port, fastcgi_common=common),
        master_process=master_process)
    front = Front(name=name, port=port, prefix="", server=server, counted_port=counted_port,
                  keeps_backend_conn=keep_conn, kind="nginx", workdir=root, split="script",
                  spools_chunked=request_buffering,
                  options=dict(keep_conn=keep_conn, request_buffering=request_buffering,
                               master_process=master_process, mode=mode, unix=unix))
    return _run_nginx(front, conf, bind, (listen, target))


def launch_nginx(root, conf, ports, name="nginx"):
    """Write ``conf`` (a whole nginx.conf) to ``root`` and run nginx on it, in the foreground
    with its error log there; returns the process once it listens on every port of
    ``ports`` (stopped again if it never does). Stopping it later is the caller's business."""
    conf_path = root / "nginx.conf"
    conf_path.write_text(conf)
    nginx = ManagedProcess(name, [NGINX, "-p", str(root), "-c", str(conf_path),
                                  "-e", str(root / "error.log")],
                           logs=[root / "error.log"], log_dir=root)
    try:
        for port in ports:
            wait_until_connectable(("127.0.0.1", port), nginx)
    except BaseException:
        nginx.stop()
        raise
    return nginx


def _run_nginx(front, conf, bind, proxy):
    """Start the server under test on ``bind``, the counting proxy (``proxy``: its listen
    and target addresses) and nginx with ``conf`` in ``front.workdir``; wait until nginx
    listens on both ports. On any failure what started is stopped."""
    root = front.workdir
    try:
        front.processes.append(start_backend(front.server, root, bind,
                                             mode=front.options["mode"],
                                             protocol=front.protocol))
        front.counter = ConnCountingProxy(*proxy)
        front.processes.insert(0, launch_nginx(root, conf, (front.port, front.counted_port),
                                               front.name))
    except BaseException:
        front.stop()
        raise
    return front


# The http block of start_nginx_scgi's and start_nginx_uwsgi's config (after NGINX_FRAME's
# common lines); {m} is the nginx module, scgi or uwsgi.
NGINX_CGI_LIKE_HTTP = """\
    client_max_body_size 0;
    keepalive_requests 10000;

    server {{
        listen 127.0.0.1:{port};
        server_name localhost;

        # What a typical site adds to the stock scgi_params (which send REQUEST_URI and
        # DOCUMENT_URI but neither SCRIPT_NAME nor PATH_INFO): the app at the root. (The stock
        # uwsgi_params send PATH_INFO $document_uri: uwsgi gets it twice, the same value.)
        location / {{
            include /etc/nginx/{m}_params;
            {m}_param SCRIPT_NAME "";
            {m}_param PATH_INFO $uri;
            {m}_pass {backend};
{common}
        }}

        # The app mounted on a prefix: the regex captures split the decoded $uri.
        location ~ ^(/app)(/.*)$ {{
            include /etc/nginx/{m}_params;
            {m}_param SCRIPT_NAME $1;
            {m}_param PATH_INFO $2;
            {m}_pass {backend};
{common}
        }}

        # A site's own parameter list instead of the stock ones: no SCGI=1 (nginx adds only
        # CONTENT_LENGTH by itself to SCGI, nothing to uwsgi).
        location ~ ^(/bare)(/.*)$ {{
            {m}_param REQUEST_METHOD $request_method;
            {m}_param REQUEST_URI $request_uri;
            {m}_param QUERY_STRING $query_string;
            {m}_param CONTENT_TYPE $content_type;
            {m}_param SERVER_PROTOCOL $server_protocol;
            {m}_param SERVER_NAME $server_name;
            {m}_param SERVER_PORT $server_port;
            {m}_param REMOTE_ADDR $remote_addr;
            {m}_param SCRIPT_NAME $1;
            {m}_param PATH_INFO $2;
            {m}_pass {backend};
{common}
        }}
    }}

    # The same app through the connection-counting proxy, with the stock parameters only:
    # for SCGI the server derives SCRIPT_NAME and PATH_INFO from REQUEST_URI.
    server {{
        listen 127.0.0.1:{counted_port};
        server_name localhost;
        location / {{
            include /etc/nginx/{m}_params;
            {m}_pass {counted};
{common}
        }}
    }}
"""


def start_nginx_scgi(server, unix=False, mode="thread", name=None):
    """nginx ``scgi_pass`` -> the server under test over SCGI, on loopback TCP (default) or a
    Unix socket; also a counted port via the connection-counting proxy.

    ``scgi_request_buffering on`` (the default, kept explicit): nginx 1.22 with it off
    truncates large uploads, and it turns chunked uploads into Content-Length bodies.
    """
    return _start_nginx_cgi_like("scgi", server, unix, mode, name or "nginx-scgi", True)


def start_nginx_uwsgi(server, unix=False, mode="thread", name=None, request_buffering=True):
    """nginx ``uwsgi_pass`` (``include uwsgi_params``) -> the server under test over uwsgi, on
    loopback TCP (default) or a Unix socket; also a counted port via the counting proxy.
    nginx buffers a chunked upload whatever ``request_buffering`` says (it must send
    CONTENT_LENGTH first)."""
    return _start_nginx_cgi_like("uwsgi", server, unix, mode, name or "nginx-uwsgi",
                                 request_buffering)


def _start_nginx_cgi_like(module, server, unix, mode, name, request_buffering):
    root, port, counted_port = _prepare(name)
    if unix:
        backend_addr, counted_addr = str(root / "backend.sock"), str(root / "counted.sock")
        bind = "unix:%s" % backend_addr
        backend, counted = "unix:%s" % backend_addr, "unix:%s" % counted_addr
    else:
        backend_port, proxy_port = free_port(), free_port()
        backend_addr, counted_addr = ("127.0.0.1", backend_port), ("127.0.0.1", proxy_port)
        bind = "127.0.0.1:%d" % backend_port
        backend, counted = bind, "127.0.0.1:%d" % proxy_port
    common = _pass_options(module, "request_buffering %s" % ("on" if request_buffering
                                                              else "off"))
    conf = nginx_config(root, NGINX_CGI_LIKE_HTTP.format(
        m=module, port=port, counted_port=counted_port, backend=backend, counted=counted,
        common=common))
    front = Front(name=name, port=port, prefix="", server=server, counted_port=counted_port,
                  keeps_backend_conn=False, kind="nginx-%s" % module, workdir=root,
                  split="path", spools_chunked=True, protocol=module,
                  options=dict(unix=unix, mode=mode, request_buffering=request_buffering),
                  truncation_signalled=not unix)
    return _run_nginx(front, conf, bind, (counted_addr, backend_addr))
