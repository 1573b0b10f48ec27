"""Operations beside the modes: the ping path, the access log, the slow log and the request
timeout. Each is off unless asked for and costs nothing then; ``install`` turns on what the
command line (or a library user) asks for, ``set_request_timeout`` what a server's
``requestTimeout`` asks for.

They watch requests through one point each: the ping answers before the app (a WSGI wrapper),
the logs through the gateway's request observer (flupfast.gateway.set_observer). Nothing here
knows a protocol or a mode.
"""
from flupfast import gateway
from flupfast.ops import access_log, proctitle
from flupfast.ops.access_log import DEFAULT_FORMAT, AccessLog
from flupfast.ops.ping import Ping
from flupfast.ops.request_timeout import RequestTimeout
from flupfast.ops.slow_log import SlowLog

__all__ = ['DEFAULT_FORMAT', 'AccessLog', 'Observers', 'Ping', 'RequestTimeout', 'SlowLog',
           'become_worker', 'flush', 'install', 'on_duty', 'proctitle', 'put_on_duty',
           'request_counts', 'set_request_timeout']

_active = {}  # 'access', 'slow', 'status', 'timeout', 'title' -> the observer on duty
# The order they watch in: the timeout's end() first, so a request that ended is no longer one
# to end while the logs write.
_ORDER = ('timeout', 'title', 'slow', 'status', 'access')


class Observers:
    """Several request observers as one (the gateway calls one). An end cut short (the
    request timeout's exception lands at the first Python call after a send that outlived
    it: this one) goes on where it stopped when the gateway calls it again: each observer
    ends once."""

    def __init__(self, observers):
        self.observers = tuple(observers)

    def begin(self, environ):
        # The first item counts the observers ended so far.
        return [0] + [observer.begin(environ) for observer in self.observers]

    def end(self, tokens, response, failed):
        observers = self.observers
        while tokens[0] < len(observers):
            index = tokens[0]
            tokens[0] = index + 1  # taken before the call: a second end goes on with the next
            observers[index].end(tokens[index + 1], response, failed)


def install(app, ping_path=None, ping_response='pong', access_log=None,
            access_log_format=DEFAULT_FORMAT, slow_log=None):
    """Turn on the features asked for; returns the app to serve (wrapped for the ping)."""
    put_on_duty('access', None if access_log is None else AccessLog(access_log, access_log_format))
    put_on_duty('slow', None if slow_log is None else SlowLog(slow_log))
    if ping_path is not None:
        app = Ping(app, ping_path, ping_response)
    return app


def set_request_timeout(seconds, end_process=None):
    """End requests running ``seconds`` or more (None or 0: never): RequestTimeout, for the
    whole process, as the logs are."""
    put_on_duty('timeout', RequestTimeout(seconds, end_process) if seconds else None)


def become_worker(number):
    """In a new prefork child: the ``worker N`` process title, kept current per request, when
    titles are on (ops/proctitle.py); SIGTERM and SIGQUIT write the access log's kept lines
    before they end the child."""
    put_on_duty('title', proctitle.become_worker(number))
    access_log.flush_on_signals()


def flush():
    """Write what the access log keeps (before an exec or an ``os._exit``; a normal exit does
    it by itself)."""
    access_log.flush_all()


def request_counts():
    """This process's counts of the requests the slow log reported (``slow_requests``) and the
    request timeout ended (``terminated_requests``): PHP-FPM's "slow requests" and what it logs
    as terminated. A prefork parent counts its children ended by the timeout itself
    (``PreforkMode.terminated_requests``), since they take their counts with them."""
    slow, timeout = _active.get('slow'), _active.get('timeout')
    return {'slow_requests': slow.slow_requests if slow else 0,
            'terminated_requests': timeout.terminated_requests if timeout else 0}


def on_duty(feature):
    """The observer on duty for ``feature`` (see ``_active``), or None."""
    return _active.get(feature)


def put_on_duty(feature, observer):
    """Put ``observer`` on duty for ``feature`` (None: take it off); the gateway's one observer
    is rebuilt from all on duty, so turning on one feature never drops another."""
    if observer is None:
        _active.pop(feature, None)
    else:
        _active[feature] = observer
    observers = [_active[name] for name in _ORDER if name in _active]
    gateway.set_observer(None if not observers else
                         observers[0] if len(observers) == 1 else Observers(observers))
