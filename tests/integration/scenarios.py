"""The checks every front runs (:class:`FrontSuite`) and the SCGI ones (:class:`ScgiChecks`,
which uwsgi shares), with their helpers: uploads and downloads of the probe's pattern, flup
1.0.3's known failures behind a front, polling the fronts' logs, and what the app sees and
answers through a front (``uwsgi_exchanges``, compared with uWSGI's). Test modules subclass
these with a ``front`` fixture from nginx.py, apache.py or lighttpd.py.
"""
import contextlib
import http.client
import subprocess

import pytest
from tests.apps import probe
from tests.integration.processes import ServerSpec, tail
from tests.waiting import wait_until

# --------------------------------------------------------------------------------------------
# The probe app and the checks every front runs


FLUP_ERROR_PAGE = (
    b'<!DOCTYPE HTML PUBLIC "-//IETF//DTD HTML 2.0//EN">\n'
    b'<html><head>\n'
    b'<title>Unhandled Exception</title>\n'
    b'</head><body>\n'
    b'<h1>Unhandled Exception</h1>\n'
    b'<p>An unhandled exception was thrown by the application.</p>\n'
    b'</body></html>\n')

FLUP_QUADRATIC_WRITE = (
    "flup 1.0.3: OutputStream._write re-slices the remaining body (data = data[toWrite:]) "
    "for every 8 KiB record, quadratic in a single bytes object: 100 MiB takes > 300 s")

BIG = 100 * 1024 * 1024      # the "100 MiB" of the slow tests
MEDIUM = 3 * 1024 * 1024 + 12345
CHUNKED = 8 * 1024 * 1024 + 777
UPLOAD_MODES = ("read", "read65536", "readline", "readline65536", "iter")

_sha_cache = {}


def expected_sha256(size):
    if size not in _sha_cache:
        _sha_cache[size] = probe.pattern_sha256(size)
    return _sha_cache[size]


def latin1_of_utf8(text):
    """What a WSGI app sees for UTF-8 bytes on the wire: each byte as one latin-1 char."""
    return text.encode("utf-8").decode("latin-1")


def upload(front, mode, size, chunked=False, port=None, client=None):
    """POST ``size`` pattern bytes to /upload?mode=...; returns the Response."""
    headers = {"Content-Type": "application/octet-stream"}
    if not chunked:
        headers["Content-Length"] = str(size)
    c = client or front.client(port=port)
    try:
        return c.request("POST", front.url("/upload?mode=%s" % mode),
                         body=probe.pattern_chunks(size), headers=headers)
    finally:
        if client is None:
            c.close()


def check_upload(front, resp, size, mode):
    assert resp.status == 200, (resp.status, resp.body[:2000])
    got = resp.json()
    assert (got["length"], got["sha256"]) == (size, expected_sha256(size)), got
    assert got["mode"] == mode
    return got


# flup 1.0.3's SCGI ``wsgi.input`` is the raw socket file, not bounded to CONTENT_LENGTH, and
# fronts do not half-close after the body: any read to the end of the body blocks until the
# front's timeout (measured: read(), read(65536), readline() and iteration all hang).
FLUP_SCGI_UNBOUNDED_INPUT = (
    "SCGI wsgi.input is the raw socket file, not bounded to CONTENT_LENGTH: a read to the "
    "end of the body blocks until the front times out")

SCGI_FLUP_BUGS = {name: (FLUP_SCGI_UNBOUNDED_INPUT, False) for name in (
    "test_upload_modes", "test_upload_100mib_read65536", "test_upload_100mib_readline",
    "test_chunked_upload", "test_sequential_requests_connection_reuse")}


def wait_for_front_log(front, needle, timeout=10.0):
    """Poll the outputs and log files of the front's processes (web server and backend) until
    one holds ``needle``; fails after ``timeout``."""
    wait_until(lambda: any(needle in tail(path, 1 << 20) for p in front.processes
                           for path in [p.output] + p.logs), timeout, interval=0.05,
               what=lambda: "%r in a log of the front\n%s" % (needle, front.describe()))


