"""Process titles, as gunicorn and uWSGI set them (``setproctitle``, the ``proctitle`` extra):
``ps`` shows ``flupfast: master [app]`` and, for each prefork child, ``flupfast: worker N [app]
idle`` or ``busy METHOD URI``. Without setproctitle, or turned off, everything here is a no-op.
"""
from flupfast import _impl

try:
    import setproctitle as _setproctitle
except ImportError:  # the optional extra is not installed
    _setproctitle = None
# Its C module, or nothing: without it setproctitle's fallback logs a debug line per call.
_set_title = _setproctitle.setproctitle if getattr(_setproctitle, '_setproctitle', None) \
    else None

__all__ = ['WorkerTitle', 'available', 'become_worker', 'enable', 'enabled']

_app = None  # the app's name while titles are on, else None


def available():
    """Whether setproctitle is installed."""
    return _set_title is not None


def enable(app_name):
    """Turn titles on for this process and its future children: ``flupfast: master [app]``.
    Returns False (and does nothing) without setproctitle."""
    global _app
    if _set_title is None:
        return False
    _app = app_name
    _set_title('flupfast: master [%s]' % app_name)
    return True


def disable():
    global _app
    _app = None


def enabled():
    return _app is not None


def become_worker(number):
    """In a new prefork child: title it ``worker N ... idle``; returns the request observer
    that keeps the title current (WorkerTitle), or None when titles are off."""
    if _app is None:
        return None
    return _impl.WorkerTitle(number, _app, _set_title)


def busy_title(busy, environ):
    """``busy`` + ``METHOD URI``; a NUL (a FastCGI param may carry one; setproctitle refuses
    it, and a title must not fail the request) is left out."""
    title = '%s%s %s' % (busy, environ.get('REQUEST_METHOD', '-'),
                         environ.get('REQUEST_URI') or environ.get('PATH_INFO', ''))
    return title.replace('\0', '')  # the same str back when there is none


class WorkerTitle:
    """A request observer (flupfast.gateway.set_observer) for a process serving one request
    at a time: ``busy METHOD URI`` while it runs, ``idle`` after, through ``set_title``.
    setproctitle writes the title into the process's argv memory (and the 15-byte kernel
    name with one prctl). Compiled twin: _cython/proctitle.pxi, which writes that memory
    itself once setproctitle has shown where it is (no syscall per title)."""

    def __init__(self, number, app_name, set_title):
        prefix = 'flupfast: worker %d [%s] ' % (number, app_name)
        self.busy = prefix + 'busy '
        self.idle = prefix + 'idle'
        self._set_title = set_title
        set_title(self.idle)

    def begin(self, environ):
        self._set_title(busy_title(self.busy, environ))

    def end(self, token, response, failed):
        self._set_title(self.idle)
