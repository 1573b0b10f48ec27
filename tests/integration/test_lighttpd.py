"""The server under test behind a real lighttpd 1.4: mod_fastcgi to the server's Unix socket,
mod_fastcgi spawning the backend itself (``bin-path``: lighttpd starts one process with its
listening socket as fd 0, as mod_fcgid does), and mod_scgi over loopback TCP.

lighttpd opens one backend connection per request, spools request bodies (a chunked upload
arrives with CONTENT_LENGTH) and, with ``fix-root-scriptname``, sends SCRIPT_NAME "" and
PATH_INFO = the decoded path. Checks live in scenarios.FrontSuite and scenarios.ScgiChecks.
"""
import pytest

from .lighttpd import start_lighttpd
from .peers import SCGI_FLUP_BUGS, FrontSuite, ScgiChecks, ScgiSmoke, front_fixture

pytestmark = [pytest.mark.peer]

# Behind lighttpd (not behind nginx, whose STDIN records are cut differently) flup's
# readline(65536) finds a whole 88 KiB line buffered and returns it (compat/known_differences.py
# readline-size).
LIGHTTPD_FCGI_FLUP_BUGS = {"test_upload_modes[mode=readline65536]": (
    "InputStream.readline(size) returns a whole line past size: readline(65536) returned "
    "88255 bytes", True)}


class TestLighttpdFastcgi(FrontSuite):
    flup_bugs = LIGHTTPD_FCGI_FLUP_BUGS
    front = front_fixture(start_lighttpd, protocol="fcgi", name="lighttpd-fcgi")


class TestLighttpdFastcgiSpawn(FrontSuite):
    """``bin-path``: lighttpd spawns the .fcgi script (Debian's python3 in a venv with the
    server, as for mod_fcgid) and stops it when it stops."""
    flup_bugs = LIGHTTPD_FCGI_FLUP_BUGS

    front = front_fixture(start_lighttpd, protocol="fcgi", spawn=True, name="lighttpd-spawn")


class TestLighttpdScgi(ScgiChecks, FrontSuite):
    flup_bugs = SCGI_FLUP_BUGS

    front = front_fixture(start_lighttpd, protocol="scgi", name="lighttpd-scgi")


class TestLighttpdScgiForkMode(ScgiSmoke):
    """The smoke checks plus bodies and errors, for the fork mode."""
    front = front_fixture(start_lighttpd, protocol="scgi", mode="fork",
                          name="lighttpd-scgi-fork")
    test_chunked_upload = FrontSuite.test_chunked_upload
    test_one_backend_connection_per_request = ScgiChecks.test_one_backend_connection_per_request