class FrontSuite:
    """Every check run through a real front. Subclasses (``Test*`` in the test modules)
    provide a ``front`` fixture returning a running :class:`Front`."""

    pytestmark = [pytest.mark.peer]

    # Known flup 1.0.3 failures behind this front, for the SCGI/AJP suites: a key is a test's
    # name, or ``name[param=value]`` for one parametrization; the value is (reason, runs).
    # runs=False xfails without running (flup would hang until the front's timeout).
    flup_bugs = {}

    @pytest.fixture(autouse=True)
    def _known_flup_bugs(self, request, server):
        if not server.is_flup or not self.flup_bugs:
            return
        node = request.node
        params = getattr(getattr(node, "callspec", None), "params", {})
        keys = [node.originalname] + ["%s[%s=%s]" % (node.originalname, k, v)
                                      for k, v in params.items() if k != "server"]
        for key in keys:
            if key in self.flup_bugs:
                reason, runs = self.flup_bugs[key]
                if not runs:
                    pytest.xfail("flup 1.0.3: " + reason)
                node.add_marker(pytest.mark.xfail(reason="flup 1.0.3: " + reason,
                                                  strict=False))
                return

    # ---- basics ---------------------------------------------------------------------------
    @pytest.mark.smoke
    def test_hello(self, front):
        resp = front.request("GET", "/")
        assert (resp.status, resp.body) == (200, probe.HELLO)
        assert resp.headers["content-type"].startswith("text/plain")
        front.assert_alive()

    @pytest.mark.smoke
    def test_environ_query_string(self, front, server):
        path = "/environ?a=1&b=%20x&c=caf%C3%A9&d=1+2&empty="
        resp = front.request("GET", path, headers={"X-Probe": "yes", "Cookie": "k=v"})
        assert resp.status == 200, resp.body
        env = resp.json()
        assert env["REQUEST_METHOD"] == "GET"
        assert env["QUERY_STRING"] == "a=1&b=%20x&c=caf%C3%A9&d=1+2&empty="
        assert env["REQUEST_URI"] == front.expected_request_uri(path)
        assert env["SERVER_PROTOCOL"] == "HTTP/1.1"
        assert env["HTTP_X_PROBE"] == "yes"
        assert env["HTTP_COOKIE"] == "k=v"
        assert env["REMOTE_ADDR"] == "127.0.0.1"
        assert env["SERVER_PORT"] == str(front.port)
        assert env["wsgi.version"] == [1, 0]
        assert env["wsgi.url_scheme"] == "http"
        assert (env["SCRIPT_NAME"], env["PATH_INFO"]) == front.expected_split(
            front.url("/environ"))
        assert isinstance(env["wsgi.multithread"], bool)
        assert isinstance(env["wsgi.multiprocess"], bool)
        assert env["wsgi.run_once"] is False
        assert "CONTENT_LENGTH" not in env or env["CONTENT_LENGTH"] in ("", "0")

    def _check_path(self, front, flup_bug, wire_path, decoded_path):
        query = "q=%C3%A9t%C3%A9&x=1+2"
        if front.split == "script" and wire_path != decoded_path:
            # Stock fastcgi_params: no PATH_INFO, SCRIPT_NAME is the decoded URI; flup
            # rebuilds PATH_INFO by slicing the raw REQUEST_URI with len(SCRIPT_NAME).
            flup_bug("PATH_INFO derived from REQUEST_URI without percent-decoding")
        resp = front.request("GET", wire_path + "?" + query)
        assert resp.status == 200, (resp.status, resp.body[:500])
        env = resp.json()
        assert env["REQUEST_URI"] == front.expected_request_uri(wire_path + "?" + query)
        assert env["QUERY_STRING"] == query
        full = front.url(decoded_path)
        if front.split == "raw":
            expected = ("", front.sent_path(front.url(wire_path)))
        else:
            # WSGI: SCRIPT_NAME + PATH_INFO is the decoded path. A server deriving PATH_INFO
            # by slicing the raw REQUEST_URI at len(decoded SCRIPT_NAME) yields a raw tail.
            expected = front.expected_split(full)
        assert (env["SCRIPT_NAME"], env["PATH_INFO"]) == expected, {
            k: env.get(k) for k in ("SCRIPT_NAME", "PATH_INFO", "REQUEST_URI")}
        return env

    def test_percent_encoded_path(self, front, flup_bug):
        self._check_path(front, flup_bug, "/environ/caf%C3%A9/a%20b%21",
                         latin1_of_utf8("/environ/café/a b!"))

    def test_raw_utf8_path(self, front, flup_bug):
        self._check_path(front, flup_bug, latin1_of_utf8("/environ/café/ü"),
                         latin1_of_utf8("/environ/café/ü"))

    # ---- request bodies -------------------------------------------------------------------
    @pytest.mark.parametrize("mode", UPLOAD_MODES)
    def test_upload_modes(self, front, mode):
        got = check_upload(front, upload(front, mode, MEDIUM), MEDIUM, mode)
        assert got["content_length"] == str(MEDIUM)

    def test_empty_post(self, front):
        resp = front.request("POST", "/upload?mode=read", body=b"",
                             headers={"Content-Length": "0"})
        assert resp.status == 200, resp.body
        assert (resp.json()["length"], resp.json()["sha256"]) == (0, expected_sha256(0))

    @pytest.mark.slow
    @pytest.mark.smoke
    def test_upload_100mib_read65536(self, front):
        check_upload(front, upload(front, "read65536", BIG), BIG, "read65536")

    @pytest.mark.slow
    @pytest.mark.parametrize("mode", ["readline", "readline65536"])
    def test_upload_100mib_readline(self, front, mode):
        check_upload(front, upload(front, mode, BIG), BIG, mode)

    @pytest.mark.parametrize("mode", ["read", "read65536"])
    def test_chunked_upload(self, front, mode):
        """Transfer-Encoding: chunked, no Content-Length: a spooling front computes
        CONTENT_LENGTH; a streaming one sends none and the body ends at FastCGI STDIN EOF."""
        got = check_upload(front, upload(front, mode, CHUNKED, chunked=True), CHUNKED, mode)
        if front.spools_chunked:
            assert got["content_length"] == str(CHUNKED)
        else:
            assert got["content_length"] in (None, ""), got

    # ---- responses ------------------------------------------------------------------------
    def _download(self, front, size):
        with contextlib.closing(front.client()) as c:
            resp, length, digest = c.download("GET", front.url("/download?size=%d" % size))
        assert resp.status == 200
        assert (length, digest) == (size, expected_sha256(size))
        assert resp.headers["x-sha256"] == digest
        if "content-length" in resp.headers:
            assert int(resp.headers["content-length"]) == size

    def test_download_10mib(self, front):
        """One bytes object (flup adds Content-Length for a one-element list)."""
        self._download(front, 10 * 1024 * 1024 + 1)

    @pytest.mark.slow
    def test_download_100mib(self, front, server):
        if server.is_flup:
            # Measured through nginx: 10 MiB 0.75 s, 20 MiB 3.8 s, 40 MiB 40 s, 100 MiB
            # > 300 s (the pytest timeout); not worth running.
            pytest.xfail(FLUP_QUADRATIC_WRITE)
        self._download(front, BIG)

    def test_stream_generator(self, front):
        chunks, size = 64, 65536 + 3
        with contextlib.closing(front.client()) as c:
            resp, length, digest = c.download(
                "GET", front.url("/stream?chunks=%d&size=%d" % (chunks, size)))
        assert resp.status == 200
        assert (length, digest) == (chunks * size, resp.headers["x-sha256"])

    def test_write_callable(self, front):
        resp = front.request("GET", "/write")
        assert (resp.status, resp.body) == (200, b"".join(probe.WRITE_CHUNKS))

    def test_str_body_latin1(self, front):
        resp = front.request("GET", "/str")
        assert (resp.status, resp.body) == (200, probe.STR_BODY.encode("latin-1"))

    @pytest.mark.smoke
    def test_error_page(self, front):
        resp = front.request("GET", "/error")
        assert resp.status == 500
        assert resp.body == FLUP_ERROR_PAGE
        assert resp.headers["content-type"].startswith("text/html")
        # The traceback goes to the FastCGI stderr stream; the server keeps serving.
        assert front.request("GET", "/").body == probe.HELLO
        front.assert_alive()

    # ---- what a broken app hands back (docs/security.md) ------------------------------------
    @pytest.mark.smoke
    def test_response_splitting_refused(self, front, flup_bug):
        """An app that copies the query into Location, asked for ``?%0d%0aSet-Cookie:...``:
        a 500, no injected header reaches the client, the log names the header (never its
        value), and the server keeps serving (known_differences 'response-head-checked')."""
        flup_bug("start_response passes CR/LF through: response splitting")
        resp = front.request("GET", "/redirect?%0d%0aSet-Cookie:%20admin=1")
        if front.kind == "lighttpd":
            # lighttpd answers 400 itself to control characters in the URL: the request never
            # reaches the app, and nothing can be injected.
            assert resp.status == 400, (resp.status, resp.raw_headers)
            assert not [v for k, v in resp.raw_headers
                        if k.lower() in ("set-cookie", "location") or "admin" in v]
            assert front.request("GET", "/").body == probe.HELLO
            return
        assert resp.status == 500, (resp.status, resp.raw_headers)
        assert resp.body == FLUP_ERROR_PAGE
        assert not [v for k, v in resp.raw_headers
                    if k.lower() in ("set-cookie", "location") or "admin" in v]
        named = "Value of header b'Location' contains a control character"
        wait_for_front_log(front, named)
        assert front.request("GET", "/").body == probe.HELLO
        front.assert_alive()

    @pytest.mark.smoke
    def test_httpoxy_proxy_header_stopped(self, front):
        """With the README's httpoxy line (nginx ``fastcgi_param``/``scgi_param HTTP_PROXY
        ""``, Apache ``RequestHeader unset Proxy early``), a client's ``Proxy:`` header never
        reaches the app as HTTP_PROXY (docs/security.md)."""
        resp = front.request("GET", "/environ", headers={"Proxy": "http://evil.example:3128/"})
        assert resp.status == 200, resp.body[:300]
        assert resp.json().get("HTTP_PROXY", "") == ""
        assert "evil.example" not in resp.body.decode("latin-1")

    @pytest.mark.parametrize("path", ["/bigheader?size=1048576", "/headers?count=10000"],
                             ids=["1mib-header", "10000-headers"])
    def test_huge_response_head(self, front, path, monkeypatch):
        """A 1 MiB header, 10,000 headers: the front's clear error (nginx: 502 "upstream sent
        too big header"; AJP: the 500 page, the head exceeding the packet) or the answer
        itself (Apache passes 10,000 headers on); never a hang, and the server keeps
        serving."""
        monkeypatch.setattr(http.client, "_MAXHEADERS", 20000)  # the client takes them all
        resp = front.request("GET", path)
        if resp.status == 200:
            assert resp.body == probe.HELLO
            if "count" in path:
                assert len([k for k, _ in resp.raw_headers if k.startswith("X-Header-")]) \
                    == 10000
        else:
            assert resp.status in (500, 502), (resp.status, resp.body[:300])
        assert front.request("GET", "/").body == probe.HELLO
        front.assert_alive()

    def test_error_after_first_chunk(self, front, flup_bug):
        """Too late for a 500: the app fails after its first chunk. The client must not get a
        whole-looking response: curl fails (18: the chunked body never ends), or the front
        answers an error status (mod_fcgid, mod_proxy_scgi when it had sent nothing yet).
        Where nothing can be signalled (SCGI on a Unix socket) the truncated 200 stays. The
        traceback is logged once by the backend, and the front serves the next request."""
        if front.truncation_signalled:
            flup_bug("ends a failed response as if complete (truncated-response-signalled)")
        # Connection: close: Apache's mod_proxy_fcgi/scgi leave the unfinished chunked
        # response open until KeepAliveTimeout; closing at once makes the check immediate.
        out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                              "-H", "Connection: close", "-m", "60",
                              "http://127.0.0.1:%d%s" % (front.port, front.url("/error-after"))],
                             capture_output=True, text=True, timeout=90)
        status = int(out.stdout or 0)
        if front.truncation_signalled:
            assert out.returncode != 0 or status >= 500, (out.returncode, status, out.stderr)
        elif front.truncation_signalled is None:  # the front passes the reset on, or not
            assert status == 200 and out.returncode in (0, 18), (out.returncode, out.stderr)
        else:
            assert (out.returncode, status) == (0, 200), out.stderr
        assert front.request("GET", "/").body == probe.HELLO
        logs = [path for p in front.processes for path in [p.output] + p.logs]
        counts = [tail(path, 1 << 20).count("RuntimeError: probe: error after the first chunk")
                  for path in logs]
        assert any(counts) and set(counts) <= {0, 1}, dict(zip(map(str, logs), counts))
        front.assert_alive()

    def test_head(self, front):
        with contextlib.closing(front.client()) as c:
            resp = c.request("HEAD", front.url("/head"))
            assert (resp.status, resp.body) == (200, b"")
            if "content-length" in resp.headers:
                assert int(resp.headers["content-length"]) == len(probe.HEAD_BODY)
            # The same HTTP connection is still usable after the HEAD.
            again = c.request("GET", front.url("/head"))
            assert (again.status, again.body) == (200, probe.HEAD_BODY)

    # ---- connections ----------------------------------------------------------------------
    def test_sequential_requests_connection_reuse(self, front):
        n = 200
        if front.counter is not None:
            front.counter.reset()
        pids = set()
        with contextlib.closing(front.client(port=front.counted_port)) as c:
            for i in range(n):
                path = "/environ?i=%d" % i if i % 10 == 0 else "/"
                if i % 25 == 7:
                    resp = upload(front, "read65536", 70000 + i, client=c)
                    check_upload(front, resp, 70000 + i, "read65536")
                    continue
                resp = c.request("GET", front.url(path))
                assert resp.status == 200, (i, resp.status, resp.body[:300])
                if path == "/":
                    assert resp.body == probe.HELLO, i
                else:
                    env = resp.json()
                    assert env["QUERY_STRING"] == "i=%d" % i
                    pids.add(env["probe.pid"])
        if front.counter is None:
            # mod_fcgid: one connection per request by design; the process is reused.
            assert len(pids) <= 2, pids
            return
        accepted = front.counter.count()
        if front.keeps_backend_conn:
            assert accepted == 1, "%d backend connections for %d requests" % (accepted, n)
        else:
            assert accepted == n, "%d backend connections for %d requests" % (accepted, n)
        front.assert_alive()


