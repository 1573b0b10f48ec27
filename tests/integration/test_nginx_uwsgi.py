"""The server under test over uwsgi behind a real nginx (``uwsgi_pass`` with ``include
uwsgi_params``), on loopback TCP and a Unix socket, request buffering on and off, thread and
fork mode; and the same requests behind the same nginx config answered by real uWSGI, whose
PATH_INFO, QUERY_STRING, REQUEST_METHOD, SCRIPT_NAME, CONTENT_LENGTH, body, status and answer
the app must see and give alike (single mode gets the smoke checks too).

The stock uwsgi_params send PATH_INFO = $document_uri (decoded) and no SCRIPT_NAME; the main
location adds SCRIPT_NAME "" and PATH_INFO $uri (so PATH_INFO comes twice, the same value),
``location ~ ^(/app)(/.*)$`` mounts the app on a prefix (PATH_INFO twice, the last wins), and
the counted port has the stock parameters only. One backend connection per request. flup has
no uwsgi server: its runs skip. Checks live in scenarios.FrontSuite and ScgiChecks.
"""
import contextlib
import json

import pytest

from flupfast.protocols.uwsgi import encode_request
from .peers import (SITE_MOUNT_PATHS, FrontSuite, ScgiChecks, UwsgiSmoke,
                    assert_same_as_under_uwsgi, covered_over_tcp, free_port, front_fixture,
                    latin1_of_utf8, make_tempdir, probe, raw_exchange, raw_http, remove_tempdir,
                    site_mount_environ, start_backend, start_nginx_uwsgi, wait_for_log)

pytestmark = [pytest.mark.peer]


class NginxUwsgiSuite(ScgiChecks, FrontSuite):
    unix = False
    request_buffering = True

    front = front_fixture(start_nginx_uwsgi, unix=lambda cls: cls.unix,
                          request_buffering=lambda cls: cls.request_buffering,
                          name=lambda cls: "nginx-uwsgi-%s-%s" % (
                              "unix" if cls.unix else "tcp",
                              "buffered" if cls.request_buffering else "streamed"))

    @SITE_MOUNT_PATHS
    def test_site_mount_path_info(self, front, wire, decoded):
        """location ~ ^(/app)(/.*)$: SCRIPT_NAME=/app, PATH_INFO the decoded rest (sent after
        uwsgi_params' PATH_INFO: the last value wins)."""
        site_mount_environ(front, wire, decoded)

    @pytest.mark.parametrize("wire, decoded", [
        ("/environ/x", "/environ/x"),
        ("/environ/caf%C3%A9/a%20b%21", latin1_of_utf8("/environ/café/a b!")),
    ], ids=["plain", "percent"])
    def test_stock_uwsgi_params(self, front, wire, decoded):
        """The stock uwsgi_params only: SCRIPT_NAME "" and PATH_INFO the decoded path as
        nginx sends it, the status line as HTTP (REQUEST_SCHEME http)."""
        with contextlib.closing(front.client(port=front.counted_port)) as c:
            resp = c.request("GET", wire + "?k=1")
        assert resp.status == 200, resp.body[:500]
        env = resp.json()
        assert (env["SCRIPT_NAME"], env["PATH_INFO"]) == ("", decoded)
        assert (env["REQUEST_URI"], env["QUERY_STRING"]) == (wire + "?k=1", "k=1")
        assert (env["REQUEST_SCHEME"], env["wsgi.url_scheme"]) == ("http", "http")
        assert env["CONTENT_LENGTH"] == ""  # $content_length of a GET, passed as sent

    def test_own_uwsgi_params(self, front):
        """location ~ ^(/bare)(/.*)$ lists its own uwsgi_param lines: no CONTENT_LENGTH at all
        for a GET, and the request is served."""
        resp = front.request("GET", "/bare/environ/x?k=1")
        assert resp.status == 200, (resp.status, resp.body[:500], front.describe()[-3000:])
        env = resp.json()
        assert (env["SCRIPT_NAME"], env["PATH_INFO"], env["QUERY_STRING"]) == (
            "/bare", "/environ/x", "k=1")
        assert "CONTENT_LENGTH" not in env


class TestNginxUwsgiTcp(NginxUwsgiSuite):
    unix = False


class TestNginxUwsgiUnix(NginxUwsgiSuite):
    """The same over a Unix socket; the 100 MiB checks already ran over TCP."""
    unix = True
    _tcp_covers = covered_over_tcp("test_stock_uwsgi_params")


