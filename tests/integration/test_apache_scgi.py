"""The server under test over SCGI behind a real Apache 2.4 mod_proxy_scgi
(``ProxyPass / scgi://127.0.0.1:PORT/``; one backend connection per request).

Without ``proxy-scgi-pathinfo`` Apache sends SCRIPT_NAME = the decoded path and no PATH_INFO:
the server derives PATH_INFO, and flup's cut of the raw REQUEST_URI at len(SCRIPT_NAME) is
garbage for encoded paths (``/environ/caf%C3%A9/a%20b%21`` -> ``a%20b%21``). With it, Apache
sends PATH_INFO itself (set with SetEnvIf: ``SetEnv`` runs after mod_proxy_scgi reads it).
Checks live in scenarios.FrontSuite and scenarios.ScgiChecks.
"""
import pytest

from .peers import (CHUNKED, SCGI_FLUP_BUGS, FrontSuite, ScgiChecks, ScgiSmoke,
                    apache_canonenc, front_fixture, latin1_of_utf8, probe,
                    start_apache_proxy_scgi, upload)

pytestmark = [pytest.mark.peer]


class TestApacheScgi(ScgiChecks, FrontSuite):
    flup_bugs = SCGI_FLUP_BUGS

    front = front_fixture(start_apache_proxy_scgi, pathinfo=False, name="apache-scgi")

    @pytest.mark.parametrize("mode", ["read"])
    def test_chunked_upload(self, front, mode):
        """mod_proxy_scgi refuses chunked request bodies (411, REQUEST_CHUNKED_ERROR); the
        backend is not contacted and keeps serving."""
        resp = upload(front, mode, CHUNKED, chunked=True)
        assert resp.status == 411, (resp.status, resp.body[:300])
        assert front.request("GET", "/").body == probe.HELLO
        front.assert_alive()


class TestApacheScgiPathInfo(ScgiSmoke):
    """``proxy-scgi-pathinfo``: Apache sends PATH_INFO = "/" + its re-encoded path. When that
    differs from the decoded path, Apache also leaves SCRIPT_NAME = the decoded path (its
    ap_find_path_info finds no match): the server must pass both through as sent."""
    front = front_fixture(start_apache_proxy_scgi, pathinfo=True, name="apache-scgi-pathinfo")
    test_response_splitting_refused = FrontSuite.test_response_splitting_refused

    @pytest.mark.parametrize("wire, decoded", [
        ("/environ/caf%C3%A9/a%20b%21", latin1_of_utf8("/environ/café/a b!")),
        (latin1_of_utf8("/environ/café/ü"), latin1_of_utf8("/environ/café/ü")),
    ], ids=["percent", "raw-utf8"])
    def test_path_info_as_sent(self, front, wire, decoded):
        resp = front.request("GET", wire + "?k=1")
        assert resp.status == 200, resp.body[:500]
        env = resp.json()
        assert (env["SCRIPT_NAME"], env["PATH_INFO"]) == (decoded, apache_canonenc(wire))
        assert (env["REQUEST_URI"], env["QUERY_STRING"]) == (wire + "?k=1", "k=1")

    def test_plain_path_split(self, front):
        resp = front.request("GET", "/environ/a/b?k=1")
        assert resp.status == 200, resp.body[:500]
        env = resp.json()
        assert (env["SCRIPT_NAME"], env["PATH_INFO"]) == ("", "/environ/a/b")
