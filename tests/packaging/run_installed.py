"""Run the test suite against the *installed* flupfast, from outside the source tree.

    python tests/packaging/run_installed.py {0|1|auto} [pytest arguments...]

Run from a checkout, pytest would put the checkout first on sys.path and test its flupfast/
instead of the installed one (whose compiled part the checkout may lack). So this copies
tests/, compat/, pyproject.toml (the pytest settings), README.md and docs/ into a temporary
directory, checks that flupfast now imports from site-packages, and runs ``python -m pytest``
there with
FLUPFAST_SPEEDUPS set to the first argument: with ``1``, a wheel without its compiled part
cannot pass. cibuildwheel's test-command and tox use it; the default selection is the unit
tests (the peer tests need nginx and Apache, which build images do not have).
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The tests, their settings, and the documents some tests check against the code (README.md,
# docs/: the security page's caps table, the recipes, the house rules on citations).
COPIED = ("tests", "compat", "pyproject.toml", "README.md", "docs")
DEFAULT_SELECTION = ["tests/unit", "tests/packaging", "compat"]
USAGE = "usage: python tests/packaging/run_installed.py {0|1|auto} [pytest arguments...]"


def main(argv):
    if not argv or argv[0] not in ("0", "1", "auto"):
        sys.exit(USAGE)
    speedups, pytest_args = argv[0], argv[1:] or DEFAULT_SELECTION
    with tempfile.TemporaryDirectory(prefix="flupfast-installed-") as work:
        for name in COPIED:
            src = os.path.join(ROOT, name)
            if os.path.isdir(src):
                shutil.copytree(src, os.path.join(work, name),
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(src, work)
        env = dict(os.environ, FLUPFAST_SPEEDUPS=speedups)
        env.pop("PYTHONPATH", None)
        where = subprocess.run(
            [sys.executable, "-c", "import flupfast; print(flupfast.__file__, flupfast.BACKEND)"],
            cwd=work, env=env, capture_output=True, text=True)
        if where.returncode != 0:
            sys.stderr.write(where.stderr)
            return where.returncode
        path, backend = where.stdout.split()
        print("run_installed.py: testing %s (backend %s, FLUPFAST_SPEEDUPS=%s)"
              % (path, backend, speedups), flush=True)
        if path.startswith(os.path.join(ROOT, "flupfast") + os.sep):
            sys.exit("run_installed.py: flupfast imports from the source tree %s, not from an "
                     "installed copy" % ROOT)
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"] + pytest_args
        return subprocess.call(cmd, cwd=work, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
