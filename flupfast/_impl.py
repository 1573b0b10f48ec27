"""The only place that picks the backend: the compiled twins in ``_speedups`` or the
pure-Python ones. Every other module imports the hot classes from here.

``FLUPFAST_SPEEDUPS``: ``auto`` (default; compiled if it imports), ``0``/``off`` (pure),
``1``/``require`` (compiled, or ImportError saying how to build it).
"""
import os

_choice = os.environ.get("FLUPFAST_SPEEDUPS", "auto").strip().lower()

if _choice in ("0", "off", "no", "false", "python", "pure"):
    _speedups = None
elif _choice in ("1", "on", "yes", "true", "require", "cython"):
    try:
        from flupfast import _speedups
    except ImportError as exc:
        raise ImportError(
            "FLUPFAST_SPEEDUPS=%s asks for the compiled backend, but flupfast._speedups "
            "does not import (%s). Build it with a C compiler and Cython>=3: "
            "`pip install --force-reinstall --no-binary flupfast flupfast` or, in a "
            "checkout, `pip install -e .`." % (_choice, exc)) from exc
elif _choice == "auto":
    try:
        from flupfast import _speedups
    except ImportError:
        _speedups = None
else:
    raise ImportError("FLUPFAST_SPEEDUPS must be auto, 0 or 1, not %r" % _choice)

if _speedups is not None:
    from flupfast._speedups import FastCGIParser, InputStream, frame_stdout  # noqa: F401
    from flupfast._speedups import (  # noqa: F401
        AJPParser, decode_body_chunk, decode_forward_request, frame_body)
    from flupfast._speedups import serve_child  # noqa: F401
    from flupfast._speedups import decode_request as decode_scgi_request  # noqa: F401
    BACKEND = "cython"
else:
    from flupfast.protocols.fastcgi import FastCGIParser, frame_stdout  # noqa: F401
    from flupfast.protocols.ajp import (  # noqa: F401
        AJPParser, decode_body_chunk, decode_forward_request, frame_body)
    from flupfast.body import InputStream  # noqa: F401
    from flupfast.serving.prefork import serve_child  # noqa: F401
    from flupfast.protocols.scgi import decode_request as decode_scgi_request  # noqa: F401
    BACKEND = "python"
