"""Fixtures for the real-peer tests: which FastCGI server is under test, and failure reports
that carry the fronts' and backend's logs.

``FLUPFAST_PEER_SERVERS`` (comma list of ``cy``, ``py``, ``flup``) picks the servers; the
default is DEFAULT_SERVERS. ``cy``/``py`` are flupfast with FLUPFAST_SPEEDUPS=1/0; ``flup`` is
real flup 1.0.3, for comparison. Tests marked ``smoke`` run on every selected server; the rest
skip ``py`` (the full matrix runs on the compiled backend).
"""
import os

import pytest

# The harness modules hold the shared checks' asserts: rewrite them for readable failures.
pytest.register_assert_rewrite(*("tests.integration.%s" % m for m in (
    "peers", "processes", "http_client", "fronts", "probe_script", "nginx", "apache",
    "lighttpd", "scenarios")))

from .peers import ServerSpec  # noqa: E402

# The one line to change to switch the default server under test.
DEFAULT_SERVERS = ("cy", "py")
KNOWN_SERVERS = ("cy", "py", "flup")


def selected_servers():
    raw = os.environ.get("FLUPFAST_PEER_SERVERS", "")
    names = [n.strip() for n in raw.split(",") if n.strip()] or list(DEFAULT_SERVERS)
    unknown = [n for n in names if n not in KNOWN_SERVERS]
    if unknown:
        raise pytest.UsageError("FLUPFAST_PEER_SERVERS: unknown %s (known: %s)"
                                % (", ".join(unknown), ", ".join(KNOWN_SERVERS)))
    return names


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "smoke: peer test that also runs on the pure-Python backend (py)")


def pytest_report_header(config):
    return "peer servers under test: %s" % ", ".join(selected_servers())


def pytest_generate_tests(metafunc):
    if "server" not in metafunc.fixturenames:
        return
    names = selected_servers()
    if metafunc.definition.get_closest_marker("smoke") is None:
        full = [n for n in names if n != "py"]
        names = full or names[:0]
    if not names:
        names = [pytest.param("py", marks=pytest.mark.skip(
            reason="full peer matrix runs on cy; py runs the smoke subset"))]
    metafunc.parametrize("server", names, indirect=True, scope="module")


@pytest.fixture(scope="module")
def server(request):
    return ServerSpec(request.param)


@pytest.fixture
def flup_bug(server, request):
    """``flup_bug(reason)``: mark the running test xfail (non-strict) when the server is flup."""
    def mark(reason):
        if server.is_flup:
            request.node.add_marker(pytest.mark.xfail(reason="flup 1.0.3: " + reason,
                                                      strict=False))
    return mark


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        front = getattr(item, "funcargs", {}).get("front")
        if front is not None and hasattr(front, "log_sections"):
            for title, text in front.log_sections():
                report.sections.append((title, text))
