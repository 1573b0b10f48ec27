"""What every part of the bench shares: where the repository is, the time limits every wait is
bounded by, the progress log, and reaching a socket. It imports nothing of bench (the bottom
layer: procs, wire, servers, fronts, drivers, scenarios and report build on it)."""
import socket
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
MIB = 1 << 20

# Every wait is bounded by one of these.
START_TIMEOUT = 20.0       # a server must accept a connection and answer hello within this
STOP_GRACE = 3.0           # SIGTERM -> this long -> poke the socket -> STOP_GRACE -> SIGKILL
CLIENT_SLACK = 15.0        # subprocess timeout beyond the client's own -T deadline


_T0 = time.monotonic()


def log(msg):
    print("[%6.1f s] %s" % (time.monotonic() - _T0, msg), file=sys.stderr, flush=True)


def rotated(items, round_number):
    """``items`` in the order of round ``round_number`` of an interleaved run: each round starts
    one place further on, so no cell always runs first (after the pause between rounds) or
    always follows the same neighbour; over ``len(items)`` rounds each runs once in every place."""
    items = list(items)
    if not items:
        return items
    shift = round_number % len(items)
    return items[shift:] + items[:shift]


def free_port():
    """A free TCP port on 127.0.0.1 (the kernel picks it; bound again at once by the server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect(address, timeout=1.0):
    """Connect to ``address`` (a Unix socket path, or "HOST:PORT") and close; raises OSError."""
    if address.startswith("/"):
        family, target = socket.AF_UNIX, address
    else:
        host, _, port = address.rpartition(":")
        family, target = socket.AF_INET, (host, int(port))
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(target)