# ---- SCGI-specific checks ------------------------------------------------------------------

def upload_limit(front, size, port=None):
    """POST ``size`` pattern bytes to /upload?limit=size: the app reads exactly CONTENT_LENGTH
    (what a careful app does, and the only way to read flup's unbounded SCGI input)."""
    with contextlib.closing(front.client(port=port)) as c:
        resp = c.request("POST", front.url("/upload?limit=%d" % size),
                         body=probe.pattern_chunks(size),
                         headers={"Content-Type": "application/octet-stream",
                                  "Content-Length": str(size)})
    assert resp.status == 200, (resp.status, resp.body[:500])
    got = resp.json()
    assert (got["length"], got["sha256"]) == (size, expected_sha256(size)), got
    assert got["content_length"] == str(size)
    return got


class ScgiChecks:
    """SCGI checks shared by the nginx, Apache and lighttpd SCGI suites (mixed into FrontSuite
    ones)."""

    pytestmark = [pytest.mark.peer]

    def test_upload_read_content_length(self, front):
        upload_limit(front, MEDIUM)

    @pytest.mark.slow
    def test_upload_100mib_read_content_length(self, front):
        upload_limit(front, BIG)

    def test_one_backend_connection_per_request(self, front):
        """SCGI closes after each response: n requests on one HTTP connection make n backend
        connections, and each is answered."""
        n = 20
        front.counter.reset()
        with contextlib.closing(front.client(port=front.counted_port)) as c:
            for i in range(n):
                resp = c.request("GET", front.url("/"))
                assert (resp.status, resp.body) == (200, probe.HELLO), i
        assert front.counter.count() == n
        front.assert_alive()


