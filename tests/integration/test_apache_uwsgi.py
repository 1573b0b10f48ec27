"""The server under test over uwsgi behind a real Apache 2.4 mod_proxy_uwsgi
(``ProxyPass / uwsgi://127.0.0.1:PORT/``; one backend connection per request), thread and
fork mode. mod_proxy_uwsgi reads the answer's HTTP status line (it refuses a CGI ``Status:``
block with 502), refuses chunked uploads (411), and passes a backend's reset on to the client
only sometimes (an app failing after its first chunk gives a short 200, cut or not). flup
has no uwsgi server: its runs skip. Checks live in scenarios.FrontSuite
and scenarios.ScgiChecks.
"""
import pytest

from .peers import (CHUNKED, FrontSuite, ScgiChecks, ServerSpec, probe,
                    start_apache_proxy_uwsgi, upload, uwsgi_exchanges)

pytestmark = [pytest.mark.peer]


class TestApacheUwsgi(ScgiChecks, FrontSuite):

    @pytest.fixture(scope="class")
    @classmethod
    def front(cls, server):
        front = start_apache_proxy_uwsgi(server, name="apache-uwsgi")
        yield front
        front.stop()

    @pytest.mark.parametrize("mode", ["read"])
    def test_chunked_upload(self, front, mode):
        """mod_proxy_uwsgi refuses chunked request bodies (411); the backend is not contacted
        and keeps serving."""
        resp = upload(front, mode, CHUNKED, chunked=True)
        assert resp.status == 411, (resp.status, resp.body[:300])
        assert front.request("GET", "/").body == probe.HELLO
        front.assert_alive()


class TestApacheUwsgiForkMode:
    pytestmark = [pytest.mark.peer]

    @pytest.fixture(scope="class")
    @classmethod
    def front(cls, server):
        front = start_apache_proxy_uwsgi(server, mode="fork", name="apache-uwsgi-fork")
        yield front
        front.stop()

    _known_flup_bugs = FrontSuite._known_flup_bugs
    test_hello = FrontSuite.test_hello
    test_environ_query_string = FrontSuite.test_environ_query_string
    test_upload_100mib_read65536 = FrontSuite.test_upload_100mib_read65536
    test_chunked_upload = TestApacheUwsgi.test_chunked_upload
    test_error_page = FrontSuite.test_error_page
    test_head = FrontSuite.test_head
    test_upload_read_content_length = ScgiChecks.test_upload_read_content_length


@pytest.mark.smoke
@pytest.mark.parametrize("mode", ["thread", "fork"])
def test_the_app_sees_and_answers_what_it_does_under_uwsgi(server, mode):
    """Behind one mod_proxy_uwsgi config, flupfast and uWSGI 2.0: the same environ keys the
    issue names, the same bodies read (a chunked upload refused alike), the same statuses and
    answers."""
    if server.is_flup:
        pytest.skip("flup has no uwsgi server")
    seen = {}
    for name, spec in (("ours", server), ("uwsgi", ServerSpec("uwsgi"))):
        front = start_apache_proxy_uwsgi(spec, mode=mode,
                                         name="apache-uwsgi-diff-%s-%s" % (name, mode))
        try:
            seen[name] = uwsgi_exchanges(front)
        finally:
            front.stop()
    assert seen["ours"] == seen["uwsgi"]
    assert seen["ours"][6] == ("/", 200, probe.HELLO)
