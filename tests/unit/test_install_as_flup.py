"""flupfast.install_as_flup(): a script written for flup, left untouched, runs on flupfast when
its process calls install_as_flup() first, though the real flup 1.0.3 is installed too; every
flup module name resolves to flupfast's; a process that already imported flup is refused.
Each case runs in its own interpreter (the alias changes sys.modules for good).
"""
import importlib.util
import os
import pkgutil
import subprocess
import sys

import pytest

from tests import fcgi_client
from tests.integration.backend_process import ROOT, wait_connectable

# A vendored flup script, as it was written: nothing in it knows about flupfast.
LEGACY_SCRIPT = '''\
import sys
from flup.server.fcgi import WSGIServer


def app(environ, start_response):
    start_response('200 OK', [('Content-Type', 'text/plain')])
    return [('served by %s' % WSGIServer.__module__).encode()]


if __name__ == '__main__':
    WSGIServer(app, bindAddress=sys.argv[1]).run()
'''

# The wrapper that stays outside the script: install the alias, then run it as __main__.
WRAPPER = ('import runpy, sys, flupfast\n'
           'flupfast.install_as_flup()\n'
           'sys.argv = sys.argv[1:]\n'
           'runpy.run_path(sys.argv[0], run_name="__main__")\n')


def python(code, *args, **kw):
    return subprocess.run([sys.executable, '-c', code] + list(args), cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=60, **kw)


def flup_module_names():
    """Every module of the installed real flup 1.0.3 (the names code may import)."""
    spec = importlib.util.find_spec('flup')
    # The real package is a flup/ folder (the path around it may say flupfast: a temp venv).
    assert spec is not None and os.path.basename(os.path.dirname(spec.origin)) == 'flup', \
        'the real flup must be installed, found %r' % (spec,)
    names = ['flup']
    for package in ('server', 'client'):
        names.append('flup.' + package)
        path = [os.path.join(os.path.dirname(spec.origin), package)]
        names += ['flup.%s.%s' % (package, m.name) for m in pkgutil.iter_modules(path)]
    return names


def test_untouched_flup_script_serves_on_flupfast(tmp_path):
    script = tmp_path / 'legacy.fcgi'
    script.write_text(LEGACY_SCRIPT)
    sock_path = str(tmp_path / 'legacy.sock')
    proc = subprocess.Popen([sys.executable, '-c', WRAPPER, str(script), sock_path], cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=ROOT), stderr=subprocess.PIPE)
    try:
        wait_connectable(sock_path, proc)
        resp = fcgi_client.roundtrip(sock_path, '/')
    finally:
        proc.terminate()
        proc.wait(15)
        log = proc.stderr.read().decode()
        proc.stderr.close()
    assert resp.status == 200, log
    assert resp.body == b'served by flupfast.server.fcgi'


def test_every_flup_module_name_is_flupfasts():
    names = flup_module_names()
    assert {'flup.server.fcgi', 'flup.server.cgi', 'flup.server.paste_factory',
            'flup.client.fcgi_app', 'flup.client.scgi_app'} <= set(names)
    code = ('import importlib, sys, flupfast\n'
            'flupfast.install_as_flup()\n'
            'flupfast.install_as_flup()  # twice is harmless\n'
            'for name in sys.argv[1:]:\n'
            '    module = importlib.import_module(name)\n'
            '    target = importlib.import_module("flupfast" + name[len("flup"):])\n'
            '    assert module is target, (name, module)\n'
            '    assert module.__spec__.name == target.__name__, module.__spec__\n'
            'from flup.server.scgi import WSGIServer\n'
            'import flup.server.ajp_fork as ajp_fork, flupfast.server.ajp_fork\n'
            'assert ajp_fork is flupfast.server.ajp_fork\n'
            'real = [m for m in sys.modules if m.split(".")[0] == "flup"\n'
            '        and not sys.modules[m].__name__.startswith("flupfast")]\n'
            'assert not real, real\n'
            'importlib.reload(sys.modules["flup.server.fcgi"])\n'
            'print("ok", len(sys.argv) - 1)\n')
    proc = python(code, *names)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().split() == ['ok', str(len(names))]


def test_names_flup_lacks_stay_missing():
    proc = python('import flupfast; flupfast.install_as_flup()\n'
                  'import flup.server.no_such_module\n')
    assert proc.returncode == 1
    assert "ModuleNotFoundError: No module named 'flup.server.no_such_module'" in \
        proc.stderr.decode()


@pytest.mark.parametrize('first', ['import flup', 'from flup.server.fcgi import WSGIServer'])
def test_refuses_when_real_flup_is_already_imported(first):
    proc = python(first + '\nimport flupfast\nflupfast.install_as_flup()\n')
    err = proc.stderr.decode()
    assert proc.returncode == 1
    assert 'flupfast.FlupAlreadyImported: install_as_flup(): the real flup is already ' \
        'imported' in err
    assert 'call flupfast.install_as_flup() before anything imports flup' in err


def test_import_of_flupfast_stays_light():
    """install_as_flup is importable from the package without loading the servers."""
    proc = python('import sys, flupfast\n'
                  'assert callable(flupfast.install_as_flup)\n'
                  'print(sorted(m for m in sys.modules if m.startswith("flupfast")))\n')
    assert proc.returncode == 0, proc.stderr.decode()
    loaded = proc.stdout.decode()
    assert 'flupfast.server' not in loaded and 'flupfast._flup_alias' not in loaded
