"""The slow log (PHP-FPM's ``request_slowlog_timeout``): a request still running after
``seconds`` gets its Python stack logged once (method, URI, pid, thread, then the frames), so
an operator sees where it waits without a debugger. The watching is ops/request_watch.py's.
"""
import logging

from flupfast.ops.request_watch import RequestWatch

__all__ = ['SlowLog']

logger = logging.getLogger('flupfast.slowlog')


class SlowLog(RequestWatch):
    """A request observer (flupfast.gateway.set_observer)."""

    def __init__(self, seconds):
        super().__init__(seconds)
        self.slow_requests = 0       # PHP-FPM's "slow requests": logged so far in this process
        self.on_slow = None          # called with slow_requests when it grows (the status page)

    def overran(self, token, entry, frame, now):
        self.slow_requests += 1
        if self.on_slow is not None:
            self.on_slow(self.slow_requests)
        logger.warning('%s', self.describe('slow request', entry, frame, now))
