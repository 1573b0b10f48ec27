"""A prefork child's job factory (ChildJobs, both twins) builds a connection exactly as calling
its class does: the compiled twin builds a stock LoggedConnection class (SCGI's, uwsgi's)
without its two Python ``__init__`` frames, and calls anything else (AJP's has an __init__)."""
import logging
import socket

import pytest

from flupfast.connection import Connection, LoggedConnection
from flupfast.connection_state import STATE_FIELDS
from flupfast.scgi_connection import SCGIConnection
from flupfast.serving.prefork import ChildDrain
from flupfast.uwsgi_connection import UWSGIConnection


class _Server:
    pass


def _state(conn):
    """What construction set, comparable across two connections on one socket pair: the
    state's fields (in C with the compiled ConnectionState), then the instance's dict."""
    state = {name: getattr(conn, name) for name in STATE_FIELDS if hasattr(conn, name)}
    state.update(vars(conn))
    return state


@pytest.fixture
def pair():
    ours, theirs = socket.socketpair()
    with ours, theirs:
        yield ours, theirs


@pytest.mark.parametrize('cls', [SCGIConnection, UWSGIConnection])
@pytest.mark.parametrize('timeout', [None, 2.5])
def test_a_stock_connection_is_the_one_its_class_builds(backend, pair, cls, timeout):
    server, drain = _Server(), ChildDrain()
    built = backend.ChildJobs(cls, drain)(pair[1], 'peer', server, timeout)
    called = cls(pair[1], 'peer', server, timeout)
    assert type(built) is cls
    assert _state(built) == _state(called) | {'may_keep': drain.may_keep}
    assert built.logger is logging.getLogger(cls.logger_name)
    # The same order, where the attributes are in the dict (the pure ConnectionState)
    assert list(vars(built)) == [name for name in list(vars(called)) + ['may_keep']
                                 if name in vars(built)]
    assert drain.job is built and drain.client is pair[1]


class _OwnInit(SCGIConnection):
    def __init__(self, sock, addr, server, timeout=None):
        super().__init__(sock, addr, server, timeout)
        self.mine = 'own init'


class _Mixin(Connection):
    def __init__(self, *args, **kwargs):
        self.mine = 'mixin'
        super().__init__(*args, **kwargs)


class _MixedIn(LoggedConnection, _Mixin):
    """A class between LoggedConnection and Connection in the MRO: super() reaches it."""


class _OwnNew(SCGIConnection):
    def __new__(cls, *args):
        conn = super().__new__(cls)
        conn.mine = 'own new'
        return conn


class _Meta(type):
    def __call__(cls, *args):
        conn = super().__call__(*args)
        conn.mine = 'metaclass'
        return conn


class _WithMeta(SCGIConnection, metaclass=_Meta):
    pass


class _NamedLogger(SCGIConnection):
    logger_name = 'flupfast-test-named'


@pytest.mark.parametrize('cls, mine', [
    (_OwnInit, 'own init'), (_MixedIn, 'mixin'), (_OwnNew, 'own new'),
    (_WithMeta, 'metaclass')])
def test_a_class_that_builds_otherwise_is_called(backend, pair, cls, mine):
    if cls is _MixedIn:
        assert _MixedIn.__mro__[1:4] == (LoggedConnection, _Mixin, Connection)
    conn = backend.ChildJobs(cls, ChildDrain())(pair[1], 'peer', _Server(), None)
    assert type(conn) is cls and conn.mine == mine and conn._sock is pair[1]


class _NoInit:
    __init__ = None


class _InitNone(_NoInit, SCGIConnection):
    """An ``__init__`` of None in the MRO: calling the class fails, so must building it."""


def test_an_init_of_none_fails_as_the_call_does(backend, pair):
    with pytest.raises(TypeError):
        backend.ChildJobs(_InitNone, ChildDrain())(pair[1], 'peer', _Server(), None)


def test_what_the_inits_look_up_is_looked_up_at_each_build(backend, pair, monkeypatch):
    """connection._loggers and logging.getLogger, patched after import, apply to the
    compiled build as to the call."""
    from flupfast import connection

    made, get_logger = [], logging.getLogger

    def getLogger(name=None):
        made.append(name)
        return get_logger(name)
    monkeypatch.setattr(connection, '_loggers', {})
    monkeypatch.setattr(logging, 'getLogger', getLogger)
    conn = backend.new_job(SCGIConnection, pair[1], 'peer', (_Server(), None))
    name = SCGIConnection.logger_name
    assert conn.logger is get_logger(name) and made.count(name) == 1
    assert connection._loggers == {name: conn.logger}


def test_a_class_attribute_names_the_logger(backend, pair):
    conn = backend.ChildJobs(_NamedLogger, ChildDrain())(pair[1], 'peer', _Server())
    assert conn.logger is logging.getLogger('flupfast-test-named')


def test_an_init_patched_in_later_is_called(backend, pair):
    """The compiled twin keeps what it worked out per class only while the class is
    unchanged (its version tag)."""
    class Patched(SCGIConnection):
        pass

    jobs = backend.ChildJobs(Patched, ChildDrain())
    assert not hasattr(jobs(pair[1], 'peer', _Server(), None), 'mine')

    def __init__(self, *args):
        SCGIConnection.__init__(self, *args)
        self.mine = 'patched'
    Patched.__init__ = __init__
    assert jobs(pair[1], 'peer', _Server(), None).mine == 'patched'
    del Patched.__init__
    assert not hasattr(jobs(pair[1], 'peer', _Server(), None), 'mine')


def test_other_arguments_are_passed_on(backend, pair):
    """A third argument (logger_name) or a factory that is not a class: called as given."""
    conn = backend.ChildJobs(SCGIConnection, ChildDrain())(
        pair[1], 'peer', _Server(), None, 'flupfast-test-given')
    assert conn.logger is logging.getLogger('flupfast-test-given')
    seen = []
    backend.ChildJobs(lambda *args: seen.append(args) or _OwnInit(*args), ChildDrain())(
        pair[1], 'peer', 'server', 1.0)
    assert seen == [(pair[1], 'peer', 'server', 1.0)]


def test_the_compiled_twin_runs_no_init_frame(backend, pair):
    """What the compiled twin is for: no Python frame while it builds a stock connection (the
    pure twin's __init__ pair shows what the profile would see)."""
    import sys
    frames = []

    def profile(frame, event, arg):
        if event == 'call':
            frames.append(frame.f_code.co_name)
    jobs = backend.ChildJobs(SCGIConnection, ChildDrain())
    sys.setprofile(profile)
    try:
        jobs(pair[1], 'peer', _Server(), None)
    finally:
        sys.setprofile(None)
    inits = frames.count('__init__')
    assert inits == (2 if backend.name == 'py' else 0), frames


@pytest.mark.parametrize('args', [('server', None), ['server', 1.5]], ids=['tuple', 'list'])
def test_the_modes_build_jobs_through_new_job(backend, pair, args):
    """Thread and single mode build each job through ``new_job`` (the same twin as the child's
    factory): the stock class built as its call builds it, any other called with the args."""
    server = _Server()
    args = type(args)([server] + list(args[1:]))
    built = backend.new_job(UWSGIConnection, pair[1], 'peer', args)
    assert _state(built) == _state(UWSGIConnection(pair[1], 'peer', *args))
    seen = []
    backend.new_job(lambda *given: seen.append(given), pair[1], 'peer', args)
    assert seen == [(pair[1], 'peer') + tuple(args)]
