"""Per-request deadlines (the fork servers' ``timeout``): one watchdog thread per process that
reports the stack and raises TimeoutException in the request's thread, with a real-time signal
to break the main thread out of a blocking call. No socket or protocol here.
"""
import logging
import os
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


def cancel_interrupt(thread_id):
    """Take back an ``interrupt_thread`` not yet raised (the request ended meanwhile)."""
    _raise_in_thread(thread_id, None)


def _on_wake_signal(signum, frame):
    """Does nothing itself: running any Python code lets the pending TimeoutException raise,
    out of the blocking call the signal interrupted."""


class _Deadlines:
    """One watchdog thread per process for every request's ``timeout``: when one passes, it
    reports flup's "Timeout Exceeded" and the request thread's stack, and raises
    TimeoutException in that thread (any thread, unlike flup's SIGALRM, which works only in the
    main thread and replaces the app's alarm and handler)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._armed = {}  # id(entry) -> [deadline, thread id, report, fired]
        self._pid = None  # the process whose watchdog thread runs (threads die with fork)

    def arm(self, seconds, report):
        entry = [time.monotonic() + seconds, threading.get_ident(), report, False]
        if threading.current_thread() is threading.main_thread():
            install_wake_handler()
        with self._cond:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._armed = {}
                threading.Thread(target=self._watch, name='flupfast-deadlines',
                                 daemon=True).start()
            self._armed[id(entry)] = entry
            self._cond.notify()
        return entry

    def disarm(self, entry, timed_out):
        with self._cond:
            self._armed.pop(id(entry), None)
            if entry[3] == _REPORTING:
                entry[3] = _ENDED  # ended while its report was written: no interrupt now
            elif entry[3] == _FIRED and not timed_out:
                cancel_interrupt(entry[1])  # fired as the request ended: cancel it

    def _watch(self):
        cond = self._cond
        with cond:
            while True:
                now = time.monotonic()
                wait = None
                for key, entry in list(self._armed.items()):
                    if entry[0] <= now:
                        del self._armed[key]
                        entry[3] = _REPORTING
                        # Each in a thread of its own, outside the lock: a report can block
                        # (a FastCGI request's STDERR waits for the send lock that the
                        # request's own stuck send holds), and must stall neither the other
                        # requests' deadlines nor their arming.
                        threading.Thread(target=self._fire, args=(entry,), daemon=True,
                                         name='flupfast-deadline-fired').start()
                    elif wait is None or entry[0] - now < wait:
                        wait = entry[0] - now
                cond.wait(wait)

    def _fire(self, entry):
        _, thread_id, report, _ = entry
        frame = sys._current_frames().get(thread_id)
        try:
            report('Timeout Exceeded\n')
            if frame is not None:
                report(''.join(traceback.format_stack(frame)))
        except Exception:
            logger.exception('cannot report a request timeout')
        with self._cond:
            if entry[3] == _REPORTING:  # the request still runs
                entry[3] = _FIRED
                interrupt_thread(thread_id, TimeoutException)


# An entry's state (entry[3]): armed (False), its deadline passed and its report being written,
# the interrupt sent, or the request ended before the interrupt.
_REPORTING, _FIRED, _ENDED = 'reporting', True, 'ended'

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
            _deadlines.disarm(entry, exc_type is not None and issubclass(exc_type,
                                                                         TimeoutException))
        return False
