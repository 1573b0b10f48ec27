"""What is installed and what is missing before a run: flup, flupfast and its compiled
backend, the peers (uWSGI), the fronts (nginx, Apache), the drivers (cc for fcgi_load, wrk,
ab, valgrind, strace), matplotlib, and the machine. It says what is missing; it installs
nothing."""
import contextlib
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

from bench.base import ROOT
from bench.drivers.ab import AB
from bench.drivers.wrk import WRK
from bench.fronts.apache import APACHE, APACHE_MODULES
from bench.fronts.nginx import NGINX
from bench.servers.uwsgi import find_uwsgi
from bench.servers.wwwdata import SYSTEM_PYTHON


def survey():
    """What is installed, what is missing, and the machine."""
    return _switch_peers(_peers(_python_and_machine()))


def _run_py(code, env_extra):
    env = dict(os.environ, PYTHONPATH=str(ROOT), **env_extra)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env,
                             cwd=str(ROOT), timeout=60)
    except subprocess.TimeoutExpired:
        return False, "timed out"
    text = (out.stdout or out.stderr).decode("utf-8", "replace").strip()
    return out.returncode == 0, text


def _python_and_machine():
    """flup, flupfast (both backends), Cython, cc, strace, git, and the machine."""
    info = {"missing": [], "notes": []}
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    loadavg = ""
    with contextlib.suppress(OSError), open("/proc/loadavg") as f:
        loadavg = " ".join(f.read().split()[:3])
    info["machine"] = {
        "nproc": len(os.sched_getaffinity(0)), "cpu": cpu, "kernel": platform.release(),
        "python": platform.python_version(), "loadavg_at_start": loadavg,
    }
    try:
        import importlib.metadata as md
        info["flup"] = md.version("flup")
        import flup.server.fcgi  # noqa: F401
    except Exception as exc:  # any failure means: no flup to compare with
        info["flup"] = None
        info["missing"].append("flup 1.0.3 (pip install flup==1.0.3): %s" % exc)
    if info.get("flup") and info["flup"] != "1.0.3":
        info["notes"].append("flup %s is installed, not 1.0.3" % info["flup"])
    ok, text = _run_py("import flupfast; print(flupfast.__version__, flupfast.BACKEND)",
                       {"FLUPFAST_SPEEDUPS": "0"})
    info["flupfast"] = text.split()[0] if ok else None
    if not ok:
        info["missing"].append("flupfast does not import from %s: %s" % (ROOT, text[-300:]))
    ok, text = _run_py("import flupfast, flupfast._speedups as s; print(flupfast.BACKEND, "
                       "s.__file__)", {"FLUPFAST_SPEEDUPS": "1"})
    info["compiled"] = ok and text.startswith("cython")
    if info["compiled"]:
        so = Path(text.split(None, 1)[1])
        sources = [p for p in [ROOT / "flupfast" / "_speedups.pyx",
                               *(ROOT / "flupfast" / "_cython").glob("*.pxi")] if p.exists()]
        if sources and max(p.stat().st_mtime for p in sources) > so.stat().st_mtime:
            info["notes"].append("the compiled module %s is older than its .pyx/.pxi sources: "
                                 "rebuild with `pip install -e . --no-build-isolation`"
                                 % so.name)
        info["compiled_module"] = str(so.relative_to(ROOT)) if ROOT in so.parents else str(so)
    else:
        info["missing"].append(
            "the compiled backend (flupfast._speedups does not import: %s); build it with "
            "`pip install -e %s --no-build-isolation`" % (text.splitlines()[-1][:200] if text
                                                          else "?", ROOT))
    with contextlib.suppress(Exception):
        import Cython
        info["cython"] = Cython.__version__
    info["cc"] = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not info["cc"]:
        info["missing"].append("a C compiler (cc) for bench/fcgi_load.c")
    info["strace"] = shutil.which("strace")
    if not info["strace"]:
        info["missing"].append("strace (apt-get install strace): no syscall counts")
    with contextlib.suppress(Exception):
        info["git"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                     capture_output=True, timeout=10).stdout.decode().strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "flupfast"],
                               capture_output=True, timeout=10).stdout.decode().strip()
        if dirty:
            info["git"] += " (flupfast/ has uncommitted changes)"
    return info


