"""The fork servers' per-request ``timeout`` watchdog (flupfast.deadline) on its own: a
report that blocks, requests that end just as their deadline passes, and a forked child."""
import os
import sys
import threading
import time

from flupfast.deadline import TimeoutException, request_deadline
from tests.unit.deadline_helpers import run_side_by_side


def busy(seconds):
    """Run Python bytecode (where an interrupt lands) for about ``seconds``."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        pass


def deadline_fires(timeout=30):
    """Whether a request stuck past a 0.05 s deadline is interrupted within ``timeout``."""
    fired = threading.Event()

    def stuck():
        try:
            with request_deadline(0.05, lambda text: None):
                for _ in range(int(timeout * 100)):
                    time.sleep(0.01)
        except TimeoutException:
            fired.set()
    threading.Thread(target=stuck, daemon=True).start()
    return fired.wait(timeout)


def test_requests_ending_as_their_deadline_passes_leave_the_watchdog_working():
    """Deadlines that pass while their requests are ending: the interrupt raced the request's
    own disarming, landed once the lock was taken and leaked it, and no deadline of the process
    fired again (what the full suite's connection timeout tests hit)."""
    outcome = {'timed out': 0, 'ended': 0, 'raised after the request': 0}

    def requests():
        for _ in range(300):
            try:
                try:
                    with request_deadline(0.002, lambda text: None):
                        busy(0.002)
                    outcome['ended'] += 1
                except TimeoutException:
                    outcome['timed out'] += 1
            except TimeoutException:  # landed after the with block: it must not
                outcome['raised after the request'] += 1

    assert not run_side_by_side(requests), 'a request hung arming or disarming'
    assert outcome['raised after the request'] == 0
    assert outcome['timed out'] + outcome['ended'] == 1200
    assert deadline_fires()


def test_a_fired_deadline_leaves_the_interpreter_as_it_was():
    """The interrupt is not taken back with PyThreadState_SetAsyncExc(id, NULL): on CPython
    3.11 that leaves the eval loop's pending-work flag set for every thread, and a function
    called under sys.setprofile (a profiler, coverage) then loops at its first line for good."""
    assert deadline_fires()
    profiled = threading.Event()

    def call_under_a_profiler():
        events = []
        sys.setprofile(lambda frame, event, arg: events.append(event))
        try:
            (lambda: None)()
        finally:
            sys.setprofile(None)
        if events:
            profiled.set()
    threading.Thread(target=call_under_a_profiler, daemon=True).start()
    assert profiled.wait(10)


def test_a_forked_child_has_a_watchdog_of_its_own():
    assert deadline_fires()  # the parent's watchdog runs
    pid = os.fork()
    if pid == 0:
        os._exit(0 if deadline_fires(10) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_blocked_report_stalls_neither_arming_nor_another_requests_deadline():
    """A timed-out request whose report blocks (its STDERR waits on a send lock its own stuck
    send holds) must not keep other requests from arming or their deadlines from firing."""
    release, reported = threading.Event(), threading.Event()
    outcome = {}

    def blocked_report(text):
        reported.set()
        release.wait(30)

    def request(name, report):
        try:
            with request_deadline(0.01, report):
                for _ in range(3000):
                    time.sleep(0.01)
            outcome[name] = 'ran out'
        except TimeoutException:
            outcome[name] = 'timed out'

    first = threading.Thread(target=request, args=('first', blocked_report), daemon=True)
    first.start()
    assert reported.wait(30)
    second = threading.Thread(target=request, args=('second', lambda text: None), daemon=True)
    second.start()
    second.join(30)
    assert outcome.get('second') == 'timed out'   # while the first's report still blocks
    assert 'first' not in outcome
    release.set()
    first.join(30)
    assert outcome['first'] == 'timed out'
