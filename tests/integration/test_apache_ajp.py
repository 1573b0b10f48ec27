"""The server under test over AJP13 behind a real Apache 2.4 mod_proxy_ajp
(``ProxyPass / ajp://127.0.0.1:PORT/``), with its pooled, reused backend connections.

Variants: the default pool; ``ping=3`` (CPING/CPONG before requests); ``secret=`` (attribute
0x0C); ``ProxyIOBufferSize 65536`` (64 KiB packets both ways). AJP sends no SCRIPT_NAME or
PATH_INFO: REQUEST_URI is req_uri (the path as Apache re-encodes it, without the query, which
comes as attribute 5) and, as in flup, PATH_INFO is that path, not percent-decoded
(Front.split "raw"). Chunked request bodies are not pushed: the server must pull them with
GET_BODY_CHUNK, and gets no CONTENT_LENGTH. Checks live in scenarios.FrontSuite.
"""
import contextlib
import json
import threading
import time

import pytest

from .http_client import request_while_sending
from .peers import (MEDIUM, FrontSuite, check_upload, expected_sha256, probe,
                    start_apache_proxy_ajp, upload)

pytestmark = [pytest.mark.peer]

AJP_FLUP_BUGS = {
    "test_error_page": (
        "AJP error page is sent with status 200 (startResponse(200, 'Internal Server "
        "Error'), ajp_base.py:985)", True),
    "test_chunked_upload": (
        "AJP needs Content-Length (ajp_base.py addHeader): a chunked body, which "
        "mod_proxy_ajp never pushes, reads as empty", True),
    "test_patch": (
        "mod_proxy_ajp sends PATCH as the stored method (code 0xFF plus attribute 0x0D): "
        "methodTable[0xFF] raises IndexError and the connection is dropped (503)", True),
}

# Measured here: 5.4 s per MiB uploaded in 8 KiB packets (0.7 s with ProxyIOBufferSize 65536),
# 44 ms per GET: 100 MiB would take about 9 minutes (70 s a test with 64 KiB packets).
FLUP_AJP_NAGLE = (
    "every AJP packet goes out as two send() calls (prefix, then payload; ajp_base.py "
    "Packet.write) without TCP_NODELAY: Nagle plus delayed ACK cost ~40 ms per packet, so "
    "each 8 KiB GET_BODY_CHUNK round trip waits 40 ms and 100 MiB takes about 9 minutes")
for _name in ("test_upload_100mib_read65536", "test_upload_100mib_readline",
              "test_upload_pipelined"):
    AJP_FLUP_BUGS[_name] = (FLUP_AJP_NAGLE, False)

FLUP_POOL_RACE = (
    "ThreadPool.addJob counts a thread idle until it pops its job (threadpool.py:94-106): "
    "connections accepted back to back both queue for the one idle thread, and with AJP's "
    "persistent connections the second waits until another connection closes (requests "
    "time out; with ping= the CPING goes unanswered and Apache answers 503)")
FLUP_PREFORK_POOL = (
    "prefork never grows past maxSpare (5) on Python 3 (preforkserver.py compares the status "
    "byte with a str): persistent AJP connections hold every child and the others wait")
AJP_FLUP_BUGS["test_concurrent_pooled"] = (FLUP_POOL_RACE, True)

FLUP_SECRET = ("attribute 0x0C (secret) is outside flup's attribute table: ProtocolError "
               "drops the connection and Apache answers 503")


# The GET_BODY_CHUNK pipeline (flupfast/ajp_connection.py _BodySource): big enough to keep
# asks in flight for thousands of packets at 8 KiB, small enough for every run.
PIPELINED = 24 * 1024 * 1024 + 4321


