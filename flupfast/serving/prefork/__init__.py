"""The prefork mode: a parent (arbiter.py) keeps a pool of forked children (child.py) by a pure
policy (policy.py), and answers "overloaded" when every child is busy (overload.py). This
module only gathers their public names.
"""
from flupfast.serving.prefork.arbiter import ChildRecord, PreforkMode
from flupfast.serving.prefork.child import (
    DRAIN_SIGNAL, ChildBoard, ChildDrain, notify_parent, serve_child)
from flupfast.serving.prefork.overload import OverloadGuard
from flupfast.serving.prefork.policy import (
    BUSY, EXCESS_CHECK, EXITING, IDLE, PARENT_TICK, SLOT_EMPTY, SLOT_UNREPORTED, STATUS_BUSY,
    STATUS_IDLE, PoolChange, PoolLimits, decide_pool_change, retire_after_delay)

__all__ = [
    "BUSY", "IDLE", "STATUS_BUSY", "STATUS_IDLE", "EXITING", "EXCESS_CHECK", "PARENT_TICK",
    "DRAIN_SIGNAL",
    "SLOT_EMPTY", "SLOT_UNREPORTED",
    "ChildBoard", "ChildDrain", "ChildRecord",
    "OverloadGuard", "PoolChange", "PoolLimits", "PreforkMode",
    "decide_pool_change", "notify_parent", "retire_after_delay", "serve_child",
]
