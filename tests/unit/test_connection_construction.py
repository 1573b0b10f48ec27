"""A prefork child's job factory (ChildJobs, both twins) builds a connection exactly as calling
its class does: the compiled twin builds a stock LoggedConnection class (SCGI's, uwsgi's)
without its two Python ``__init__`` frames, and calls anything else (AJP's has an __init__)."""
import logging
import socket

import pytest

from flupfast.connection import Connection, LoggedConnection
from flupfast.connection_state import FASTCGI_STATE_FIELDS, STATE_FIELDS
from flupfast.scgi_connection import SCGIConnection
from flupfast.serving.prefork import ChildDrain
from flupfast.uwsgi_connection import UWSGIConnection


class _Server:
    pass


def _state(conn):
    """What construction set, comparable across two connections on one socket pair: the
    state's fields (in C with the compiled ConnectionState and FastCGIState), then the
    instance's dict."""
    state = {name: getattr(conn, name) for name in STATE_FIELDS + FASTCGI_STATE_FIELDS
             if hasattr(conn, name)}
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


class _FcgiServer:
    """What FastCGIConnection reads of a server built outside run(): its config."""

    def __init__(self, multiplexed=False):
        from flupfast.fastcgi_connection import FastCGIConfig
        self.config = FastCGIConfig(multiplexed)

    def _connectionConfig(self):
        return self.config


def _fcgi_state(conn):
    """_state, with what is built new per connection by its type (compared apart)."""
    state = _state(conn)
    made = {name: type(state.pop(name)) for name in
            ('_parser', '_events', '_requests', '_request_threads', '_send_lock', '_out')
            if name in state}
    return state, made


@pytest.mark.parametrize('cls_name', ['Connection', 'MultiplexedConnection'])
@pytest.mark.parametrize('given', [True, False], ids=['config', 'no-config'])
def test_a_stock_fastcgi_connection_is_the_one_its_class_builds(backend, pair, cls_name,
                                                                given):
    """fcgi_base's two connection classes (multiplexed fixed on the class), with the config
    the server's run() passes, or none (built outside run(): the server's is asked)."""
    from flupfast.server import fcgi_base
    cls = getattr(fcgi_base, cls_name)
    server, drain = _FcgiServer(multiplexed=not given), ChildDrain()
    args = (server, 2.5, server.config if given else None)
    built = backend.ChildJobs(cls, drain)(pair[1], 'peer', *args)
    called = cls(pair[1], 'peer', *args)
    assert type(built) is cls
    built_state, built_made = _fcgi_state(built)
    called_state, called_made = _fcgi_state(called)
    assert built_state == called_state | {'may_keep': drain.may_keep}
    assert built_made == called_made
    assert ('_send_lock' in built_made) is (cls_name == 'MultiplexedConnection')
    assert built._parser is not called._parser and built._events is not called._events
    caps = [(p.max_params_bytes, p.max_params_pairs, p.pending) for p in (built, called)
            for p in [p._parser]]
    assert caps[0] == caps[1] and caps[0][2] == 0
    assert list(vars(built)) == [name for name in list(vars(called)) + ['may_keep']
                                 if name in vars(built)]


def test_a_fastcgi_connection_whose_multiplexed_the_config_decides(backend, pair):
    """FastCGIConnection itself (multiplexed None on the class) takes the config's, and sets
    it on the instance, as its __init__ does."""
    from flupfast.fastcgi_connection import FastCGIConnection
    for multiplexed in (False, True):
        server = _FcgiServer(multiplexed)
        built = backend.new_job(FastCGIConnection, pair[1], 'peer', (server, None, None))
        assert vars(built)['multiplexed'] is multiplexed
        assert built.can_park is not multiplexed
        assert _fcgi_state(built) == _fcgi_state(
            FastCGIConnection(pair[1], 'peer', server, None, None))


def test_what_the_fastcgi_init_looks_up_is_looked_up_at_each_build(backend, pair,
                                                                   monkeypatch):
    """The parser class (through _impl), collections.deque and threading.Lock, patched after
    import, apply to the compiled build as to the call."""
    from flupfast import _impl, fastcgi_connection
    from flupfast.server import fcgi_base

    class Parser:
        pass

    class Deque(list):
        pass

    class Lock:
        pass
    monkeypatch.setattr(_impl, 'FastCGIParser', Parser)
    monkeypatch.setattr(fastcgi_connection.collections, 'deque', Deque)
    monkeypatch.setattr(fastcgi_connection.threading, 'Lock', Lock)
    conn = backend.new_job(fcgi_base.MultiplexedConnection, pair[1], 'peer',
                           (_FcgiServer(), None, None))
    assert (type(conn._parser), type(conn._events), type(conn._send_lock)) == (
        Parser, Deque, Lock)


def test_an_fastcgi_init_of_ones_own_is_called(backend, pair):
    from flupfast.server import fcgi_base

    class Own(fcgi_base.Connection):
        def __init__(self, *args):
            super().__init__(*args)
            self.mine = 'own init'
    conn = backend.ChildJobs(Own, ChildDrain())(pair[1], 'peer', _FcgiServer(), None, None)
    assert conn.mine == 'own init' and conn.server is not None


def test_the_compiled_twin_builds_a_fastcgi_connection_without_a_frame(backend, pair):
    import sys
    from flupfast.server import fcgi_base
    frames = []

    def profile(frame, event, arg):
        if event == 'call' and frame.f_code.co_name == '__init__':
            frames.append(frame.f_code.co_filename.rsplit('/', 1)[-1])
    server = _FcgiServer()
    jobs = backend.ChildJobs(fcgi_base.Connection, ChildDrain())
    sys.setprofile(profile)
    try:
        jobs(pair[1], 'peer', server, None, server.config)
    finally:
        sys.setprofile(None)
    inits = [name for name in frames if name in ('connection.py', 'fastcgi_connection.py')]
    assert len(inits) == (2 if backend.name == 'py' else 0), frames


def test_a_class_hiding_a_field_is_built_by_calling_it(backend, pair):
    """A class attribute named like a ConnectionState field (the logger here) hides the
    field from Python: the build must be the class's own, whose writes Python reads back
    (the instance's dict), and the factory's may_keep too."""
    from flupfast.serving.job import keep

    class Hiding(SCGIConnection):
        logger = logging.getLogger('flupfast-test-hiding')
        may_keep = staticmethod(keep)
    drain = ChildDrain()
    built = backend.ChildJobs(Hiding, drain)(pair[1], 'peer', _Server(), None)
    assert built.logger is logging.getLogger(SCGIConnection.logger_name)
    assert built.may_keep == drain.may_keep


def test_an_attribute_access_hook_sees_every_write(backend, pair):
    """A class that overrides __setattr__ sees the build's writes, as its call shows them."""
    class Watched(SCGIConnection):
        def __setattr__(self, name, value):
            seen.append(name)
            super().__setattr__(name, value)
    seen = []
    Watched(pair[1], 'peer', _Server(), None)
    called, seen[:] = list(seen), []
    backend.ChildJobs(Watched, ChildDrain())(pair[1], 'peer', _Server(), None)
    assert seen == called + ['may_keep'] and 'logger' in called
