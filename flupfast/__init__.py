"""flupfast: a fast, drop-in replacement for flup's WSGI servers.

Owns the version, reports which backend (compiled or pure Python) is in use, and offers
install_as_flup() (loaded only when called: importing flupfast loads no server).
"""
import os
import sys

try:
    from flupfast._impl import BACKEND
except ImportError as _exc:
    # FLUPFAST_SPEEDUPS asks for what is not there. On the command line (`python -m flupfast`
    # while runpy locates it, or the `flupfast` script) that is one line, not a traceback.
    if sys.argv[:1] == ["-m"] or os.path.basename(sys.argv[0] if sys.argv else "") == "flupfast":
        sys.exit("flupfast: %s" % _exc)
    raise

__version__ = "0.1.0.dev0"
__all__ = ["BACKEND", "FlupAlreadyImported", "__version__", "install_as_flup"]


class FlupAlreadyImported(RuntimeError):
    """install_as_flup() was called after the real flup was imported: its modules cannot be
    swapped under code that already holds them."""


def install_as_flup():
    """Make ``import flup`` and every ``flup.*`` module name (``flup.server.fcgi``,
    ``flup.client.fcgi_app``...) resolve to flupfast's module of that name, for code that
    cannot be edited. Call it before anything imports flup; raises FlupAlreadyImported (a
    RuntimeError) if the real flup is loaded.
    """
    from flupfast._flup_alias import install_as_flup as install
    install()
