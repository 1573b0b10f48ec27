"""The connection tests' way to make a per-request ``timeout`` expire at a chosen moment: the
request arms it long, the app says it is running, the test moves the watchdog's deadlines to
now. The exception then lands in the app's loop, never in the server's own code (logging,
sending) that runs before the app, which a short real deadline may hit on a loaded machine.
"""
import threading
import time

from flupfast import deadline

LONG = 3600  # the timeout the connection arms: it never expires by itself in a test


def stuck_app(started):
    """An app that says it runs, then loops until TimeoutException (at most ~10 s)."""
    def stuck(environ, start_response):
        started.set()
        release = threading.Event()
        for _ in range(1000):
            if release.wait(0.01):
                break
    return stuck


def expire_armed_deadlines():
    """Make every armed request deadline due now and wake the watchdog."""
    watchdog = deadline._deadlines
    for entry in list(watchdog._armed.values()):
        entry.due = 0
    watchdog.wake()


def run_side_by_side(target, threads=4, timeout=60):
    """Run ``target`` in ``threads`` daemon threads at once; the ones still running after
    ``timeout`` seconds in all (a hang must fail the test, not stop the suite)."""
    started = [threading.Thread(target=target, daemon=True) for _ in range(threads)]
    for thread in started:
        thread.start()
    give_up = time.monotonic() + timeout
    for thread in started:
        thread.join(max(0, give_up - time.monotonic()))
    return [thread for thread in started if thread.is_alive()]
