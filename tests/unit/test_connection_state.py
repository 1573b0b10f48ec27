"""ConnectionState, both twins (flupfast/connection_state.py, _cython/state.pxi): the base of
every connection, whose attributes the request path reads and writes at every request. The
compiled twin keeps them in C fields; what Python sees of them (defaults, reads, writes) is
the same on both."""
import pytest

from flupfast.connection_state import FASTCGI_STATE_FIELDS, STATE_FIELDS
from flupfast.serving.job import Job, keep, wait

DEFAULTS = {'closed': False, '_body': None, 'idle': False, 'parked': False, 'served': 0,
            'on_idle': wait, 'may_keep': keep, 'max_requests': None}


@pytest.fixture
def state_class(backend):
    class State(backend.ConnectionState, Job):
        """As connection.Connection derives: the state before the job contract's defaults."""
    return State


def test_the_defaults_are_the_job_contracts(state_class):
    state = state_class()
    assert {name: getattr(state, name) for name in DEFAULTS} == DEFAULTS
    assert state.on_idle(state, False) == 'wait' and state.may_keep(state) is True


def test_every_field_reads_back_what_was_written(state_class):
    state = state_class()
    for name in STATE_FIELDS:
        value = object()
        setattr(state, name, value)
        assert getattr(state, name) is value
    state.served = 0
    state.served += 1  # what the pure paths do with a counter
    assert state.served == 1
    state.extra = 'any other attribute'
    assert state.extra == 'any other attribute' and 'extra' in vars(state)


def test_the_compiled_fields_are_the_pure_twins_names(backend):
    """The fields the compiled twin declares are STATE_FIELDS (which the hiding check and the
    pure twin's docs name), and they live outside the instance's dict."""
    if backend.name == 'py':
        pytest.skip('the pure twin keeps them in the dict')
    fields = {name for name, value in vars(backend.ConnectionState).items()
              if type(value).__name__ == 'getset_descriptor'}
    assert fields == set(STATE_FIELDS)

    class State(backend.ConnectionState):
        pass
    state = State()
    state.served = 3
    assert vars(state) == {}


def test_a_default_after_the_state_in_the_mro_is_hidden_on_both(backend):
    """A mixin after ConnectionState (as Job is) sets no default: the state's own stand, on
    both twins (the compiled one's fields, the pure one's class attributes)."""
    class Mixin:
        served = 7
        max_requests = 5

    class State(backend.ConnectionState, Job, Mixin):
        pass
    state = State()
    assert (state.served, state.max_requests) == (0, None)


def test_a_copy_has_the_same_state(backend):
    import copy

    class State(backend.ConnectionState, Job):
        pass
    state = State()
    state.served, state._body, state.extra = 3, 'body', 'in the dict'
    copied = copy.copy(state)
    assert type(copied) is State and copied is not state
    assert {name: getattr(copied, name) for name in STATE_FIELDS if hasattr(state, name)} == \
        {name: getattr(state, name) for name in STATE_FIELDS if hasattr(state, name)}
    assert copied.extra == 'in the dict'


def test_the_fastcgi_fields_are_the_pure_twins_names(backend):
    """FastCGIState declares FASTCGI_STATE_FIELDS on top of ConnectionState's; a FastCGI
    connection keeps them outside its dict, and reads back what was written."""
    from flupfast import _impl
    from flupfast.fastcgi_connection import FastCGIConnection
    if backend.name == 'cy':
        fields = {name for name, value in vars(backend.FastCGIState).items()
                  if type(value).__name__ == 'getset_descriptor'}
        assert fields == set(FASTCGI_STATE_FIELDS)
    state = type('State', (backend.FastCGIState, Job), {})()
    for name in FASTCGI_STATE_FIELDS + STATE_FIELDS:
        value = object()
        setattr(state, name, value)
        assert getattr(state, name) is value
    assert vars(state) == ({} if backend.name == 'cy' else {
        name: getattr(state, name) for name in FASTCGI_STATE_FIELDS + STATE_FIELDS})
    assert issubclass(FastCGIConnection, _impl.FastCGIState)


def test_a_fastcgi_state_copy_has_the_same_state(backend):
    import copy
    state = type('State', (backend.FastCGIState, Job), {})()
    state.served, state.max_content, state._requests = 3, 8192, {1: 'request'}
    copied = copy.copy(state)
    assert (copied.served, copied.max_content, copied._requests) == (3, 8192, {1: 'request'})
    assert copied._requests is state._requests
