"""Requests in flight watched for running too long: the one tracker and the one stack report
(method, URI, pid, thread, then the frames) that the slow log and the request timeout share.
A daemon thread per process looks at them; no protocol, no mode, no request state here.
"""
import os
import sys
import threading
import time
import traceback

from flupfast.limits import REQUEST_WATCH_INTERVAL

__all__ = ['RequestWatch', 'describe_request']


def describe_request(what, method, uri, running, ident, frame):
    """``what: METHOD URI running for S s (pid P, thread T)`` and the thread's Python stack."""
    stack = ''.join(traceback.format_stack(frame)) if frame is not None else \
        '  (the thread has no Python frame now)\n'
    return '%s: %s %s running for %.1f s (pid %d, thread %d)\n%s' % (
        what, method, uri, running, os.getpid(), ident, stack.rstrip('\n'))


class RequestWatch:
    """A request observer (flupfast.gateway.set_observer) that calls ``overran(token, entry,
    frame, now)`` once for each request still running ``seconds`` after it began. ``entry`` is
    ``[thread ident, start, method, uri, reported]``.

    The watching thread is started by the first request of each process (so prefork children
    each get their own after the fork) and looks a few times per ``seconds``.
    """

    def __init__(self, seconds):
        if not seconds > 0:
            raise ValueError('%s needs seconds > 0, not %r' % (type(self).__name__, seconds))
        self.seconds = seconds
        self._in_flight = {}         # token -> [thread ident, start, method, uri, reported]
        self._lock = threading.Lock()
        self._watcher_pid = None

    def begin(self, environ):
        if self._watcher_pid != os.getpid():
            self._start_watcher()
        token = object()
        self._in_flight[token] = [threading.get_ident(), time.monotonic(),
                                  environ.get('REQUEST_METHOD', '-'),
                                  environ.get('REQUEST_URI') or environ.get('PATH_INFO', ''),
                                  False]
        return token

    def end(self, token, response, failed):
        self._in_flight.pop(token, None)

    def _start_watcher(self):
        with self._lock:
            if self._watcher_pid == os.getpid():
                return
            self._in_flight.clear()  # a forked child does not run its parent's requests
            self._watcher_pid = os.getpid()
            threading.Thread(target=self._watch, name='flupfast-' + type(self).__name__,
                             daemon=True).start()

    def _watch(self):
        pid = os.getpid()
        interval = min(self.seconds / 4.0, REQUEST_WATCH_INTERVAL)
        while self._watcher_pid == pid:
            time.sleep(interval)
            self.check(time.monotonic())

    def check(self, now):
        """Hand each request running for ``seconds`` or more to ``overran``, once."""
        frames = None
        for token, entry in list(self._in_flight.items()):
            if entry[4] or now - entry[1] < self.seconds:
                continue
            entry[4] = True
            if frames is None:
                frames = sys._current_frames()
            self.overran(token, entry, frames.get(entry[0]), now)

    def overran(self, token, entry, frame, now):
        raise NotImplementedError

    @staticmethod
    def describe(what, entry, frame, now):
        ident, start, method, uri, _ = entry
        return describe_request(what, method, uri, now - start, ident, frame)
