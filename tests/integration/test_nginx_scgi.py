"""The server under test over SCGI behind a real nginx (``scgi_pass``), on loopback TCP and on a
Unix socket, plus SCGI checks that need no front (the allow-list).

nginx sends CONTENT_LENGTH first, then ``scgi_params`` (REQUEST_URI, DOCUMENT_URI, no
SCRIPT_NAME or PATH_INFO); the main location adds what a typical site does (SCRIPT_NAME "" and
PATH_INFO $uri), ``location ~ ^(/app)(/.*)$`` mounts the app on a prefix, and the counted port
(through the connection-counting proxy) has the stock parameters only. One backend connection
per request (SCGI has no keep-alive). Checks live in scenarios.FrontSuite.
"""
import contextlib
import json

import pytest

from .peers import (SCGI_FLUP_BUGS, SITE_MOUNT_PATHS, FrontSuite, ScgiChecks, ScgiSmoke,
                    ServerSpec, covered_over_tcp, expected_sha256, free_port, front_fixture,
                    latin1_of_utf8, make_tempdir, probe, raw_exchange, raw_http, remove_tempdir,
                    scgi_request, site_mount_environ, start_backend, start_nginx_scgi,
                    wait_for_log)

pytestmark = [pytest.mark.peer]


class NginxScgiSuite(ScgiChecks, FrontSuite):
    unix = False
    flup_bugs = SCGI_FLUP_BUGS

    front = front_fixture(start_nginx_scgi, unix=lambda cls: cls.unix,
                          name=lambda cls: "nginx-scgi-%s" % ("unix" if cls.unix else "tcp"))

    @SITE_MOUNT_PATHS
    def test_site_mount_path_info(self, front, wire, decoded):
        """location ~ ^(/app)(/.*)$: SCRIPT_NAME=/app, PATH_INFO the decoded rest."""
        env = site_mount_environ(front, wire, decoded)
        assert env["DOCUMENT_URI"] == "/app" + decoded

    @pytest.mark.parametrize("wire", [
        "/environ/x", "/environ/caf%C3%A9/a%20b%21", latin1_of_utf8("/environ/café/ü"),
    ], ids=["plain", "percent", "raw-utf8"])
    def test_stock_scgi_params(self, front, wire):
        """The stock scgi_params only (no SCRIPT_NAME, no PATH_INFO): as flup does, SCRIPT_NAME
        is "" and PATH_INFO the REQUEST_URI path, not percent-decoded (flupfast keeps flup's
        undecoded cut: compat/known_differences.py)."""
        with contextlib.closing(front.client(port=front.counted_port)) as c:
            resp = c.request("GET", wire + "?k=1")
        assert resp.status == 200, resp.body[:500]
        env = resp.json()
        assert (env["SCRIPT_NAME"], env["PATH_INFO"]) == ("", wire)
        assert (env["REQUEST_URI"], env["QUERY_STRING"]) == (wire + "?k=1", "k=1")


    def test_own_scgi_params_without_scgi(self, front):
        """location ~ ^(/bare)(/.*)$ lists its own scgi_param lines, without the stock
        scgi_params: nginx then sends no SCGI=1, and the request is served as flup serves it."""
        resp = front.request("GET", "/bare/environ/x?k=1")
        assert resp.status == 200, (resp.status, resp.body[:500], front.describe()[-3000:])
        env = resp.json()
        assert "SCGI" not in env
        assert (env["SCRIPT_NAME"], env["PATH_INFO"], env["QUERY_STRING"]) == (
            "/bare", "/environ/x", "k=1")


class TestNginxScgiTcp(NginxScgiSuite):
    unix = False


class TestNginxScgiUnix(NginxScgiSuite):
    """The same over a Unix socket; the 100 MiB and per-mode checks already ran over TCP."""
    unix = True
    _tcp_covers = covered_over_tcp("test_stock_scgi_params")


class _ScgiModeSuite(ScgiSmoke):
    """The smoke checks plus bodies and errors, for the fork and single modes."""
    mode = None
    front = front_fixture(start_nginx_scgi, mode=lambda cls: cls.mode,
                          name=lambda cls: "nginx-scgi-%s" % cls.mode)
    test_upload_100mib_read65536 = FrontSuite.test_upload_100mib_read65536
    test_chunked_upload = FrontSuite.test_chunked_upload
    test_response_splitting_refused = FrontSuite.test_response_splitting_refused
    test_one_backend_connection_per_request = ScgiChecks.test_one_backend_connection_per_request


class TestNginxScgiForkMode(_ScgiModeSuite):
    mode = "fork"


class TestNginxScgiSingleMode(_ScgiModeSuite):
    """flup 1.0.3 has no scgi_single: skipped there."""
    mode = "single"


# ------------------------------------------------------------------------------------------
# Repeated header lines: nginx before 1.23 sends one SCGI pair per line

