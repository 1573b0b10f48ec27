"""The server under test behind a real Apache 2.4: mod_proxy_fcgi (``ProxyPass ... fcgi://``,
with and without ``enablereuse``) and mod_fcgid (spawning a .fcgi script whose listening
socket is fd 0). Checks live in scenarios.FrontSuite.
"""
import pytest

from .peers import FrontSuite, start_apache_fcgid, start_apache_proxy_fcgi

pytestmark = [pytest.mark.peer]


class TestApacheProxyFcgiReuse(FrontSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def front(cls, server):
        front = start_apache_proxy_fcgi(server, reuse=True, name="apache-proxy-reuse")
        yield front
        front.stop()


class TestApacheProxyFcgiNoReuse(FrontSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def front(cls, server):
        front = start_apache_proxy_fcgi(server, reuse=False, name="apache-proxy-noreuse")
        yield front
        front.stop()


class TestApacheFcgid(FrontSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def front(cls, server):
        front = start_apache_fcgid(server, name="apache-fcgid")
        yield front
        front.stop()
