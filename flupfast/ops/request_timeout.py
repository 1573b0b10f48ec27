"""The request timeout (PHP-FPM's ``request_terminate_timeout``): a request still running
after ``seconds`` has its stack logged (the slow log's report) and is ended. How it ends is the
caller's: by default RequestTerminated raises in its thread; a prefork child passes
``end_process``, which ends the whole process (flupfast.serving.prefork.child).
"""
import logging
import threading

from flupfast.deadline import Interruption, RequestTerminated, install_wake_handler
from flupfast.ops.access_log import flush_all
from flupfast.ops.request_watch import RequestWatch

__all__ = ['RequestTimeout']

logger = logging.getLogger('flupfast.requesttimeout')


class RequestTimeout(RequestWatch):
    """A request observer (flupfast.gateway.set_observer). ``terminated_requests`` counts the
    requests this process ended (a prefork parent counts its children ended this way)."""

    def __init__(self, seconds, end_process=None):
        super().__init__(seconds)
        self.end_process = end_process
        self.terminated_requests = 0
        self._interruptions = {}  # token -> Interruption, when requests end by an exception

    def _start_watcher(self):
        if self.end_process is None and threading.current_thread() is threading.main_thread():
            install_wake_handler()  # the single mode: its requests run in the main thread
        super()._start_watcher()

    def begin(self, environ):
        token = super().begin(environ)
        if self.end_process is None:
            self._interruptions[token] = Interruption(threading.get_ident())
        return token

    def end(self, token, response, failed):
        super().end(token, response, failed)
        interruption = self._interruptions.pop(token, None)
        if interruption is not None:
            # It may have overrun as it ended: nothing may raise in the thread's next request.
            interruption.end()

    def overran(self, token, entry, frame, now):
        with self._lock:  # the watcher's: one report and count at a time
            if token not in self._in_flight:
                return
            self.terminated_requests += 1
            logger.error('%s', self.describe('request timeout, ending it', entry, frame, now))
            if self.end_process is not None:
                flush_all()  # the process ends without its atexit handlers
                if token not in self._in_flight:
                    # It ended while the stack was written: the child may be in its next
                    # request already, which is not to be ended with it.
                    return
                self.end_process()
            else:
                interruption = self._interruptions.get(token)
                if interruption is not None:  # None: it has just ended
                    interruption.fire(RequestTerminated)
