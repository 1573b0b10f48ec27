"""The server under test over uwsgi behind a real Apache 2.4 mod_proxy_uwsgi
(``ProxyPass / uwsgi://127.0.0.1:PORT/``; one backend connection per request), thread and
fork mode. mod_proxy_uwsgi reads the answer's HTTP status line (it refuses a CGI ``Status:``
block with 502), refuses chunked uploads (411), and passes a backend's reset on to the client
only sometimes (an app failing after its first chunk gives a short 200, cut or not). flup
has no uwsgi server: its runs skip. Checks live in scenarios.FrontSuite
and scenarios.ScgiChecks.
"""
import pytest

from .peers import (CHUNKED, FrontSuite, ScgiChecks, UwsgiSmoke, assert_same_as_under_uwsgi,
                    front_fixture, probe, start_apache_proxy_uwsgi, upload)

pytestmark = [pytest.mark.peer]


class TestApacheUwsgi(ScgiChecks, FrontSuite):
    front = front_fixture(start_apache_proxy_uwsgi, name="apache-uwsgi")

    @pytest.mark.parametrize("mode", ["read"])
    def test_chunked_upload(self, front, mode):
        """mod_proxy_uwsgi refuses chunked request bodies (411); the backend is not contacted
        and keeps serving."""
        resp = upload(front, mode, CHUNKED, chunked=True)
        assert resp.status == 411, (resp.status, resp.body[:300])
        assert front.request("GET", "/").body == probe.HELLO
        front.assert_alive()


class TestApacheUwsgiForkMode(UwsgiSmoke):
    front = front_fixture(start_apache_proxy_uwsgi, mode="fork", name="apache-uwsgi-fork")
    test_chunked_upload = TestApacheUwsgi.test_chunked_upload


@pytest.mark.smoke
@pytest.mark.parametrize("mode", ["thread", "fork"])
def test_the_app_sees_and_answers_what_it_does_under_uwsgi(server, mode):
    """Behind one mod_proxy_uwsgi config, flupfast and uWSGI 2.0: the same environ keys the
    issue names, the same bodies read (a chunked upload refused alike), the same statuses and
    answers."""
    assert_same_as_under_uwsgi(server, start_apache_proxy_uwsgi, mode, "apache-uwsgi")
