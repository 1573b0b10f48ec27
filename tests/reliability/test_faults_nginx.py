"""The pool exhausted behind a real nginx: what the user sees. flup closes the connection (the
user gets a 502 "upstream prematurely closed"); flupfast's "overloaded" answer reaches the user
as a 503 with its body and Retry-After, for FastCGI (END_REQUEST FCGI_OVERLOADED after a 503 on
STDOUT) and SCGI. The one worker thread is held and the queue filled by direct connections to
the backend; the request through nginx is the one beyond the bound.
"""
import contextlib
import os

import pytest

from flupfast.limits import MAX_QUEUED_CONNECTIONS
from tests.integration import peers
from tests.reliability.fault_harness import Backend, Exchange
from tests.reliability.test_faults import assert_held_answers, finish, hold

# The http block (peers.nginx_config adds what every test nginx has).
NGINX_HTTP = """\
    server {{
        listen 127.0.0.1:{port};
        location / {{
            include /etc/nginx/{params};
            {directive} unix:{sock};
        }}
    }}
"""


@pytest.mark.parametrize("protocol", ["fcgi", "scgi"])
def test_overloaded_reaches_the_user_as_503_through_nginx(protocol):
    peers.require(peers.NGINX, "nginx")
    peers.require_root()
    root = peers.make_tempdir("fault-nginx-%s" % protocol)
    (root / "tmp").mkdir()
    backend = nginx = None
    held = queued = ()
    try:
        backend = Backend(root, protocol, "thread", ("--max-threads", "1", "--min-spare", "1",
                                                     "--max-spare", "1"))
        os.chmod(backend.address, 0o777)  # nginx's workers run as www-data
        port = peers.free_port()
        conf = root / "nginx.conf"
        conf.write_text(peers.nginx_config(root, NGINX_HTTP.format(
            port=port, sock=backend.address,
            params="fastcgi_params" if protocol == "fcgi" else "scgi_params",
            directive="fastcgi_pass" if protocol == "fcgi" else "scgi_pass"),
            worker_connections=64))
        nginx = peers.ManagedProcess("nginx-" + protocol, [peers.NGINX, "-p", str(root), "-c",
                                                           str(conf), "-e",
                                                           str(root / "error.log")],
                                     logs=[root / "error.log"], log_dir=root)
        peers.wait_until_connectable(("127.0.0.1", port), nginx)
        held, _ = hold(backend, 1)
        queued = [Exchange(backend, "/?q=%d" % i) for i in range(MAX_QUEUED_CONNECTIONS)]
        with contextlib.closing(peers.HTTPClient("127.0.0.1", port, timeout=60)) as client:
            resp = client.request("GET", "/?beyond")
        assert resp.status == 503, (resp.status, resp.body, nginx.describe())
        assert b"overloaded" in resp.body
        assert resp.headers.get("retry-after") == "1"
        assert_held_answers(held, finish(held))
        assert [e.answer().status for e in queued] == [200] * MAX_QUEUED_CONNECTIONS
        assert not [c for c in backend.calls() if "beyond" in c]
    finally:
        for exchange in queued:
            exchange.close()
        if nginx is not None:
            nginx.stop()
        if backend is not None:
            backend.close()
        peers.remove_tempdir(root)
