"""Waiting in tests: polling a condition until it holds, within a bound (wait_at_most), and the
usual form, a wait that fails after its bound (wait_until). Every caller passes its own bound
(they differ on purpose: a loaded 2-core CI machine, a process start). Standard library only,
so an app a test server runs may import it as well."""
import inspect
import time


def wait_at_most(predicate, timeout, interval=0.02):
    """Call ``predicate()`` until it returns a true value or ``timeout`` seconds have passed (it
    is asked once more then); return its last value. No verdict: for a caller that goes on
    either way (say, one implementation stops on a signal and the other may never)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def wait_until(predicate, timeout, what=None, interval=0.02):
    """Call ``predicate()`` until it returns a true value, and return that value.

    After ``timeout`` seconds fail with AssertionError naming what was awaited (``what``: a
    string, or a callable giving one, called only then, e.g. to add a process's log; the
    predicate's source by default) and the last value the predicate returned. A predicate may
    raise to stop the wait at once (say, the process it waits on has exited).
    """
    value = wait_at_most(predicate, timeout, interval)
    if value:
        return value
    if callable(what):
        what = what()
    raise AssertionError('timed out after %g s waiting for %s (last value: %.200r)'
                         % (timeout, what or _source(predicate), value))


def _source(predicate):
    """A function's name; a lambda's line(s) of source from the lambda on."""
    name = getattr(predicate, '__qualname__', repr(predicate))
    if not name.endswith('<lambda>'):
        return name
    try:
        text = ' '.join(inspect.getsource(predicate).split())
    except (OSError, TypeError):
        return name
    return text[text.find('lambda'):][:200]
