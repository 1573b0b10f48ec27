"""flupfast.server against real flup 1.0.3's flup.server, by inspection: the same modules,
``__all__``, public classes and functions, constructor and method signatures with their
defaults, and module constants. What flup has, we have with the same shape; additions are
allowed (listed in compat/known_differences.py where they change behaviour).
"""
import importlib
import inspect

import pytest

flup_server = pytest.importorskip('flup.server')

MODULES = ['fcgi', 'fcgi_fork', 'fcgi_single', 'scgi', 'scgi_fork', 'ajp', 'ajp_fork',
           'fcgi_base', 'scgi_base', 'ajp_base', 'threadedserver', 'threadpool',
           'preforkserver', 'singleserver', 'cgi', 'paste_factory']

# flup names that are implementation details with no meaning in flupfast, each with the
# reason; anything else flup defines publicly must exist here.
NOT_PROVIDED = {}

# flup's per-connection machinery: the classes exist with flup's constructor signature (checked
# below), but their methods are flup's record-by-record implementation (process_input,
# writeRecord, ajp Request.set*/addHeader, timeout_handler...), which flupfast's connection
# does not have (known_differences 'connection-internals').
CONNECTION_INTERNALS = {'Request', 'CGIRequest', 'Connection', 'MultiplexedConnection'}

# flup classes that exist here under flup's name but whose constructor takes flupfast's
# arguments, each with the reason (known_differences 'connection-internals').
INTERNALS = {
    ('ajp_base', 'InputStream'): "the body stream pulls from the connection (flup's is fed "
                                 "by Connection.processInput, which ours does not have)",
}

# Standard-library modules flup imports into its namespaces (not API).
STDLIB = {'sys', 'os', 'socket', 'select', 'errno', 'signal', 'logging', 'datetime',
          'traceback', 'threading', 'struct', 'warnings', 'StringIO', 'time', 'io',
          'cgitb', 'weakref', 'random', 'resource', 'array', 'tempfile'}


def flup_module(name):
    return importlib.import_module('flup.server.' + name)


def our_module(name):
    return importlib.import_module('flupfast.server.' + name)


def public_names(module):
    names = set()
    for name, value in vars(module).items():
        if name.startswith('_') or name in STDLIB or inspect.ismodule(value):
            continue
        origin = getattr(value, '__module__', None)
        if inspect.isclass(value) or inspect.isfunction(value):
            if origin and not origin.startswith('flup'):
                continue  # imported from the standard library
        names.add(name)
    return names


def params(func):
    """(name, kind, default) per parameter; flup's NoDefault sentinel compares as ours."""
    from flupfast.server import NoDefault
    sig = inspect.signature(func)
    return [(p.name, p.kind, NoDefault if p.default is flup_server.NoDefault else p.default)
            for p in sig.parameters.values()]


def assert_compatible(ours, flups, where):
    """Every call valid for flup's signature is valid for ours, meaning the same: flup's
    parameters in flup's order with flup's defaults; ours may add optional ones after them."""
    # A default where flup has none keeps every flup call valid.
    ours_cut = [(n, k, d if flups[i][2] is not inspect.Parameter.empty else flups[i][2])
                for i, (n, k, d) in enumerate(ours[:len(flups)])]
    assert ours_cut == flups, where
    assert all(default is not inspect.Parameter.empty for _, _, default in ours[len(flups):]), \
        where


# The private methods subclasses override or call (flup's de-facto extension API, see
# 'connection-internals'): they must exist with flup's signature. Other private helpers are flup's implementation.
HOOKS = {'_isClientAllowed', '_sanitizeEnv', '_setupSocket', '_cleanupSocket',
         '_mainloopPeriodic', '_exit', '_hupHandler', '_intHandler', '_usr1Handler',
         '_chldHandler', '_installSignalHandlers', '_restoreSignalHandlers', '_spawnChild',
         '_child', '_notifyParent'}


@pytest.mark.parametrize('name', MODULES)
def test_module_exists_with_flups_all(name):
    flup, ours = flup_module(name), our_module(name)
    assert getattr(ours, '__all__', None) == getattr(flup, '__all__', None)


