"""What Apache's own Python runs (mod_wsgi, mod_fcgid and CGI scripts, as www-data): Debian's
/usr/bin/python3 (3.11, the one libapache2-mod-wsgi-py3 embeds), which cannot read pyenv's
tree under /root. So the bench copies what those servers import into a world-readable
directory under the system temp dir, once per content hash: flupfast (with the compiled module
built in this checkout: same CPython 3.11 ABI), bench/apps.py and bench/flask_app.py, and,
for the Flask app, a venv of Debian's python3 with Flask from PyPI."""
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.base import ROOT

SYSTEM_PYTHON = "/usr/bin/python3"
COPIED = ("flupfast", "bench/__init__.py", "bench/apps.py", "bench/flask_app.py")


def _sources():
    """The files copied, in a stable order (compiled module included, caches not)."""
    for name in COPIED:
        path = ROOT / name
        if path.is_file():
            yield path
            continue
        for sub in sorted(path.rglob("*")):
            if sub.is_file() and "__pycache__" not in sub.parts and \
                    sub.suffix in (".py", ".so", ".pxd", ".typed"):
                yield sub


def tree_key(flask):
    h = hashlib.sha256(b"flask" if flask else b"")
    for path in _sources():
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


class WWWTree:
    """``python``: the interpreter www-data runs (the venv's with Flask, else Debian's);
    ``path``: the directory to put on sys.path (``import flupfast``, ``import bench.apps``);
    ``home``: the venv (mod_wsgi's python-home) or None."""

    def __init__(self, python, path, home):
        self.python, self.path, self.home = str(python), str(path), home and str(home)


def _run(argv, env):
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                          timeout=600, cwd="/")
    if proc.returncode:
        raise RuntimeError("%s: %s" % (" ".join(argv), proc.stdout.decode("utf-8",
                                                                          "replace")[-800:]))


def www_tree(flask=False):
    """Build (once per content hash, under a lock: other runs may share it) and return the
    WWWTree; raises RuntimeError when Debian's python3 is missing or pip fails."""
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        raise RuntimeError("%s is missing (apt-get install python3 python3-venv)"
                           % SYSTEM_PYTHON)
    key = tree_key(flask)
    base = Path(tempfile.gettempdir())
    top = base / ("flupfast-bench-www-%s" % key)
    done = top / ".complete"
    with open(str(base / ("flupfast-bench-www-%s.lock" % key)), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(str(top), ignore_errors=True)
            for src in _sources():
                dest = top / "src" / src.relative_to(ROOT)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(str(src), str(dest))
            if flask:
                env = {k: v for k, v in os.environ.items()
                       if not k.startswith(("PYTHON", "PIP_REQUIRE", "VIRTUAL_ENV"))}
                _run([SYSTEM_PYTHON, "-m", "venv", str(top / "venv")], env)
                _run([str(top / "venv" / "bin" / "python"), "-m", "pip",
                      "--disable-pip-version-check", "-q", "install", "flask"], env)
            _run(["chmod", "-R", "a+rX", str(top)], None)
            done.write_text(key + "\n")
    top.chmod(0o755)
    venv = top / "venv" if flask else None
    return WWWTree(venv / "bin" / "python" if venv else SYSTEM_PYTHON, top / "src", venv)
