"""The only place that picks the backend: the compiled twins in ``_speedups`` or the
pure-Python ones. Every other module imports the hot classes from here.

``FLUPFAST_SPEEDUPS``: ``auto`` (default, also when empty; compiled if it imports), ``0``
(pure Python) or ``1`` (compiled, or ImportError saying how to get it); the aliases in
PURE_VALUES and COMPILED_VALUES mean the same. Any other value is an ImportError naming them.
"""
import importlib.machinery
import os

AUTO_VALUES = ("auto", "")
PURE_VALUES = ("0", "off", "no", "false", "python", "pure")
COMPILED_VALUES = ("1", "on", "yes", "true", "require", "cython")

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

HOW_TO_BUILD = (
    "This flupfast was installed without its compiled part (no wheel for this platform and no "
    "working C compiler when it was built). To get it, install a C compiler and reinstall from "
    "the sdist or a checkout: `pip install --force-reinstall --no-deps --no-cache-dir "
    "--no-binary flupfast PATH` (in a checkout: `pip install -e .`); or unset "
    "FLUPFAST_SPEEDUPS to use pure Python.")

HOW_TO_BUILD_IN_TREE = (
    "%s is a source checkout whose compiled part is not built; run from %s, it shadows any "
    "installed flupfast. Build it there with `pip install -e .` (needs a C compiler), run from "
    "another directory, or unset FLUPFAST_SPEEDUPS to use pure Python.")


def why_not_compiled(exc):
    """Why ``flupfast._speedups`` did not import, and what to do, in one sentence. Python's own
    message misleads here: a package missing its submodule is "partially initialized (most
    likely due to a circular import)"."""
    built = any(name.startswith("_speedups.") and name.endswith(suffix)
                for name in os.listdir(_PACKAGE_DIR)
                for suffix in importlib.machinery.EXTENSION_SUFFIXES)
    if built:
        return "flupfast._speedups is built but does not import (%s). %s" % (exc, HOW_TO_BUILD)
    tree = os.path.dirname(_PACKAGE_DIR)
    if os.path.exists(os.path.join(tree, "setup.py")):
        return "flupfast._speedups is not built. " + HOW_TO_BUILD_IN_TREE % (_PACKAGE_DIR, tree)
    return "flupfast._speedups is not built. " + HOW_TO_BUILD

_raw = os.environ.get("FLUPFAST_SPEEDUPS", "auto")
_choice = _raw.strip().lower()

if _choice in PURE_VALUES:
    _speedups = None
elif _choice in COMPILED_VALUES:
    try:
        from flupfast import _speedups
    except ImportError as exc:
        raise ImportError("FLUPFAST_SPEEDUPS=%s requires the compiled backend: %s"
                          % (_raw, why_not_compiled(exc))) from None
elif _choice in AUTO_VALUES:
    try:
        from flupfast import _speedups
    except ImportError:
        _speedups = None
else:
    raise ImportError(
        "FLUPFAST_SPEEDUPS=%r is not one of: auto (default), 0 (pure Python), 1 (compiled, "
        "required); aliases of 0: %s; of 1: %s"
        % (_raw, ", ".join(PURE_VALUES[1:]), ", ".join(COMPILED_VALUES[1:])))

if _speedups is not None:
    from flupfast._speedups import FastCGIParser, InputStream, frame_stdout  # noqa: F401
    from flupfast._speedups import (  # noqa: F401
        AJPParser, decode_body_chunk, decode_forward_request, frame_body)
    from flupfast._speedups import serve_child  # noqa: F401
    from flupfast._speedups import send_buffers  # noqa: F401
    from flupfast._speedups import decode_request as decode_scgi_request  # noqa: F401
    BACKEND = "cython"
else:
    from flupfast.protocols.fastcgi import FastCGIParser, frame_stdout  # noqa: F401
    from flupfast.protocols.ajp import (  # noqa: F401
        AJPParser, decode_body_chunk, decode_forward_request, frame_body)
    from flupfast.body import InputStream  # noqa: F401
    from flupfast.output import send_buffers  # noqa: F401
    from flupfast.protocols.scgi import decode_request as decode_scgi_request  # noqa: F401
    BACKEND = "python"


def __getattr__(name):
    """The pure child loop on first use: it lives with the prefork mode (serving/), which
    importing a codec must not load."""
    if name == "serve_child" and _speedups is None:
        from flupfast.serving.prefork.child import serve_child
        globals()["serve_child"] = serve_child
        return serve_child
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