class _UwsgiSmokeSuite(UwsgiSmoke):
    """The smoke checks plus bodies (100 MiB up and down), errors and HEAD."""
    mode = "thread"
    request_buffering = True
    front = front_fixture(start_nginx_uwsgi, mode=lambda cls: cls.mode,
                          request_buffering=lambda cls: cls.request_buffering,
                          name=lambda cls: "nginx-uwsgi-%s-%s" % (cls.mode,
                                                                 cls.request_buffering))
    test_upload_modes = FrontSuite.test_upload_modes
    _download = FrontSuite._download
    test_download_100mib = FrontSuite.test_download_100mib
    test_chunked_upload = FrontSuite.test_chunked_upload
    test_error_after_first_chunk = FrontSuite.test_error_after_first_chunk
    test_response_splitting_refused = FrontSuite.test_response_splitting_refused
    test_one_backend_connection_per_request = ScgiChecks.test_one_backend_connection_per_request


class TestNginxUwsgiRequestBufferingOff(_UwsgiSmokeSuite):
    """``uwsgi_request_buffering off``: nginx streams a Content-Length body as it arrives
    (a chunked one it still buffers, to send CONTENT_LENGTH first)."""
    request_buffering = False


class TestNginxUwsgiForkMode(_UwsgiSmokeSuite):
    mode = "fork"


class TestNginxUwsgiForkModeStreamed(_UwsgiSmokeSuite):
    mode = "fork"
    request_buffering = False


class TestNginxUwsgiSingleMode(_UwsgiSmokeSuite):
    mode = "single"


# ------------------------------------------------------------------------------------------
# Repeated header lines: nginx before 1.23 sends one uwsgi var per line

REPEATED = ["Cookie: a=1", "X-Forwarded-For: 10.0.0.1", "Cookie: b=2",
            "X-Forwarded-For: 10.0.0.2"]


@pytest.mark.smoke
def test_repeated_headers_keep_the_last_value(server):
    if server.is_flup:
        pytest.skip("flup has no uwsgi server")
    front = start_nginx_uwsgi(server, name="nginx-uwsgi-repeat")
    try:
        resp, body, _ = raw_http(front.host, front.port, [
            "GET /environ/x?k=1 HTTP/1.1", "Host: localhost", "Connection: close"] + REPEATED)
    finally:
        front.stop()
    assert resp.status == 200, body[:500]
    env = json.loads(body)
    assert (env["HTTP_COOKIE"], env["HTTP_X_FORWARDED_FOR"]) == ("b=2", "10.0.0.2")


# ------------------------------------------------------------------------------------------
# The same requests answered by real uWSGI behind the same nginx config

@pytest.mark.smoke
@pytest.mark.parametrize("mode", ["thread", "fork"])
def test_the_app_sees_and_answers_what_it_does_under_uwsgi(server, mode):
    """Behind one nginx uwsgi_pass config, flupfast and uWSGI 2.0: the same environ keys the
    issue names, the same bodies read, the same statuses and answers."""
    assert_same_as_under_uwsgi(server, start_nginx_uwsgi, mode, "nginx-uwsgi")


# ------------------------------------------------------------------------------------------
# No front: what a peer that is not a web server sends

GET = [("REQUEST_METHOD", "GET"), ("REQUEST_URI", "/"), ("PATH_INFO", "/"),
       ("QUERY_STRING", ""), ("SERVER_NAME", "localhost"), ("SERVER_PORT", "80"),
       ("SERVER_PROTOCOL", "HTTP/1.1")]


@pytest.mark.smoke
def test_bad_input_is_one_log_line_and_the_next_request_is_served(server):
    """HTTP sent to the uwsgi port, a packet of another modifier1 (uWSGI's other plugins),
    a vars block whose pair runs past its end: each is one "Protocol error" line naming it
    and a closed connection without an answer; a good request is then served."""
    if server.is_flup:
        pytest.skip("flup has no uwsgi server")
    root = make_tempdir("uwsgi-bad-input")
    port = free_port()
    proc = start_backend(server, root, "127.0.0.1:%d" % port, protocol="uwsgi")
    try:
        address = ("127.0.0.1", port)
        for wire, logged in ((b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "modifier1 71 is not served"),
                             (encode_request(GET, modifier1=5), "modifier1 5 is not served"),
                             (b"\x00\x03\x00\x00\x05\x00A", "key of 5 bytes runs past")):
            assert raw_exchange(address, wire) == b"", logged
            wait_for_log(proc, logged)
        answer = raw_exchange(address, encode_request(GET))
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(probe.HELLO)
        assert proc.alive() and "Traceback" not in proc.describe(), proc.describe()
    finally:
        proc.stop()
        remove_tempdir(root)