REPEATED = ["Cookie: a=1", "X-Forwarded-For: 10.0.0.1", "Cookie: b=2",
            "X-Forwarded-For: 10.0.0.2"]
# What differs between two fronts and two backends, whatever they run (the temp dirs, the
# ports, the pid), and flup's text StringIO for an empty SCGI body (scgi-bounded-input).
PER_RUN = ("probe.pid", "DOCUMENT_ROOT", "REMOTE_PORT", "SERVER_PORT", "wsgi.input.type")


def environ_with_repeats(front):
    resp, body, _ = raw_http(front.host, front.port, [
        "GET /environ/x?k=1 HTTP/1.1", "Host: localhost", "Connection: close"] + REPEATED)
    assert resp.status == 200, (resp.status, body[:500], front.describe()[-3000:])
    env = json.loads(body)
    for key in PER_RUN:
        env.pop(key, None)
    return env


@pytest.mark.smoke
@pytest.mark.parametrize("mode", ["thread", "fork"])
def test_repeated_headers_same_environ_as_flup(server, mode):
    """Two Cookie and two X-Forwarded-For lines through nginx ``scgi_pass``: 200 and the
    environ flup 1.0.3 gives behind the same nginx config (the last value of each)."""
    if server.is_flup:
        pytest.skip("flup is the reference here")
    fronts = {}
    try:
        for name, spec in (("ours", server), ("flup", ServerSpec("flup"))):
            fronts[name] = start_nginx_scgi(spec, mode=mode,
                                            name="nginx-scgi-repeat-%s-%s" % (name, mode))
        ours, flup = (environ_with_repeats(fronts[n]) for n in ("ours", "flup"))
    finally:
        for front in fronts.values():
            front.stop()
    assert (ours["HTTP_COOKIE"], ours["HTTP_X_FORWARDED_FOR"]) == ("b=2", "10.0.0.2")
    assert ours == flup


# ------------------------------------------------------------------------------------------
# No front: the allow-list, with raw SCGI requests from two loopback source addresses

SCGI_GET = scgi_request([("REQUEST_METHOD", "GET"), ("REQUEST_URI", "/"), ("SCRIPT_NAME", ""),
                         ("PATH_INFO", "/"), ("QUERY_STRING", ""),
                         ("SERVER_NAME", "localhost"), ("SERVER_PORT", "80"),
                         ("SERVER_PROTOCOL", "HTTP/1.1"), ("REMOTE_ADDR", "127.0.0.1")])


@pytest.fixture(scope="module")
def allow_listed(server):
    """A backend allowing 10.9.9.9 and 127.0.0.2 only, on 127.0.0.1:PORT."""
    root = make_tempdir("scgi-allow")
    port = free_port()
    proc = start_backend(server, root, "127.0.0.1:%d" % port, protocol="scgi",
                         extra=["--allowed-servers", "10.9.9.9,127.0.0.2"],
                         name="backend-%s-scgi-allow" % server.name)
    yield proc, ("127.0.0.1", port)
    proc.stop()
    remove_tempdir(root)


@pytest.mark.smoke
def test_allowed_servers(allow_listed):
    """A peer not in --allowed-servers is closed on without an answer and logged as
    'disallowed'; an allowed one (source 127.0.0.2) is then served as usual."""
    proc, address = allow_listed
    assert raw_exchange(address, SCGI_GET, source="127.0.0.1") == b""
    wait_for_log(proc, "disallowed")
    answer = raw_exchange(address, SCGI_GET, source="127.0.0.2")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"Status: 200"), (answer[:500], proc.describe())
    assert body == probe.HELLO
    assert proc.alive(), proc.describe()


@pytest.mark.smoke
def test_raw_request_body_bounded(server, allow_listed):
    """The body ends at CONTENT_LENGTH even though the connection stays open for writing:
    read() returns after exactly the announced bytes."""
    if server.is_flup:
        pytest.xfail("flup 1.0.3: " + SCGI_FLUP_BUGS["test_upload_modes"][0])
    proc, address = allow_listed
    body = probe.pattern_bytes(70001)
    req = scgi_request([("REQUEST_METHOD", "POST"), ("REQUEST_URI", "/upload?mode=read"),
                        ("QUERY_STRING", "mode=read"), ("SCRIPT_NAME", ""),
                        ("PATH_INFO", "/upload"), ("SERVER_NAME", "localhost"),
                        ("SERVER_PORT", "80"), ("SERVER_PROTOCOL", "HTTP/1.1")], body)
    answer = raw_exchange(address, req, source="127.0.0.2")  # no shutdown(SHUT_WR), as fronts
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"Status: 200"), (answer[:500], proc.describe())
    got = json.loads(payload)
    assert (got["length"], got["sha256"]) == (70001, expected_sha256(70001))
