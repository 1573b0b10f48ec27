"""FLUPFAST_SPEEDUPS, as a user meets it: each value in a fresh interpreter, the errors' words."""
import os
import subprocess
import sys

import pytest

import flupfast
from flupfast import _impl
from tests.conftest import COMPILED, compiled_required

# The directory holding the flupfast under test, so the child imports the same one.
SITE = os.path.dirname(os.path.dirname(os.path.abspath(flupfast.__file__)))

# Makes ``from flupfast import _speedups`` fail as it does where it was never built.
WITHOUT_COMPILED = "import sys; sys.modules['flupfast._speedups'] = None\n"


def run(value, prelude=""):
    env = dict(os.environ, PYTHONPATH=SITE)
    env.pop("FLUPFAST_SPEEDUPS", None)
    if value is not None:
        env["FLUPFAST_SPEEDUPS"] = value
    script = prelude + "import flupfast; print(flupfast.BACKEND)"
    return subprocess.run([sys.executable, "-c", script], env=env, cwd=SITE,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("value", ["0", "off", "pure", " False "])
def test_pure_values_pick_python_even_when_compiled_is_there(value):
    proc = run(value)
    assert (proc.returncode, proc.stdout) == (0, "python\n"), proc.stderr


@pytest.mark.parametrize("value", [None, "auto", "", "AUTO"])
def test_auto_falls_back_to_python_silently(value):
    proc = run(value, WITHOUT_COMPILED)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "python\n", "")


@pytest.mark.parametrize("value", [None, "auto", "1", "require"])
def test_auto_and_required_use_the_compiled_backend_when_built(value):
    if COMPILED is None:
        if compiled_required():
            pytest.fail("the compiled backend is required but does not import")
        pytest.skip("flupfast._speedups is not built")
    proc = run(value)
    assert (proc.returncode, proc.stdout) == (0, "cython\n"), proc.stderr


@pytest.mark.parametrize("value", ["1", "require", "cython"])
def test_required_without_compiled_says_how_to_get_it(value):
    proc = run(value, WITHOUT_COMPILED)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: FLUPFAST_SPEEDUPS=%s requires the compiled backend" % value)
    # Installed without the compiled part: reinstall from source; a checkout: build it there.
    assert "C compiler" in last and "pip install -e ." in last
    assert "circular import" not in last


@pytest.mark.parametrize("value", ["2", "maybe", "compiled"])
def test_unknown_value_names_the_accepted_ones(value):
    proc = run(value)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: FLUPFAST_SPEEDUPS=%r is not one of: auto" % value)
    for accepted in _impl.AUTO_VALUES[:1] + _impl.PURE_VALUES + _impl.COMPILED_VALUES:
        assert accepted in last