def _peers(info):
    """Add uWSGI, the fronts, wrk/ab, matplotlib and valgrind to ``info``: what is there, what
    is missing."""
    uwsgi = find_uwsgi()
    info["uwsgi"] = None
    if uwsgi:
        with contextlib.suppress(Exception):
            out = subprocess.run([uwsgi, "--version"], capture_output=True, timeout=20)
            info["uwsgi"] = out.stdout.decode().strip() or None
            info["uwsgi_path"] = uwsgi
    if not info["uwsgi"]:
        info["missing"].append("uWSGI (pip install uwsgi: builds from source, needs gcc and "
                               "the Python headers): no uWSGI columns")
    for key, path, what in (("nginx", NGINX, "nginx (apt-get install nginx): no FastCGI/"
                                              "SCGI rows behind nginx"),
                            ("apache2", APACHE, "apache2 (apt-get install "
                                                          "apache2): no AJP13 rows behind "
                                                          "Apache")):
        info[key] = path if os.access(path, os.X_OK) else None
        if not info[key]:
            info["missing"].append(what)
    if info["nginx"]:
        with contextlib.suppress(Exception):
            out = subprocess.run([NGINX, "-v"], capture_output=True, timeout=10)
            info["nginx_version"] = out.stderr.decode().strip().split("/")[-1]
    if info["apache2"]:
        with contextlib.suppress(Exception):
            out = subprocess.run([APACHE, "-v"], capture_output=True, timeout=10)
            m = re.search(r"Apache/([\d.]+)", out.stdout.decode())
            info["apache2_version"] = m.group(1) if m else None
    info["wrk"] = WRK
    info["ab"] = AB
    if not WRK:
        info["missing"].append("wrk (apt-get install wrk)%s" % (
            ": using ab -k instead" if AB else ", and ab (apache2-utils): no rows behind "
                                               "fronts"))
    try:
        import matplotlib
        info["matplotlib"] = matplotlib.__version__
    except Exception as exc:  # any failure: no chart
        info["matplotlib"] = None
        info["missing"].append("matplotlib (pip install -e '.[bench]'): no chart (%s)"
                               % type(exc).__name__)
    info["valgrind"] = shutil.which("valgrind")
    if not info["valgrind"]:
        info["missing"].append("valgrind (apt-get install valgrind): no instruction counts")
    if os.geteuid() != 0 and (info["nginx"] or info["apache2"]):
        info["missing"].append("root: nginx and Apache are started as root (they switch "
                               "their workers' user); no rows behind fronts")
        info["nginx"] = info["apache2"] = None
    return info


def _switch_peers(info):
    """The peers part's servers: gunicorn and Flask (PyPI), mod_wsgi, mod_fcgid and mod_cgid (Apache
    modules), and Debian's python3 that Apache's own Python runs as www-data."""
    import importlib.metadata as md
    for key, dist, what in (("gunicorn", "gunicorn", "no gunicorn rows"),
                            ("flask", "flask", "no Flask app rows")):
        try:
            info[key] = md.version(dist)
        except md.PackageNotFoundError:
            info[key] = None
            info["missing"].append("%s (pip install -e '.[bench]'): %s" % (dist, what))
    system = os.access(SYSTEM_PYTHON, os.X_OK)
    for key, module, package in (("mod_wsgi", "wsgi", "libapache2-mod-wsgi-py3"),
                                 ("mod_fcgid", "fcgid", "libapache2-mod-fcgid"),
                                 ("mod_cgid", "cgid", "apache2")):
        path = os.path.join(APACHE_MODULES, "mod_%s.so" % module)
        info[key] = path if os.path.exists(path) and info.get("apache2") and system else None
        if not info[key]:
            info["missing"].append("%s (apt-get install %s; and %s): no %s rows" % (
                key, package, SYSTEM_PYTHON, key))
    return info
