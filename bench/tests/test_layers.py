"""bench/'s layers: every module imports, and every import of a bench module (lazy ones
included) points down the layers bench/README.md describes ("The files"), so no cycle can form.
It reads the sources; nothing is started."""
import ast
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent
# Lower number: lower layer. A module may import its own layer's package (bench.servers from
# bench.servers.uwsgi) and anything below; never a layer above, nor a sibling layer of the
# same rank.
RANK = {"bench": 0, "bench.base": 0, "bench.apps": 0, "bench.flask_app": 0,
        "bench.procs": 1, "bench.wire": 1,
        "bench.servers": 2, "bench.fronts": 2, "bench.drivers": 3, "bench.scenarios": 4,
        "bench.survey": 4, "bench.report": 5, "bench.run": 6, "bench.__main__": 7,
        "bench.tests": 8}


def _layer(module):
    parts = module.split(".")
    for n in (2, 1):
        if ".".join(parts[:n]) in RANK:
            return ".".join(parts[:n])
    raise AssertionError("%s belongs to no layer: add it to RANK and the README" % module)


def _modules():
    for path in sorted(BENCH.rglob("*.py")):
        name = ".".join(path.relative_to(BENCH.parent).with_suffix("").parts)
        yield name.removesuffix(".__init__"), path


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bench"):
            yield node.module
            # ``from bench import apps``: the module imported is bench.apps
            yield from ("%s.%s" % (node.module, a.name) for a in node.names)
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("bench"))


def upward_imports():
    bad = []
    for name, path in _modules():
        mine = _layer(name)
        for target in _imports(path):
            theirs = _layer(target)
            if theirs != mine and RANK[theirs] >= RANK[mine] and target != "bench":
                bad.append("%s imports %s" % (name, target))
    return bad


def test_imports_point_down():
    assert upward_imports() == []


# what the ``bench`` extra installs and a bench module imports at the top (bench.flask_app):
# the test run installs only the ``test`` extra, so these may be missing there
BENCH_EXTRA = {"flask", "jinja2", "werkzeug"}


@pytest.mark.parametrize("name", [n for n, _ in _modules() if n != "bench.__main__"])
def test_module_imports(name):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in BENCH_EXTRA:
            raise
        pytest.skip("%s needs %s (pip install -e '.[bench]')" % (name, exc.name))
