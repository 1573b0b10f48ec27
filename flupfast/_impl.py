"""The only place that picks the backend: the compiled twins in ``_speedups`` or the
pure-Python ones. Every other module imports the hot classes from here.

``FLUPFAST_SPEEDUPS``: ``auto`` (default, also when empty; compiled if it imports), ``0``
(pure Python) or ``1`` (compiled, or ImportError saying how to get it); the aliases in
PURE_VALUES and COMPILED_VALUES mean the same. Any other value is an ImportError naming them.
"""
import importlib
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

# The twins, once: (the name every module imports from here, its name in _speedups, the
# module and name of its pure twin). tests/conftest.py builds both backends' namespaces from
# this list, and a test checks _speedups.pyi against it. Bound by name (importlib) so that
# the pure modules load only for the backend that uses them.
TWINS = (
    ("FastCGIParser", "FastCGIParser", "flupfast.protocols.fastcgi", "FastCGIParser"),
    ("frame_stdout", "frame_stdout", "flupfast.protocols.fastcgi", "frame_stdout"),
    ("decode_scgi_request", "decode_request", "flupfast.protocols.scgi", "decode_request"),
    ("decode_uwsgi_request", "decode_uwsgi_request", "flupfast.protocols.uwsgi",
     "decode_uwsgi_request"),
    ("AJPParser", "AJPParser", "flupfast.protocols.ajp", "AJPParser"),
    ("decode_forward_request", "decode_forward_request", "flupfast.protocols.ajp",
     "decode_forward_request"),
    ("decode_body_chunk", "decode_body_chunk", "flupfast.protocols.ajp", "decode_body_chunk"),
    ("frame_body", "frame_body", "flupfast.protocols.ajp", "frame_body"),
    ("InputStream", "InputStream", "flupfast.body", "InputStream"),
    ("BodySource", "BodySource", "flupfast.scgi_body", "BodySource"),
    ("PartsWriter", "PartsWriter", "flupfast.output", "PartsWriter"),
    ("send_buffers", "send_buffers", "flupfast.output", "send_buffers"),
    ("recv_into", "recv_into", "flupfast.sockio", "recv_into"),
    ("close_socket", "close_socket", "flupfast.sockio", "close_socket"),
    ("epoll_arm", "epoll_arm", "flupfast.sockio", "epoll_arm"),
    ("epoll_ready_now", "epoll_ready_now", "flupfast.sockio", "epoll_ready_now"),
    ("serve_child", "serve_child", "flupfast.serving.prefork.child", "serve_child"),
    ("ChildJobs", "ChildJobs", "flupfast.serving.prefork.child", "ChildJobs"),
    ("Leader", "Leader", "flupfast.serving.leader", "Leader"),
    ("build_environ", "build_environ", "flupfast.gateway", "build_environ"),
    ("sanitize_cgi_environ", "sanitize_cgi_environ", "flupfast.gateway", "sanitize_cgi_environ"),
    ("Response", "Response", "flupfast.gateway", "Response"),
    ("run_application", "run_application", "flupfast.gateway", "run_application"),
    ("serve_scgi", "serve_scgi", "flupfast.scgi_connection", "serve"),
    ("run_scgi", "run_scgi", "flupfast.scgi_connection", "run"),
    ("run_fcgi", "run_fcgi", "flupfast.fastcgi_connection", "run"),
    ("uwsgi_url_scheme", "uwsgi_url_scheme", "flupfast.protocols.uwsgi", "url_scheme"),
    ("WorkerTitle", "WorkerTitle", "flupfast.ops.proctitle", "WorkerTitle"),
    ("run_job", "run_job", "flupfast.serving.job", "run_job"),
    ("new_job", "new_job", "flupfast.serving.job", "new_job"),
    ("ConnectionState", "ConnectionState", "flupfast.connection_state", "ConnectionState"),
    ("FastCGIState", "FastCGIState", "flupfast.connection_state", "FastCGIState"),
)

# Pure twins bound on first use: the child loop lives with the prefork mode (serving/), which
# importing a codec must not load; the SCGI and FastCGI connections import this module (and
# ops.proctitle, whose WorkerTitle is a twin; serving.job, whose run_job and new_job are, and
# which connection_state imports for the job contract's defaults).
LAZY = frozenset({"serve_child", "ChildJobs", "Leader", "serve_scgi", "run_scgi", "run_fcgi",
                  "WorkerTitle", "run_job", "new_job", "ConnectionState", "FastCGIState"})


def runs_compiled(kind):
    """Mark a method of flupfast's request path whose code the compiled ``serve_scgi``/
    ``run_scgi`` (SCGI, uwsgi) or ``run_fcgi`` (FastCGI, kinds ``fcgi:...``) run themselves,
    in C, while it is the method in force (_cython/scgi_serve.pxi, fastcgi_serve.pxi; by
    identity, per class): an override on a subclass, or a function patched into the class, is
    called where the pure path calls it. ``kind`` names which twin takes over. The
    connection's two ``__init__`` (``logged_init``, ``connection_init``) are run by the
    compiled ChildJobs (_cython/connection.pxi), and FastCGI's (``fcgi_init``) with the second."""
    def mark(method):
        if _speedups is not None:
            _speedups.OWN_METHODS[kind] = method
        return method
    return mark


def pure_twin(name):
    """The pure-Python twin named ``name`` (a name of TWINS, or ``open_scgi_body``)."""
    if name == "open_scgi_body":
        from flupfast.scgi_body import open_buffered
        return open_buffered
    for public, _, module, attr in TWINS:
        if public == name:
            return getattr(importlib.import_module(module), attr)
    raise KeyError(name)


def backend_twins(speedups=None, lazy=True):
    """{name: twin} of one backend: the compiled one from ``speedups`` (the module), else the
    pure one (without the LAZY twins unless ``lazy``). ``open_scgi_body`` opens SCGI's
    wsgi.input: the backend's InputStream, or C's BufferedReader in pure Python."""
    if speedups is None:
        twins = {name: pure_twin(name) for name, _, _, _ in TWINS if lazy or name not in LAZY}
        twins["open_scgi_body"] = pure_twin("open_scgi_body")
        return twins
    from flupfast.scgi_body import open_streamed
    twins = {name: getattr(speedups, compiled) for name, compiled, _, _ in TWINS}
    twins["open_scgi_body"] = open_streamed(twins["InputStream"], twins["BodySource"])
    return twins


globals().update(backend_twins(_speedups, lazy=False))
BACKEND = "python" if _speedups is None else "cython"


def __getattr__(name):
    """A LAZY pure twin on first use."""
    if name in LAZY and _speedups is None:
        twin = globals()[name] = pure_twin(name)
        return twin
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