class AjpChecks:
    """AJP checks: methods sent as stored methods, pooled connections under concurrency, the
    body pipeline's asks ahead of the app."""
    pytestmark = [pytest.mark.peer]

    def test_upload_pipelined(self, front):
        """Some 24 MiB through mod_proxy_ajp, sha256 checked: the asks sent ahead of the app
        are answered in order, never past the body."""
        check_upload(front, upload(front, "read65536", PIPELINED), PIPELINED, "read65536")
        front.assert_alive()

    def test_patch(self, front):
        body = probe.pattern_bytes(5000)
        resp = front.request("PATCH", "/upload?mode=read", body=body,
                             headers={"Content-Length": str(len(body))})
        assert resp.status == 200, (resp.status, resp.body[:500])
        got = resp.json()
        assert (got["length"], got["sha256"]) == (5000, expected_sha256(5000))
        resp = front.request("PATCH", "/environ", body=b"x", headers={"Content-Length": "1"})
        assert resp.status == 200, (resp.status, resp.body[:500])
        assert resp.json()["REQUEST_METHOD"] == "PATCH"
        front.assert_alive()

    def test_concurrent_pooled(self, front):
        """12 threads x 27 requests (GETs checked by their query, uploads by sha256) through
        the counted vhost: all answered, on at most 12 pooled backend connections.

        12, not Apache's 16 ThreadsPerChild: with every worker busy the event MPM closes idle
        keep-alive client connections (measured with 16: an occasional RemoteDisconnected on
        a kept-alive HTTP connection, nothing logged, whatever the backend)."""
        threads, per_thread = 12, 27
        front.counter.reset()
        errors = []

        def worker(t):
            try:
                with contextlib.closing(front.client(port=front.counted_port, timeout=30)) as c:
                    for i in range(per_thread):
                        if i % 5 == 4:
                            size = 20000 + 97 * t + i
                            check_upload(front, upload(front, "read65536", size, client=c),
                                         size, "read65536")
                            continue
                        resp = c.request("GET", front.url("/environ?t=%d&i=%d" % (t, i)))
                        assert resp.status == 200, (t, i, resp.status, resp.body[:300])
                        assert resp.json()["QUERY_STRING"] == "t=%d&i=%d" % (t, i)
            except BaseException as exc:  # reported by the main thread
                errors.append((t, repr(exc)))

        pool = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
        for th in pool:
            th.start()
        for th in pool:
            th.join(120)
        assert not any(th.is_alive() for th in pool), "requests still running after 120 s"
        assert not errors, errors[:5]
        accepted = front.counter.count()
        assert 1 <= accepted <= threads, "%d backend connections" % accepted
        front.assert_alive()


def _class_front(cls, server):
    """The class's own Apache and backend (``cls.options``), named after the class."""
    front = start_apache_proxy_ajp(server, name="apache-ajp-%s"
                                   % (cls.__name__[len("TestApacheAjp"):].lower() or "pool"),
                                   **cls.options)
    yield front
    front.stop()


class ApacheAjpSuite(AjpChecks, FrontSuite):
    options = {}
    flup_bugs = AJP_FLUP_BUGS

    @pytest.fixture(scope="class")
    @classmethod
    def front(cls, server):
        yield from _class_front(cls, server)


class TestApacheAjp(ApacheAjpSuite):
    """The default pool (disablereuse=Off): one backend connection serves sequential
    requests."""


class TestApacheAjpBigPackets(ApacheAjpSuite):
    """ProxyIOBufferSize 65536: request body packets up to 64 KiB and larger responses."""
    options = dict(io_buffer=65536)
    flup_bugs = dict(AJP_FLUP_BUGS, **{"test_upload_modes[mode=readline65536]": (
        "InputStream.readline(size) returns a whole line past size (ajp_base.py "
        "readline): with 64 KiB packets readline(65536) returned 88255 bytes", True)})


class _AjpVariantSuite:
    """The basic checks for an option that changes the packets, not the data path."""
    pytestmark = [pytest.mark.peer]
    options = {}
    flup_bugs = AJP_FLUP_BUGS

    @pytest.fixture(scope="class")
    @classmethod
    def front(cls, server):
        yield from _class_front(cls, server)

    _known_flup_bugs = FrontSuite._known_flup_bugs
    test_hello = FrontSuite.test_hello
    test_environ_query_string = FrontSuite.test_environ_query_string
    test_error_page = FrontSuite.test_error_page
    test_response_splitting_refused = FrontSuite.test_response_splitting_refused
    test_chunked_upload = FrontSuite.test_chunked_upload
    test_sequential_requests_connection_reuse = FrontSuite.test_sequential_requests_connection_reuse
    test_concurrent_pooled = AjpChecks.test_concurrent_pooled

    def test_upload(self, front):
        check_upload(front, upload(front, "read65536", MEDIUM), MEDIUM, "read65536")


class TestApacheAjpPing(_AjpVariantSuite):
    """ping=3: Apache sends CPING and waits for CPONG before each request on a pooled
    connection."""
    options = dict(ping=3)


class TestApacheAjpSecret(_AjpVariantSuite):
    """secret=s3cret: every FORWARD_REQUEST carries attribute 0x0C."""
    options = dict(secret="s3cret")
    flup_bugs = {name: (FLUP_SECRET, True) for name in (
        "test_hello", "test_environ_query_string", "test_error_page", "test_chunked_upload",
        "test_sequential_requests_connection_reuse", "test_concurrent_pooled", "test_upload")}


class TestApacheAjpForkMode(_AjpVariantSuite):
    """Prefork: each pooled connection holds a child (flup: up to maxChildren 50)."""
    options = dict(mode="fork")
    test_upload_pipelined = AjpChecks.test_upload_pipelined
    flup_bugs = dict(AJP_FLUP_BUGS, test_concurrent_pooled=(FLUP_PREFORK_POOL, True))