class ScgiSmoke:
    """The smoke checks, bodies and errors of FrontSuite and ScgiChecks, for an SCGI front in
    another mode or setting (fork and single modes, Apache's proxy-scgi-pathinfo): a suite
    names the further checks its front supports."""

    pytestmark = [pytest.mark.peer]
    flup_bugs = SCGI_FLUP_BUGS
    _known_flup_bugs = FrontSuite._known_flup_bugs
    test_hello = FrontSuite.test_hello
    test_environ_query_string = FrontSuite.test_environ_query_string
    test_error_page = FrontSuite.test_error_page
    test_upload_read_content_length = ScgiChecks.test_upload_read_content_length


class UwsgiSmoke(ScgiSmoke):
    """ScgiSmoke for a uwsgi front (SCGI's connection) in another mode or setting, with 100 MiB
    up and HEAD (nginx's and Apache's fork mode, nginx's streamed bodies)."""

    test_upload_100mib_read65536 = FrontSuite.test_upload_100mib_read65536
    test_head = FrontSuite.test_head


# The nginx suites' ``location ~ ^(/app)(/.*)$`` (FastCGI: fastcgi_split_path_info) mount.
SITE_MOUNT_PATHS = pytest.mark.parametrize("wire, decoded", [
    ("/environ/x", "/environ/x"),
    ("/environ/caf%C3%A9/a%20b", latin1_of_utf8("/environ/café/a b")),
    (latin1_of_utf8("/environ/ü"), latin1_of_utf8("/environ/ü")),
], ids=["plain", "percent", "raw-utf8"])


