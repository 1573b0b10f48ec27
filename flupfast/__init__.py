"""flupfast: a fast, drop-in replacement for flup's WSGI servers.

Owns the version and reports which backend (compiled or pure Python) is in use.
"""
from flupfast._impl import BACKEND

__version__ = "0.1.0.dev0"
__all__ = ["BACKEND", "__version__"]
