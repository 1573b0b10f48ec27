"""Shared fixtures: the ``backend`` fixture runs a test on the pure-Python twins and on the
compiled ones (skipped when not built, a failure when FLUPFAST_SPEEDUPS=1 or under CI).
"""
import os
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

# Hypothesis profiles of the fuzz properties (tests/reliability/test_fuzz_*.py), picked by
# FLUPFAST_FUZZ_PROFILE: 'ci' (default) is the short run of every pytest, 'fuzz' a long one
# of FLUPFAST_FUZZ_EXAMPLES examples per property (default 20000).
_FUZZ_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]
settings.register_profile('ci', max_examples=150, deadline=None,
                          suppress_health_check=_FUZZ_HEALTH)
settings.register_profile('fuzz', deadline=None, suppress_health_check=_FUZZ_HEALTH,
                          max_examples=int(os.environ.get('FLUPFAST_FUZZ_EXAMPLES', 20000)))


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


@pytest.fixture(params=['py', 'cy'])
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
