"""Per-request deadlines (the fork servers' ``timeout``): one watchdog thread per process that
reports the stack and raises TimeoutException in the request's thread, with a real-time signal
to break the main thread out of a blocking call. No socket or protocol here.
"""
import logging
import os
import queue
import signal
import sys
import threading
import time
import traceback

logger = logging.getLogger('flupfast')


class TimeoutException(Exception):
    """Raised inside the app when a fork server's per-request ``timeout`` expires."""


class RequestTerminated(TimeoutException):
    """Raised inside the app when ``--request-timeout`` (``requestTimeout``) ends a request
    of the thread or single mode (flupfast.ops.request_timeout)."""


# The signal that interrupts a blocking call (sleep, recv) of the main thread when its request's
# deadline passes. A real-time signal, which no app is likely to use: SIGALRM is the app's.
_WAKE_SIGNAL = signal.SIGRTMIN + 3 if hasattr(signal, 'SIGRTMIN') else None


def _raise_in_thread(thread_id, exc_class):
    """Make ``exc_class`` (None: nothing) the exception ``thread_id`` raises at its next
    bytecode; the CPython API every per-thread timeout builds on."""
    import ctypes
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_class) if exc_class else None)


def install_wake_handler():
    """In the main thread: let ``interrupt_thread`` break it out of a blocking call."""
    if _WAKE_SIGNAL is not None and signal.getsignal(_WAKE_SIGNAL) in (signal.SIG_DFL, None):
        signal.signal(_WAKE_SIGNAL, _on_wake_signal)


def interrupt_thread(thread_id, exc_class):
    """Raise ``exc_class`` in ``thread_id`` at its next bytecode; the main thread (with the
    wake handler installed) is also signalled out of a blocking call. Another thread blocked
    in one C call (a long ``time.sleep``) raises only once that call returns."""
    _raise_in_thread(thread_id, exc_class)
    if _WAKE_SIGNAL is not None and thread_id == threading.main_thread().ident \
            and signal.getsignal(_WAKE_SIGNAL) is _on_wake_signal:
        signal.pthread_kill(thread_id, _WAKE_SIGNAL)


def _on_wake_signal(signum, frame):
    """Does nothing itself: running any Python code lets the pending TimeoutException raise,
    out of the blocking call the signal interrupted."""


class Interruption:
    """The race between a watchdog interrupting a request's thread and the request ending,
    decided once: whichever claims it first wins. The request's thread takes no lock for it:
    an exception delivered asynchronously while it held one would leak the lock (it raised
    inside ``threading.Condition.__enter__`` once the lock was taken, and every later deadline
    of the process waited on it forever)."""

    __slots__ = ('thread_id', '_claim', '_sent')

    def __init__(self, thread_id):
        self.thread_id = thread_id
        self._claim = [True]  # list.pop is one atomic step: exactly one claimant gets it
        self._sent = False

    def fire(self, exc_class):
        """In the watchdog's thread: raise ``exc_class`` in the request's thread unless the
        request ended first."""
        try:
            self._claim.pop()
        except IndexError:
            return
        interrupt_thread(self.thread_id, exc_class)
        self._sent = True

    def end(self):
        """In the request's thread, once it is over: no interrupt lands after this returns.
        One the watchdog sent first raises in here (the request timed out as it ended)."""
        try:
            self._claim.pop()
            return
        except IndexError:
            pass
        while not self._sent:  # fire() is between its claim and its send
            time.sleep(0)
        # A pending interrupt is delivered at the end of a call: this one. It is not taken
        # back with PyThreadState_SetAsyncExc(id, NULL): on CPython 3.11 that leaves every
        # thread checking for pending work at each call from then on (and a thread under
        # sys.setprofile looping on it for good).
        time.sleep(0)


class _Deadlines:
    """One watchdog thread per process for every request's ``timeout``: when one passes, it
    reports flup's "Timeout Exceeded" and the request thread's stack, and raises
    TimeoutException in that thread (any thread, unlike flup's SIGALRM, which works only in the
    main thread and replaces the app's alarm and handler).

    Arming and disarming take no lock (see Interruption): the armed entries are a dict whose
    single calls are atomic, and a new deadline earlier than the watchdog's next look wakes it
    through a SimpleQueue (whose put is one C call too).
    """

    def __init__(self):
        self._start_lock = threading.Lock()
        self._armed = {}  # id(entry) -> _Deadline
        self._wake = None  # queue.SimpleQueue; None until this process's watchdog runs
        self._next_look = _NEVER  # when the watchdog looks next without being woken
        self._pid = None  # the process whose watchdog thread runs (threads die with fork)

    def arm(self, seconds, report):
        entry = _Deadline(time.monotonic() + seconds, report)
        if threading.current_thread() is threading.main_thread():
            install_wake_handler()
        if self._pid != os.getpid():
            self._start()
        self._armed[id(entry)] = entry
        if entry.due < self._next_look:
            self.wake()
        return entry

    def disarm(self, entry):
        self._armed.pop(id(entry), None)
        entry.interruption.end()

    def wake(self):
        """Make the watchdog look at the deadlines now."""
        self._wake.put(None)

    def _start(self):
        with self._start_lock:
            if self._pid == os.getpid():
                return
            self._armed = {}
            self._wake = queue.SimpleQueue()
            self._next_look = _NEVER
            self._pid = os.getpid()
            threading.Thread(target=self._watch, args=(self._wake,), name='flupfast-deadlines',
                             daemon=True).start()

    def _watch(self, wake):
        while True:
            # Any deadline armed from here on, before the next look is known, wakes us.
            self._next_look = _NEVER
            now = time.monotonic()
            next_look = _NEVER
            for key, entry in list(self._armed.items()):
                if entry.due > now:
                    next_look = min(next_look, entry.due)
                elif self._armed.pop(key, None) is not None:
                    # Each in a thread of its own: a report can block (a multiplexed
                    # FastCGI request's STDERR waits for the send lock that the request's own
                    # stuck send holds), and must stall neither the other deadlines nor their
                    # arming.
                    threading.Thread(target=self._fire, args=(entry,), daemon=True,
                                     name='flupfast-deadline-fired').start()
            self._next_look = next_look
            try:
                wake.get(timeout=None if next_look is _NEVER else max(0.0, next_look - now))
            except queue.Empty:
                pass

    @staticmethod
    def _fire(entry):
        frame = sys._current_frames().get(entry.interruption.thread_id)
        try:
            entry.report('Timeout Exceeded\n')
            if frame is not None:
                entry.report(''.join(traceback.format_stack(frame)))
        except Exception:
            logger.exception('cannot report a request timeout')
        entry.interruption.fire(TimeoutException)


class _Deadline:
    __slots__ = ('due', 'report', 'interruption')

    def __init__(self, due, report):
        self.due = due
        self.report = report
        self.interruption = Interruption(threading.get_ident())


_NEVER = float('inf')
_deadlines = _Deadlines()


class request_deadline:
    """flup's per-request ``timeout`` of the fork servers (fcgi_base.py:561-591): once it
    passes, "Timeout Exceeded" and the stack are reported and TimeoutException raises inside
    the app. A watchdog thread does it, not SIGALRM: it works in any thread (multiplexed
    requests too), and the app's own alarm and SIGALRM handler are left alone.
    """

    def __init__(self, timeout, report):
        self._timeout = timeout
        self._report = report
        self._entry = None

    def __enter__(self):
        if self._timeout:
            self._entry = _deadlines.arm(self._timeout, self._report)
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._entry is not None:
            entry, self._entry = self._entry, None
            _deadlines.disarm(entry)
        return False
