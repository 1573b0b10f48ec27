"""Spies on flup's hooks, for the tests that check the compiled request paths hand over to an
override (test_scgi_hooks.py, test_fastcgi_hooks.py)."""
import functools


def spy_on_instance(obj, name):
    """Set ``name`` on ``obj`` itself: a hook that records the call and runs the method it
    hides. Returns the list of calls."""
    stock = getattr(obj, name)
    calls = []

    def hook(*args):
        calls.append(name)
        return stock(*args)
    setattr(obj, name, hook)
    return calls


def wraps_spy(monkeypatch, cls, name, record):
    """Patch ``cls.<name>`` with a functools.wraps wrapper (as APM agents wrap hooks) that
    appends ``record(*args)`` (the method's arguments after self) to the returned list, then
    calls the original."""
    stock = getattr(cls, name)
    calls = []

    @functools.wraps(stock)
    def wrapper(self, *args):
        calls.append(record(*args))
        return stock(self, *args)
    monkeypatch.setattr(cls, name, wrapper)
    return calls


def mount_by_sanitize(monkeypatch, cls, script_name):
    """Patch ``cls._sanitizeEnv`` to run the original, then set SCRIPT_NAME (a site mounting
    its app by patching flup's server class)."""
    stock = cls._sanitizeEnv

    def _sanitizeEnv(self, environ):
        stock(self, environ)
        environ['SCRIPT_NAME'] = script_name
    monkeypatch.setattr(cls, '_sanitizeEnv', _sanitizeEnv)


def mine(environ, start_response):
    start_response('200 OK', [('Content-Type', 'text/plain')])
    return [b'mine']


# The server's settings and app as Python reads them, where its instance dict says otherwise:
# a property (its setter keeps the value in the dict, under the same name) and an override of
# attribute access. The compiled paths read the dict only where Python would.
SETTINGS_SEEN_OTHERWISE = {
    'property': {'application': property(
        lambda self: mine, lambda self, app: self.__dict__.__setitem__('application', app))},
    'getattribute': {'__getattribute__': lambda self, name: mine if name == 'application'
                     else object.__getattribute__(self, name)},
}

