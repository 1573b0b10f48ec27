"""flupfast: a fast, drop-in replacement for flup's WSGI servers.

Owns the version, reports which backend (compiled or pure Python) is in use, and offers
install_as_flup() (loaded only when called: importing flupfast loads no server).
"""
from flupfast._impl import BACKEND

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
