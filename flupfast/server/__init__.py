"""flup-compatible server modules: the same module names, classes, signatures and defaults as
``flup.server`` 1.0.3, assembled from flupfast's protocol-blind parts.
"""
__all__ = ['NoDefault']


class NoDefault(object):
    """Sentinel meaning "argument not given" (flup's ``flup.server.NoDefault``; like flup, the
    class itself is the value, never an instance)."""