def site_mount_environ(front, wire, decoded):
    """GET /app``wire``?k=%C3%A9: SCRIPT_NAME=/app, PATH_INFO ``decoded``, REQUEST_URI and
    QUERY_STRING as sent; returns the environ for the front's own checks."""
    resp = front.request("GET", "/app" + wire + "?k=%C3%A9")
    assert resp.status == 200, resp.body[:500]
    env = resp.json()
    assert (env["SCRIPT_NAME"], env["PATH_INFO"]) == ("/app", decoded)
    assert (env["REQUEST_URI"], env["QUERY_STRING"]) == ("/app" + wire + "?k=%C3%A9",
                                                         "k=%C3%A9")
    return env


COVERED_OVER_TCP = ("test_upload_100mib_read65536", "test_upload_100mib_readline",
                    "test_download_100mib", "test_upload_100mib_read_content_length",
                    "test_site_mount_path_info", "test_percent_encoded_path",
                    "test_raw_utf8_path", "test_str_body_latin1")


def covered_over_tcp(*names):
    """A Unix-socket suite's autouse fixture skipping what its TCP twin ran (the transport does
    not change it): COVERED_OVER_TCP, ``names``, and the upload modes but read and readline."""
    skipped = COVERED_OVER_TCP + names

    @pytest.fixture(autouse=True)
    def _tcp_covers(self, request):
        if request.node.originalname in skipped or (
                request.node.originalname == "test_upload_modes"
                and request.node.callspec.params.get("mode") not in ("read", "readline")):
            pytest.skip("covered over TCP: the transport does not change it")
    return _tcp_covers


