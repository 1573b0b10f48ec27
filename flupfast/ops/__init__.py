"""Operations beside the modes: the ping path, the access log and the slow log. Each is off
unless asked for and costs nothing then; ``install`` turns on what the command line (or a
library user) asks for.

They watch requests through one point each: the ping answers before the app (a WSGI wrapper),
the logs through the gateway's request observer (flupfast.gateway.set_observer). Nothing here
knows a protocol or a mode.
"""
from flupfast import gateway
from flupfast.ops.access_log import DEFAULT_FORMAT, AccessLog
from flupfast.ops.ping import Ping
from flupfast.ops.slow_log import SlowLog

__all__ = ['DEFAULT_FORMAT', 'AccessLog', 'Observers', 'Ping', 'SlowLog', 'install']


class Observers:
    """Several request observers as one (the gateway calls one)."""

    def __init__(self, observers):
        self.observers = tuple(observers)

    def begin(self, environ):
        return tuple(observer.begin(environ) for observer in self.observers)

    def end(self, tokens, response, failed):
        for observer, token in zip(self.observers, tokens):
            observer.end(token, response, failed)


def install(app, ping_path=None, ping_response='pong', access_log=None,
            access_log_format=DEFAULT_FORMAT, slow_log=None):
    """Turn on the features asked for; returns the app to serve (wrapped for the ping)."""
    observers = []
    if access_log is not None:
        observers.append(AccessLog(access_log, access_log_format))
    if slow_log is not None:
        observers.append(SlowLog(slow_log))
    gateway.set_observer(None if not observers else
                         observers[0] if len(observers) == 1 else Observers(observers))
    if ping_path is not None:
        app = Ping(app, ping_path, ping_response)
    return app
