"""The app's own time per request, measured in-process with no server (seed 002's
"Baseline"), and what a gateway adds: the mean time per request through it minus that ("Adj
Mean")."""
import io
import time
from wsgiref.util import setup_testing_defaults


def _environ(path):
    env = {"PATH_INFO": path, "REQUEST_METHOD": "GET", "wsgi.input": io.BytesIO(b"")}
    setup_testing_defaults(env)
    return env


def app_mean_ms(app, path="/", requests=1000):
    """Mean wall time (ms) of ``requests`` calls of the WSGI ``app`` on GET ``path``, the
    response iterated and closed, as a server would; the first call (imports, caches) is not
    counted."""
    def one():
        out = app(_environ(path), lambda status, headers, exc_info=None: None)
        try:
            for _ in out:
                pass
        finally:
            getattr(out, "close", lambda: None)()

    one()
    t0 = time.perf_counter()
    for _ in range(requests):
        one()
    return (time.perf_counter() - t0) * 1000.0 / requests


def adj_mean(mean_ms, baseline_ms):
    """What the gateway adds per request (ms): the mean through it minus the app's own time;
    None when either is unknown. Never below zero (a mean under the baseline is noise)."""
    if mean_ms is None or baseline_ms is None:
        return None
    return max(0.0, mean_ms - baseline_ms)