def front_fixture(start, **kwargs):
    """A suite's class-scoped ``front``: ``start(server, **kwargs)``, stopped after the class;
    a callable value of ``kwargs`` is called with the suite class first (e.g. its mode)."""
    @pytest.fixture(scope="class")
    @classmethod
    def front(cls, server):
        args = {key: value(cls) if callable(value) else value for key, value in kwargs.items()}
        running = start(server, **args)
        yield running
        running.stop()
    return front


# ---- uwsgi: what the app sees and answers, to compare with uWSGI's -------------------------

SEEN = ("PATH_INFO", "QUERY_STRING", "REQUEST_METHOD", "SCRIPT_NAME", "CONTENT_LENGTH",
        "REQUEST_URI", "wsgi.url_scheme")


def uwsgi_exchanges(front):
    """What the app saw and answered for a set of requests through ``front``: [(request,
    status, seen)]; the uwsgi tests compare flupfast's with uWSGI's behind the same front.
    Each request has its own client connection: uWSGI closes without reading an unread body
    (the kernel resets), and Apache then drops the client's kept-alive connection after a
    complete answer; that reset is the reference's, not a difference under test."""
    out = []
    for path in ("/environ", "/environ/caf%C3%A9/a%20b?x=1&y=%20", "/app/environ/z?q",
                 "/bare/environ/w?k=1", latin1_of_utf8("/environ/ü")):
        resp = front.request("GET", path)
        env = resp.json() if resp.status == 200 else {}
        out.append((path, resp.status, {k: env.get(k) for k in SEEN}))
    resp = front.request("POST", "/environ?post=1", body=b"a=1&b=2",
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
    out.append(("POST /environ", resp.status, {k: resp.json().get(k) for k in SEEN}))
    resp = front.request("GET", "/")
    out.append(("/", resp.status, resp.body))
    resp = front.request("GET", "/no-such-route")
    out.append(("/no-such-route", resp.status, resp.body))
    for chunked in (False, True):
        resp = upload(front, "read", MEDIUM, chunked=chunked)
        got = resp.json() if resp.status == 200 else {}
        if got:
            assert (got["length"], got["sha256"]) == (MEDIUM, expected_sha256(MEDIUM)), got
        out.append(("upload chunked=%s" % chunked, resp.status,
                    (got.get("length"), got.get("sha256"), got.get("content_length"))))
    resp = upload(front, "read65536", CHUNKED)
    out.append(("upload big", resp.status, resp.json()["sha256"]))
    return out


def assert_same_as_under_uwsgi(server, start, mode, name):
    """Behind one front config (``start``: nginx uwsgi_pass, Apache mod_proxy_uwsgi), the
    server under test and uWSGI 2.0 in ``mode``: the same uwsgi_exchanges (environ keys the
    issue names, bodies read, statuses and answers). flup has no uwsgi server: skipped."""
    if server.is_flup:
        pytest.skip("flup has no uwsgi server")
    seen = {}
    for who, spec in (("ours", server), ("uwsgi", ServerSpec("uwsgi"))):
        front = start(spec, mode=mode, name="%s-diff-%s-%s" % (name, who, mode))
        try:
            seen[who] = uwsgi_exchanges(front)
        finally:
            front.stop()
    assert seen["ours"] == seen["uwsgi"]
    assert seen["ours"][6] == ("/", 200, probe.HELLO)
