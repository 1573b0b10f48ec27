"""The slow log (PHP-FPM's ``request_slowlog_timeout``): a request still running after
``seconds`` gets its Python stack logged once (method, URI, pid, thread, then the frames), so
an operator sees where it waits without a debugger.

A daemon thread per process (started by the first request in it, so prefork children each get
their own after the fork) looks at the requests in flight a few times per ``seconds``.
"""
import logging
import os
import sys
import threading
import time
import traceback

__all__ = ['SlowLog']

logger = logging.getLogger('flupfast.slowlog')


class SlowLog:
    """A request observer (flupfast.gateway.set_observer)."""

    def __init__(self, seconds):
        if seconds <= 0:
            raise ValueError('the slow log needs seconds > 0, not %r' % (seconds,))
        self.seconds = seconds
        self.slow_requests = 0       # PHP-FPM's "slow requests": logged so far in this process
        self._in_flight = {}         # token -> [thread ident, start, method, uri, reported]
        self._lock = threading.Lock()
        self._watcher_pid = None
        self.on_slow = None          # called with slow_requests when it grows (the status page)

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
            threading.Thread(target=self._watch, name='flupfast-slowlog', daemon=True).start()

    def _watch(self):
        pid = os.getpid()
        interval = min(self.seconds / 4.0, 1.0)
        while self._watcher_pid == pid:
            time.sleep(interval)
            self.check(time.monotonic())

    def check(self, now):
        """Log the stack of each request running for ``seconds`` or more, once."""
        frames = None
        for entry in list(self._in_flight.values()):
            ident, start, method, uri, reported = entry
            if reported or now - start < self.seconds:
                continue
            entry[4] = True
            self.slow_requests += 1
            if self.on_slow is not None:
                self.on_slow(self.slow_requests)
            if frames is None:
                frames = sys._current_frames()
            frame = frames.get(ident)
            stack = ''.join(traceback.format_stack(frame)) if frame is not None else \
                '  (the thread has no Python frame now)\n'
            logger.warning('slow request: %s %s running for %.1f s (pid %d, thread %d)\n%s',
                           method, uri, now - start, os.getpid(), ident, stack.rstrip('\n'))
