"""House rules a reviewer would otherwise check by eye: comments and docstrings cite
``compat/known_differences.py`` keys or spec sections, never notes outside the repository; the
peer harness (tests/integration) stays split by concern, its imports pointing one way.
"""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Citations of documents a reader of the repository cannot open: flup's bug list and the API
# inventory of the project's notes, the notes' protocol survey, and the issue tracker.
OUTSIDE_CITATION = re.compile(
    r"flup bug \d|\bbugs? \d+\b|\binventory \d+\.\d|peers-and-protocols|\bissues? \d+\b",
    re.IGNORECASE)

# Files rewritten on another branch at the time of writing (the job-contract work owns them);
# each comes off this list when its comments are clean.
NOT_YET_CLEAN = set()  # every file is clean; keep it so

SOURCE_SUFFIXES = (".py", ".pyx", ".pxi", ".pxd", ".pyi")


def sources(top, suffixes=SOURCE_SUFFIXES):
    return sorted(p for p in (ROOT / top).rglob("*")
                  if p.suffix in suffixes and "__pycache__" not in p.parts)


def outside_citations(text):
    """(line number, line) of each line of ``text`` citing a document outside the repo."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)
            if OUTSIDE_CITATION.search(line)]


def test_the_pattern_catches_what_it_is_for():
    cited = ("# flup's pool never grew (flup bug 5).", "as flup does (inventory 2.8)",
             "(peers-and-protocols 1.5.4)", '"""What issue 15 asks."""', "(bug 29)")
    clean = ("# known_differences 'prefork-pool-growth'", "spec section 3.4", "debug = 5",
             "an issue with the front", "Python 3.11.7", "bench/results/issue18")
    assert [bool(outside_citations(c)) for c in cited] == [True] * len(cited)
    assert [bool(outside_citations(c)) for c in clean] == [False] * len(clean)


@pytest.mark.parametrize("top", ["flupfast", "tests", "compat", "bench"])
def test_comments_cite_nothing_outside_the_repository(top):
    """Anything under ``top`` citing flup's bug numbers, inventory sections or issues; the
    known_differences key (or the spec section) says the same and can be looked up."""
    this = Path(__file__).resolve()
    found = []
    for path in sources(top):
        rel = path.relative_to(ROOT).as_posix()
        if path == this or rel in NOT_YET_CLEAN:
            continue
        found += ["%s:%d: %s" % (rel, n, line)
                  for n, line in outside_citations(path.read_text(encoding="utf-8"))]
    assert not found, "\n".join(found)


def test_docs_cite_nothing_outside_the_repository():
    docs = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md")) + [
        ROOT / "bench" / "README.md"]
    # The installed-package run (tests/packaging/run_installed.py) copies README.md and docs/
    # but not bench/: check what is there, and never nothing.
    docs = [p for p in docs if p.exists()]
    assert len(docs) > 1
    found = ["%s:%d: %s" % (p.relative_to(ROOT).as_posix(), n, line)
             for p in docs for n, line in outside_citations(p.read_text(encoding="utf-8"))]
    assert not found, "\n".join(found)


# The peer harness, bottom to top: each module imports only modules before it in this list.
PEER_HARNESS = ("processes", "http_client", "fronts", "probe_script", "nginx", "apache",
                "lighttpd", "scenarios", "peers")


def harness_imports(name):
    """The peer-harness modules that tests/integration/``name``.py imports."""
    tree = ast.parse((ROOT / "tests" / "integration" / ("%s.py" % name)).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            module = node.module.rpartition(".")[2] if node.level or node.module.startswith(
                "tests.integration.") else None
            if module in PEER_HARNESS:
                found.add(module)
    return found


@pytest.mark.parametrize("name", PEER_HARNESS)
def test_peer_harness_imports_point_down(name):
    below = set(PEER_HARNESS[:PEER_HARNESS.index(name)])
    assert harness_imports(name) <= below, harness_imports(name) - below


@pytest.mark.parametrize("name", PEER_HARNESS)
def test_peer_harness_modules_stay_small(name):
    lines = (ROOT / "tests" / "integration" / ("%s.py" % name)).read_text().count("\n")
    assert lines <= 600, "%s.py has %d lines" % (name, lines)
