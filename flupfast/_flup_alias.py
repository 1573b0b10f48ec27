"""``install_as_flup()``: make ``import flup``, ``flup.server.fcgi``, ``flup.client.fcgi_app``
and every other flup module name resolve to flupfast's module of the same name, for code that
cannot be edited.

A meta-path finder maps ``flup[.X]`` to ``flupfast[.X]`` lazily (only what is imported is
loaded); the very module objects are shared, so ``flup.server.fcgi.WSGIServer is
flupfast.server.fcgi.WSGIServer``.
"""
import importlib
import importlib.abc
import importlib.util
import sys

from flupfast import FlupAlreadyImported

_ALIAS = 'flup'
_TARGET = 'flupfast'


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target, original_spec):
        self._target = target
        self._original_spec = original_spec

    def create_module(self, spec):
        return importlib.import_module(self._target)

    def exec_module(self, module):
        # The import machinery stamped the alias spec on the shared module; give it back its
        # own so that reload(), pickle and inspect keep seeing flupfast's.
        module.__spec__ = self._original_spec


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``flup`` and ``flup.*`` as flupfast's modules."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _ALIAS and not fullname.startswith(_ALIAS + '.'):
            return None
        target_name = _TARGET + fullname[len(_ALIAS):]
        if importlib.util.find_spec(target_name) is None:
            return None
        original = importlib.import_module(target_name)
        return importlib.util.spec_from_loader(
            fullname, _AliasLoader(target_name, original.__spec__),
            is_package=hasattr(original, '__path__'))


def _real_flup_modules():
    return sorted(name for name, module in sys.modules.items()
                  if (name == _ALIAS or name.startswith(_ALIAS + '.')) and module is not None
                  and not getattr(module, '__name__', '').startswith(_TARGET))


def install_as_flup():
    """Make every ``flup`` module name import flupfast's module of that name.

    Call it before anything imports flup (first thing in a wrapper script, a
    ``sitecustomize`` or ``python -c``). Raises FlupAlreadyImported when the real flup's
    modules are already loaded: they cannot be swapped under code that holds them.
    Calling it again is harmless.
    """
    real = _real_flup_modules()
    if real:
        where = getattr(sys.modules[real[0]], '__file__', None) or 'an unknown location'
        raise FlupAlreadyImported(
            'install_as_flup(): the real flup is already imported (%s, from %s); call '
            'flupfast.install_as_flup() before anything imports flup'
            % (', '.join(real), where))
    if not any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