class TestApacheAjpForkSmallPool:
    """Fork mode with fewer children than Apache opens connections: a kept connection holds
    its child, so a child that ends a request while no sibling is idle and a connection waits
    sends END_RESPONSE with reuse off and takes the waiting one (ChildDrain.may_keep)."""
    pytestmark = [pytest.mark.peer]
    CLIENTS, SLEEP_MS = 6, 300

    options = dict(mode="fork", backend_extra=("--max-children", "2", "--min-spare", "1",
                                               "--max-spare", "2"))

    @pytest.fixture(scope="class")
    @classmethod
    def front(cls, server):
        if server.is_flup:
            # flup's children wait on their kept connections; the others wait for Apache's
            # timeout (and flup never grows past maxSpare: FLUP_PREFORK_POOL).
            pytest.xfail("flup 1.0.3: a kept AJP connection holds its child until it closes")
        yield from _class_front(cls, server)

    def test_more_connections_than_children_are_all_answered(self, front):
        """Six clients at once, each a 300 ms request, through Apache to a pool of two
        children: Apache opens up to six backend connections. Each is answered 200 within a
        few seconds: none waits for the pool's overload answer (5 s, a 503)."""
        results = []

        def client(i):
            started = time.monotonic()
            with contextlib.closing(front.client(timeout=30)) as c:
                resp = c.request("GET", front.url("/sleep?ms=%d&i=%d" % (self.SLEEP_MS, i)))
            results.append((i, resp.status, time.monotonic() - started))

        for burst in range(2):  # the second on the connections the first left in Apache
            results.clear()
            threads = [threading.Thread(target=client, args=(i,), daemon=True)
                       for i in range(self.CLIENTS)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(60)
            assert len(results) == self.CLIENTS, (burst, results)
            assert all(status == 200 for _, status, _ in results), (burst, results)
            # Three rounds of two children at 0.3 s each, with room for a loaded machine;
            # a connection left waiting takes the overload bound, 5 s.
            assert max(took for _, _, took in results) < 4.0, (burst, results)
        front.assert_alive()


class _PartialReadSuite:
    """The body pipeline's drain on a fresh front: its pool starts empty, so every backend
    connection the counting proxy sees is this test's."""
    pytestmark = [pytest.mark.peer]
    options = {}

    @pytest.fixture(scope="class")
    @classmethod
    def front(cls, server):
        yield from _class_front(cls, server)

    def test_partial_read_then_reuse(self, front):
        """An app that reads 10,000 bytes of a 1 MiB upload and answers, with asks still in
        flight, five times on one kept client and backend connection, each followed by a GET
        and the last by a whole upload: every answer right, on one backend connection (the
        answers owed were read off before the next request)."""
        front.counter.reset()
        with contextlib.closing(front.client(port=front.counted_port, timeout=30)) as c:
            for i in range(5):
                size = (1 << 20) + i
                resp = c.request("POST", front.url("/upload?mode=read65536&limit=10000"),
                                 body=probe.pattern_chunks(size),
                                 headers={"Content-Length": str(size)})
                assert resp.status == 200, (i, resp.status, resp.body[:300])
                got = resp.json()
                assert (got["length"], got["sha256"]) == (10000, expected_sha256(10000)), got
                resp = c.request("GET", front.url("/environ?i=%d" % i))
                assert resp.status == 200, (i, resp.status, resp.body[:300])
                assert resp.json()["QUERY_STRING"] == "i=%d" % i
            check_upload(front, upload(front, "read65536", MEDIUM, client=c), MEDIUM,
                         "read65536")
        assert front.counter.count() == 1
        front.assert_alive()


    def test_partial_read_then_a_large_answer(self, front):
        """An app that stops reading with asks in flight and answers 4 MiB: the web server's
        answers to those asks fit the socket buffers on the way (limits.AJP_BODY_AHEAD), so
        it goes on reading the response. (Asks beyond the buffers would leave both sides
        blocked sending; loopback's autotuned buffers hold several MiB, so this passes even
        at 16 MiB ahead: it proves the shipped limit end to end, not the bound.) The client
        reads while it sends: one that sends its whole body first blocks on its own once the
        kernel's buffers hold no more of it (Apache reads the rest only after the answer),
        and a machine whose buffers take less of the body failed the test that way."""
        size, pad = 4 << 20, 4 << 20
        resp, body = request_while_sending(
            front.host, front.port, "POST",
            front.url("/upload?mode=read65536&limit=10000&pad=%d" % pad),
            probe.pattern_chunks(size), size, timeout=30)
        assert resp.status == 200, (resp.status, body[:300])
        got = json.loads(body)
        assert (got["length"], len(got["pad"])) == (10000, pad)
        front.assert_alive()


class TestApacheAjpPartialRead(_PartialReadSuite):
    """Thread mode."""


class TestApacheAjpPartialReadFork(_PartialReadSuite):
    """Fork mode: the kept connection holds one child."""
    options = dict(mode="fork")

