"""The prefork pool policy: child states, the parent's polling intervals, and the spawn/retire decision
as pure functions of (child states, limits, now), the retire hysteresis included. No process,
socket or clock here: the arbiter passes ``now`` in.
"""
import struct
from dataclasses import dataclass

from flupfast.limits import FORK_RETIRE_DELAY, FORK_RETIRE_SPACING

__all__ = ["BUSY", "IDLE", "EXITING", "STATUS_BUSY", "STATUS_IDLE", "SLOT_EMPTY",
           "SLOT_UNREPORTED", "POOL_STATE_SIZE", "FULL_AT", "NO_GUARD_AT", "NEXT_LOOK",
           "NEXT_LOOK_AT", "PARENT_SAMPLE", "BUSY_SPAN", "PoolChange", "PoolLimits",
           "child_request_limit", "decide_pool_change", "retire_after_delay", "rss_over_limit"]

# Status bytes a child sends its parent (flup preforkserver.py:414, :426). They are bytes: flup
# compared them with str, so every child looked idle and the pool never grew (prefork-pool-growth).
STATUS_BUSY = b"\x00"
STATUS_IDLE = b"\xff"

# The scoreboard: one byte per child slot in memory shared by the parent and its children.
# A child writes its own slot (STATUS_IDLE or STATUS_BUSY) at every change and wakes the
# parent only when the pool needs it to act; the parent reads the slots whenever it wakes.
# SLOT_UNREPORTED: the parent's mark for a new child; a child loop that never writes its slot
# (a flup-style ``_child`` override) keeps it, and the parent then goes by the status bytes.
SLOT_EMPTY = 0x00
SLOT_UNREPORTED = 0x01

# Child states, as the parent sees them.
IDLE = "idle"        # waiting for a connection
BUSY = "busy"        # running a job
EXITING = "exiting"  # told to go, or seen to go (EOF); still a process until reaped

# The parent wakes at least this often even with nothing to do: a safety net for reaping and
# for flags set from another thread (signals and child events wake it at once).
PARENT_TICK = 1.0
# Poll interval while waiting for children to exit (SIGCHLD usually wakes us sooner).
REAP_POLL = 0.05
# While an excess waits out FORK_RETIRE_DELAY the parent reads the scoreboard this often:
# children wake it only when the idle count crosses min_spare or max_spare, so without a look of its own
# a dip back between them goes unseen and a count swinging around max_spare looks like a
# lasting excess.
EXCESS_CHECK = 0.05

# The parent's word to its children, in memory they share (POOL_STATE_SIZE bytes): byte 0 is 1
# while the pool has max_children (no spawn can help), byte 1 is 1 when the parent has no
# overload guard (an exhausted pool is nothing to act on), bytes 8-15 when the parent will next
# look at the scoreboard (time.monotonic(), a native double).
POOL_STATE_SIZE = 16
FULL_AT = 0
NO_GUARD_AT = 1
NEXT_LOOK = struct.Struct("d")  # at NEXT_LOOK_AT
NEXT_LOOK_AT = 8
# Once a look finds the pool exhausted, the parent looks this often for BUSY_SPAN seconds, and
# a child that leaves none idle wakes it only if its next look is further off: the overload
# guard's clock restarts when a look finds a child free, and its looks are these samples. In
# the same way, for BUSY_SPAN after a look found an excess of idle children, it looks every
# EXCESS_CHECK, and a child going idle past max_spare wakes it only if its next look is further
# off (the retirement waits FORK_RETIRE_DELAY anyway). A wake-up per crossing (nearly one per
# request while the idle count swings around a line: 16 clients on 8 children) cost the parent
# 1.0-1.5 us of CPU per request, about a twentieth of the whole (bench/profile-new-connection.md
# section 13).
PARENT_SAMPLE = 0.01
BUSY_SPAN = 1.0

# -- the pool policy: a pure function ---------------------------------------------------------

@dataclass(frozen=True)
class PoolLimits:
    """flup's minSpare/maxSpare/maxChildren, already validated and normalised."""
    min_spare: int = 1
    max_spare: int = 5
    max_children: int = 50

    def __post_init__(self):
        if self.min_spare < 1:
            raise ValueError("min_spare must be at least 1")
        if self.max_spare < self.min_spare:
            raise ValueError("max_spare must be greater than or equal to min_spare")
        if self.max_children < self.max_spare:
            raise ValueError("max_children must be greater than or equal to max_spare")


@dataclass(frozen=True)
class PoolChange:
    """What the parent should do now: fork ``spawn`` children, retire the idle ``retire`` pids."""
    spawn: int = 0
    retire: tuple = ()


def decide_pool_change(states, limits):
    """Decide spawns and retirements from ``states`` ({pid: IDLE | BUSY | EXITING}).

    flup's rules (preforkserver.py:145-146, :210-229), with child states that work:
    * keep at least ``max_spare`` children in all (flup's "optimistic absolute minimum") and at
      least ``min_spare`` idle ones, never more than ``max_children`` in all (exiting children
      count until reaped: they are still processes);
    * with more than ``max_spare`` idle children, retire the extras, highest pids first.
    """
    total = len(states)
    idle = sorted(pid for pid, state in states.items() if state == IDLE)
    if len(idle) > limits.max_spare:
        return PoolChange(retire=tuple(idle[limits.max_spare:]))
    wanted = max(limits.max_spare - total, limits.min_spare - len(idle), 0)
    return PoolChange(spawn=max(0, min(wanted, limits.max_children - total)))


def retire_after_delay(retire, excess, now):
    """The retire hysteresis: ``retire`` (decide_pool_change's pids) go only once an excess has
    lasted FORK_RETIRE_DELAY, and then only as many as stayed idle through the whole delay (the
    fewest extras seen), one at a time, FORK_RETIRE_SPACING apart, highest pid first; an
    excess that shrinks meanwhile retires fewer. ``excess`` is the state carried between
    calls: None, or (since, fewest), ``since`` moved so that the next one is due a spacing
    after the last. Returns (pids to retire now, the new ``excess``)."""
    if not retire:
        return (), None
    if excess is None:
        return (), (now, len(retire))
    since, fewest = excess
    fewest = min(fewest, len(retire))
    if now - since >= FORK_RETIRE_DELAY:
        left = fewest - 1
        return retire[-1:], ((now - FORK_RETIRE_DELAY + FORK_RETIRE_SPACING, left) if left
                              else None)
    return (), (since, fewest)


# -- recycling: pure functions of a child's settings and readings -------------------------------

def child_request_limit(max_requests, jitter, randint):
    """The requests one child serves before it is replaced: ``max_requests`` plus
    ``randint(0, jitter)`` (gunicorn's max_requests_jitter), so children started together do
    not all restart together; 0 (unlimited) stays 0."""
    if max_requests <= 0:
        return 0
    return max_requests + (randint(0, jitter) if jitter > 0 else 0)


def rss_over_limit(statm, limit_pages):
    """True when the resident set in ``statm`` (the bytes of /proc/self/statm: size, resident,
    ... in pages, proc(5)) is over ``limit_pages``."""
    fields = statm.split(None, 2)
    return len(fields) > 1 and int(fields[1]) > limit_pages
