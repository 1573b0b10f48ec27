"""flupfast.server.cgi.WSGIServer behind a real Apache 2.4 running it with mod_cgi: a .cgi
script (Debian's python3 in the mod_fcgid venv, readable by www-data) per request; bodies go
through Apache both ways in binary. flup's own cgi.WSGIServer cannot send a bytes body on
Python 3 (it writes str to sys.stdout), so this runs on flupfast only.
"""
import hashlib

import pytest

from tests.apps import probe

from .peers import (APACHE_MODULES, SYSTEM_PYTHON, _start_apache, free_port, require,
                    write_probe_script)

pytestmark = [pytest.mark.peer]

CGI_SCRIPT = """\
#!{python}
# Written by tests/integration/test_apache_cgi.py: Apache's mod_cgi runs it once per request.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from probe import app  # noqa: E402
from flupfast.server.cgi import WSGIServer  # noqa: E402

WSGIServer(app).run()
"""


def start_apache_cgi(server):
    require(str(APACHE_MODULES / "mod_cgi.so"), "apache2 (mod_cgi)")
    require(SYSTEM_PYTHON, "Debian python3")
    port = free_port()

    def setup(front, root, body):
        write_probe_script(server, root / "htdocs", "probe.cgi", CGI_SCRIPT)
        return body.format(root=root, port=port, speedups=server.speedups)

    body = """\
Listen 127.0.0.1:{port}
<VirtualHost 127.0.0.1:{port}>
    SetEnv FLUPFAST_SPEEDUPS {speedups}
    SetEnv PYTHONDONTWRITEBYTECODE 1
    <Directory "{root}/htdocs">
        Options +ExecCGI
        AddHandler cgi-script .cgi
        Require all granted
    </Directory>
</VirtualHost>
"""
    return _start_apache("apache-cgi-%s" % server.name, server, body, ["cgi", "env"], port,
                         prefix="/probe.cgi", loglevel="info cgi:info", kind="cgi",
                         split="prefix", setup=setup)


@pytest.fixture(scope="module")
def front(server):
    if server.is_flup:
        pytest.skip("flup 1.0.3's cgi.WSGIServer writes str to sys.stdout: no bytes body "
                    "(compat/known_differences.py 'cgi-server-bytes')")
    front = start_apache_cgi(server)
    yield front
    front.stop()


@pytest.mark.smoke
def test_hello(front):
    resp = front.request("GET", "/")
    assert (resp.status, resp.body) == (200, probe.HELLO), front.describe()
    assert resp.headers["content-type"] == "text/plain"
    # (Apache re-frames CGI output itself: chunked, the script's Content-Length dropped.)


@pytest.mark.smoke
def test_environ(front, server):
    resp = front.request("GET", "/environ/a%20b?x=1")
    view = resp.json()
    assert view["GATEWAY_INTERFACE"] == "CGI/1.1"
    assert (view["SCRIPT_NAME"], view["PATH_INFO"]) == ("/probe.cgi", "/environ/a b")
    assert view["QUERY_STRING"] == "x=1"
    assert (view["wsgi.multithread"], view["wsgi.multiprocess"], view["wsgi.run_once"]) == \
        (False, True, True)
    assert view["FLUPFAST_SPEEDUPS"] == server.speedups
    # PEP 3333: the UTF-8 bytes Apache decoded from %C3%A9, one latin-1 character each.
    view = front.request("GET", "/environ/caf%C3%A9").json()
    assert view["PATH_INFO"] == "/environ/caf\u00c3\u00a9"


@pytest.mark.smoke
@pytest.mark.parametrize("mode", ["read", "readline", "iter"])
def test_binary_upload(front, mode):
    body = bytes(range(256)) * 8192  # 2 MiB, every byte value
    resp = front.request("POST", "/upload?mode=" + mode, body=body,
                         headers={"Content-Type": "application/octet-stream"})
    result = resp.json()
    assert (result["length"], result["sha256"]) == (len(body), hashlib.sha256(body).hexdigest())


def test_binary_download_and_stream(front):
    size = 8 << 20
    client = front.client()
    resp, length, digest = client.download("GET", front.url("/download?size=%d" % size))
    assert (resp.status, length, digest) == (200, size, resp.headers["x-sha256"])
    resp, length, digest = client.download("GET", front.url("/stream?chunks=16&size=65536"))
    assert (length, digest) == (16 * 65536, probe.pattern_sha256(16 * 65536))


def test_write_and_str_bodies(front):
    assert front.request("GET", "/write").body == b"".join(probe.WRITE_CHUNKS)
    assert front.request("GET", "/str").body == probe.STR_BODY.encode("latin-1")


def test_error_page(front):
    resp = front.request("GET", "/error")
    assert resp.status == 500 and b"Unhandled Exception" in resp.body
    front.assert_alive()