@pytest.mark.parametrize('name', MODULES)
def test_public_names(name):
    flup, ours = flup_module(name), our_module(name)
    missing = sorted(n for n in public_names(flup) - set(dir(ours))
                     if NOT_PROVIDED.get((name, n)) is None)
    assert not missing, '%s lacks %s' % (name, missing)


@pytest.mark.parametrize('name', MODULES)
def test_classes_and_signatures(name):
    flup, ours = flup_module(name), our_module(name)
    for cls_name, flup_cls in vars(flup).items():
        if not inspect.isclass(flup_cls) or not flup_cls.__module__.startswith('flup') \
                or NOT_PROVIDED.get((name, cls_name)):
            continue
        our_cls = getattr(ours, cls_name)
        if (flup_cls.__module__.rpartition('.')[2], cls_name) in INTERNALS:
            continue  # see INTERNALS
        assert_compatible(params(our_cls.__init__), params(flup_cls.__init__),
                          (name, cls_name))
        if cls_name in CONNECTION_INTERNALS:
            continue
        for meth_name, flup_meth in vars(flup_cls).items():
            if not inspect.isfunction(flup_meth) or (meth_name.startswith('__')):
                continue
            if meth_name.startswith('_') and meth_name not in HOOKS:
                continue  # a private helper of flup's implementation
            our_meth = getattr(our_cls, meth_name, None)
            assert our_meth is not None, '%s.%s.%s missing' % (name, cls_name, meth_name)
            assert_compatible(params(our_meth), params(flup_meth), (name, cls_name, meth_name))


@pytest.mark.parametrize('name', MODULES)
def test_function_signatures(name):
    """Module-level functions (decode_pair, readNetstring, decodeString, the paste runners,
    asbool...) take flup's arguments."""
    flup, ours = flup_module(name), our_module(name)
    for func_name, flup_func in vars(flup).items():
        if not inspect.isfunction(flup_func) or not flup_func.__module__.startswith('flup') \
                or func_name.startswith('_'):
            continue
        our_func = getattr(ours, func_name)
        assert callable(our_func), (name, func_name)
        assert_compatible(params(our_func), params(flup_func), (name, func_name))


@pytest.mark.parametrize('name', ['fcgi_app', 'scgi_app'])
def test_client_modules(name):
    """flup.client's modules: the same __all__, public names, constructor and __call__
    signatures, and constants."""
    flup = importlib.import_module('flup.client.' + name)
    ours = importlib.import_module('flupfast.client.' + name)
    assert ours.__all__ == flup.__all__
    missing = sorted(n for n in public_names(flup) if not hasattr(ours, n))
    assert not missing, '%s lacks %s' % (name, missing)
    for cls_name in flup.__all__:
        for meth in ('__init__', '__call__'):
            assert_compatible(params(getattr(getattr(ours, cls_name), meth)),
                              params(getattr(getattr(flup, cls_name), meth)),
                              (name, cls_name, meth))
    for const, value in vars(flup).items():
        if const.startswith('FCGI_'):
            assert getattr(ours, const) == value, const


@pytest.mark.parametrize('name', ['fcgi_base', 'scgi_base', 'ajp_base'])
def test_constants_equal(name):
    flup, ours = flup_module(name), our_module(name)
    for const, value in vars(flup).items():
        if const.isupper() or const.endswith('Table') or const == 'LoggerName':
            if const in ('DEBUGLOG',):
                continue
            assert getattr(ours, const) == value, const


def test_no_default_is_a_class():
    from flupfast.server import NoDefault
    assert inspect.isclass(NoDefault) and flup_server.__all__ == ['NoDefault']


@pytest.mark.parametrize('name', MODULES + ['scgi_single', 'ajp_single'])
def test_public_classes_have_docstrings_naming_flups_equivalent(name):
    ours = our_module(name)
    for cls_name, cls in vars(ours).items():
        if cls_name.startswith('_') or not inspect.isclass(cls) \
                or not cls.__module__.startswith('flupfast.server'):
            continue
        doc = vars(cls).get('__doc__') or ''
        assert 'flup' in doc, '%s.%s needs a docstring naming flup\'s equivalent' % (
            cls.__module__, cls_name)
