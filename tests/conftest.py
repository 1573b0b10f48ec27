"""Shared fixtures: the ``backend`` fixture runs a test on the pure-Python twins and on the
compiled ones (skipped when not built, a failure when FLUPFAST_SPEEDUPS=1 or under CI).
"""
import os
import sys
import threading
import time
import types

import pytest
from hypothesis import HealthCheck, settings

import flupfast
from flupfast import _impl, protocols

# Both backends' twins, from the one list in _impl (TWINS): a twin added there is here too.
PURE = types.SimpleNamespace(name='py', **_impl.backend_twins())


def _compiled():
    try:
        from flupfast import _speedups
    except ImportError as exc:
        return None, str(exc)
    return types.SimpleNamespace(name='cy', **_impl.backend_twins(_speedups)), None


def install_backend(monkeypatch, backend):
    """Make the connections pick ``backend``'s twins through _impl for one test."""
    for name, twin in vars(backend).items():
        if name != 'name':
            monkeypatch.setattr(_impl, name, twin)


COMPILED, COMPILED_ERROR = _compiled()

# Hypothesis profiles, picked by HYPOTHESIS_PROFILE (or, as before, FLUPFAST_FUZZ_PROFILE):
#   'ci' (default): 150 examples per property, random, as every developer's pytest runs them;
#   'derandomize': the same, from a fixed seed: what .ci/run selects, so a CI failure is
#       reproduced by running the same command again (no example database involved);
#   'fuzz': a long random run of FLUPFAST_FUZZ_EXAMPLES examples per property (default
#       20000), run by hand before a release (tests/README.md).
_FUZZ_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
settings.register_profile('ci', max_examples=150, deadline=None,
                          suppress_health_check=_FUZZ_HEALTH)
settings.register_profile('derandomize', max_examples=150, deadline=None, derandomize=True,
                          database=None, print_blob=True, suppress_health_check=_FUZZ_HEALTH)
settings.register_profile('fuzz', deadline=None, suppress_health_check=_FUZZ_HEALTH,
                          max_examples=int(os.environ.get('FLUPFAST_FUZZ_EXAMPLES', 20000)))
settings.load_profile(os.environ.get('HYPOTHESIS_PROFILE')
                      or os.environ.get('FLUPFAST_FUZZ_PROFILE') or 'ci')

# A non-daemon thread a test leaves running keeps the interpreter, and so pytest, from ever
# exiting (pytest-timeout cannot help once the session is over). After each test's teardown,
# the non-daemon threads its call started must have ended (a short grace to finish); a test
# that leaves one fails, and pytest_unconfigure exits hard rather than hang on one.
THREAD_GRACE = 5.0


def _non_daemon_threads():
    return {t for t in threading.enumerate()
            if not t.daemon and t is not threading.main_thread() and t.is_alive()}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    item._flupfast_threads = _non_daemon_threads()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    before = getattr(item, '_flupfast_threads', None)
    if before is not None:
        left = _non_daemon_threads() - before
        deadline = time.monotonic() + THREAD_GRACE
        for thread in left:
            thread.join(max(0.0, deadline - time.monotonic()))
        left = [t for t in left if t.is_alive()]
        if left:
            raise AssertionError('the test left non-daemon threads running: %s'
                                 % ', '.join(sorted(t.name for t in left)))
    return result


def pytest_unconfigure(config):
    stuck = _non_daemon_threads()
    for thread in stuck:
        thread.join(1.0)
    stuck = [t for t in stuck if t.is_alive()]
    if stuck and os.environ.get('FLUPFAST_ALLOW_STUCK_THREADS') != '1':
        sys.stderr.write('\npytest: non-daemon threads still running at exit (%s): exiting '
                         'without waiting for them\n' % ', '.join(t.name for t in stuck))
        sys.stderr.flush()
        os._exit(3)


def compiled_required():
    """FLUPFAST_SPEEDUPS=1 requires the compiled twins, and so does CI unless the run asked
    for the pure backend alone (FLUPFAST_SPEEDUPS=0: the compiler-less sdist install)."""
    speedups = os.environ.get('FLUPFAST_SPEEDUPS', 'auto')
    return speedups in ('1', 'require') or (speedups != '0' and bool(os.environ.get('CI')))


def pytest_report_header(config):
    return 'flupfast backend: %s (compiled twins: %s)' % (
        flupfast.BACKEND, 'built' if COMPILED else 'missing: %s' % COMPILED_ERROR)


@pytest.fixture
def needs_compiled():
    """For tests that compare the twins: skipped without the compiled backend (a failure when
    it is required)."""
    if COMPILED is None:
        if compiled_required():
            pytest.fail('the compiled backend is required but does not import: %s'
                        % COMPILED_ERROR)
        pytest.skip('flupfast._speedups is not built')


# FLUPFAST_TEST_BACKENDS=py runs the backend-parametrised tests on the pure twins only: the
# mutation run's mutants are Python, so the compiled half of those tests cannot kill them.
BACKENDS = os.environ.get('FLUPFAST_TEST_BACKENDS', 'py,cy').split(',')


@pytest.fixture(params=BACKENDS)
def backend(request):
    """The codec and stream classes of one backend."""
    if request.param == 'py':
        return PURE
    if COMPILED is None:
        if compiled_required():
            pytest.fail('the compiled backend is required but does not import: %s'
                        % COMPILED_ERROR)
        pytest.skip('flupfast._speedups is not built')
    return COMPILED


assert protocols  # the package must import without the compiled module
