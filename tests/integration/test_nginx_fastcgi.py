"""The server under test behind a real nginx (``fastcgi_pass`` to a Unix socket).

Variants: upstream keepalive with ``fastcgi_keep_conn on``; ``fastcgi_keep_conn off`` (the
server must close after each response); ``fastcgi_request_buffering off`` (bodies streamed,
chunked uploads arrive with no CONTENT_LENGTH). Checks live in scenarios.FrontSuite.
"""
import http.client
import json
import socket

import pytest

from .peers import (SITE_MOUNT_PATHS, FrontSuite, expected_sha256, front_fixture, probe,
                    site_mount_environ, start_nginx)

pytestmark = [pytest.mark.peer]


class NginxSuite(FrontSuite):
    keep_conn = True
    request_buffering = True
    front = front_fixture(start_nginx, keep_conn=lambda cls: cls.keep_conn,
                          request_buffering=lambda cls: cls.request_buffering,
                          name=lambda cls: "nginx-%s" % cls.__name__[9:].lower())

    @SITE_MOUNT_PATHS
    def test_site_mount_path_info(self, front, wire, decoded):
        """location /app/ with fastcgi_split_path_info: SCRIPT_NAME=/app, PATH_INFO decoded
        (the params are declared twice; the site's later value must win)."""
        site_mount_environ(front, wire, decoded)


class TestNginxKeepConn(NginxSuite):
    keep_conn = True


class TestNginxNoKeepConn(NginxSuite):
    keep_conn = False


class TestNginxUnbuffered(NginxSuite):
    """fastcgi_request_buffering off: the body reaches the app while the client sends it."""
    request_buffering = False

    def test_body_streams_to_app(self, front):
        """The app answers after reading 1 MiB of an 8 MiB body the client has not finished
        sending: only possible when nginx streams the body instead of spooling it first."""
        part = 1024 * 1024
        head = ("POST /upload?limit=%d HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n"
                "Connection: close\r\n\r\n" % (part, 8 * part)).encode("ascii")
        with socket.create_connection(("127.0.0.1", front.port), timeout=30) as s:
            s.sendall(head + probe.pattern_bytes(part))
            resp = http.client.HTTPResponse(s)
            resp.begin()
            body = resp.read()
        assert resp.status == 200, body
        got = json.loads(body)
        assert (got["length"], got["sha256"]) == (part, expected_sha256(part))
        assert got["content_length"] == str(8 * part)
        assert front.request("GET", "/").body == probe.HELLO
        front.assert_alive()


class _ModeSuite:
    """The smoke checks plus reuse and chunked bodies, for the non-default server modes."""
    pytestmark = [pytest.mark.peer]
    mode = None
    keep_conn = True
    front = front_fixture(start_nginx, keep_conn=lambda cls: cls.keep_conn,
                          mode=lambda cls: cls.mode, name=lambda cls: "nginx-%s" % cls.mode)

    test_hello = FrontSuite.test_hello
    test_environ_query_string = FrontSuite.test_environ_query_string
    test_upload_100mib_read65536 = FrontSuite.test_upload_100mib_read65536
    test_chunked_upload = FrontSuite.test_chunked_upload
    test_error_page = FrontSuite.test_error_page
    test_response_splitting_refused = FrontSuite.test_response_splitting_refused
    test_sequential_requests_connection_reuse = FrontSuite.test_sequential_requests_connection_reuse


class TestNginxForkMode(_ModeSuite):
    mode = "fork"


class TestNginxSingleMode(_ModeSuite):
    """One connection at a time (flup's contract), so no upstream keepalive: nginx's idle
    kept connection would hold the server, and a second upstream connection (here the counted
    upstream; in production another worker) waits for nginx's 60 s keepalive_timeout. Measured
    identical with flup 1.0.3 and flupfast."""
    mode = "single"
    keep_conn = False


class _TcpSuite:
    """nginx reaching the server over loopback TCP (where a truncated response is signalled
    with a reset rather than as on a Unix socket): the smoke checks, the failed response and
    backend connection reuse."""
    pytestmark = [pytest.mark.peer]
    keep_conn = True

    @pytest.fixture(scope="class")
    @classmethod
    def front(cls, server):
        front = start_nginx(server, keep_conn=cls.keep_conn, unix=False,
                            name="nginx-tcp-%s" % ("keep" if cls.keep_conn else "nokeep"))
        yield front
        front.stop()

    test_hello = FrontSuite.test_hello
    test_error_page = FrontSuite.test_error_page
    test_error_after_first_chunk = FrontSuite.test_error_after_first_chunk
    test_sequential_requests_connection_reuse = FrontSuite.test_sequential_requests_connection_reuse


class TestNginxTcpKeepConn(_TcpSuite):
    keep_conn = True


class TestNginxTcpNoKeepConn(_TcpSuite):
    keep_conn = False
