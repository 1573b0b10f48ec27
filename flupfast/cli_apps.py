"""The apps the command line serves: the built-in demo, one named ``module:callable``, and a
reload's check, in a fresh interpreter, that the code on disk loads. A failure is a
StartError: one line, no traceback.
"""
import html
import importlib
import logging
import subprocess
import sys
import traceback

import flupfast
from flupfast.limits import RELOAD_CHECK_TIMEOUT

__all__ = ['StartError', 'app_load_problem', 'check_app', 'demo_app', 'load_app']


class StartError(Exception):
    """The server cannot start as asked: one line, exit status 1."""




def demo_app(environ, start_response):
    """The demo: a hello page at /, and the WSGI environ at /environ."""
    path = environ.get('PATH_INFO', '')
    if path.rstrip('/').endswith('/environ'):
        rows = ''.join('<tr><th>%s</th><td><code>%s</code></td></tr>\n'
                       % (html.escape(key), html.escape(repr(value)))
                       for key, value in sorted(environ.items()))
        body = ('<!DOCTYPE html>\n<html><head><title>flupfast environ</title></head><body>\n'
                '<h1>WSGI environ</h1>\n<table>\n%s</table>\n</body></html>\n' % rows)
    else:
        body = ('<!DOCTYPE html>\n<html><head><title>flupfast</title></head><body>\n'
                '<h1>Hello from flupfast %s</h1>\n<p>Backend: %s. Python %s. '
                '<a href="%s/environ">See the environ</a>.</p>\n</body></html>\n'
                % (flupfast.__version__, flupfast.BACKEND, sys.version.split()[0],
                   html.escape(environ.get('SCRIPT_NAME', '').rstrip('/'))))
    data = body.encode('utf-8')
    start_response('200 OK', [('Content-Type', 'text/html; charset=utf-8')])
    return [data]


def load_app(spec):
    """``package.module:callable`` (``:application`` when the callable is left out).

    A module that does not import is a StartError naming where it failed; the full traceback
    is logged at DEBUG (``--log-level debug``).
    """
    module_name, _, attr = spec.partition(':')
    try:
        app = importlib.import_module(module_name)
    except SyntaxError as exc:
        logging.getLogger('flupfast').debug('importing %s', module_name, exc_info=True)
        raise StartError('cannot import %r: %s at %s line %s'
                         % (module_name, exc.msg, exc.filename, exc.lineno)) from None
    except ModuleNotFoundError as exc:
        if exc.name is not None and not _names_or_holds(exc.name, module_name):
            # The app's module was found: one of its own imports is missing.
            logging.getLogger('flupfast').debug('importing %s', module_name, exc_info=True)
            where = traceback.extract_tb(exc.__traceback__)[-1]
            raise StartError('cannot import %r: it imports %r, which is not installed for %s '
                             '(at %s line %s)' % (module_name, exc.name, sys.executable,
                                                  where.filename, where.lineno)) from None
        raise StartError('cannot import %r: %s (is it on sys.path? run from its directory or '
                         'set PYTHONPATH)' % (module_name, exc)) from None
    except Exception as exc:
        logging.getLogger('flupfast').debug('importing %s', module_name, exc_info=True)
        where = traceback.extract_tb(exc.__traceback__)[-1]
        raise StartError('cannot import %r: %s: %s (at %s line %s; --log-level debug shows '
                         'the traceback)' % (module_name, type(exc).__name__, exc,
                                             where.filename, where.lineno)) from None
    for part in (attr or 'application').split('.'):
        try:
            app = getattr(app, part)
        except AttributeError:
            raise StartError('%r has no attribute %r (give the app as module:callable)'
                             % (module_name, part)) from None
    if not callable(app):
        raise StartError('%s is not callable' % spec)
    return app




def _names_or_holds(missing, module_name):
    """Whether the module not found is ``module_name`` or a package it is in."""
    return module_name == missing or module_name.startswith(missing + '.')


def app_load_problem(spec):
    """None when the app ``spec`` imports in a fresh interpreter (the code a reload would
    run), else the one-line reason, as the command line would print it."""
    if not spec:
        return None
    try:
        proc = subprocess.run([sys.executable, '-c', 'import sys; from flupfast.cli_apps import '
                               'check_app; sys.exit(check_app(sys.argv[1]))', spec],
                              capture_output=True, text=True, timeout=RELOAD_CHECK_TIMEOUT)
    except subprocess.TimeoutExpired:
        return 'importing it took more than %g s' % RELOAD_CHECK_TIMEOUT
    except OSError as exc:
        return 'cannot run %s to check it: %s' % (sys.executable, exc.strerror or exc)
    if proc.returncode == 0:
        return None
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else 'exit status %d' % proc.returncode


def check_app(spec):
    """The reload check's child: load the app as serving would; 0 or one line and 1."""
    try:
        load_app(spec)
    except StartError as exc:
        print('flupfast: %s' % exc, file=sys.stderr)
        return 1
    return 0
