"""flup-compatible server modules: the same module names, classes, signatures and defaults as
``flup.server`` 1.0.3, assembled from flupfast's protocol-blind parts.
"""
__all__ = ['NoDefault']


class NoDefault(object):
    """Sentinel meaning "argument not given" (flup uses the class itself, never an instance)."""
