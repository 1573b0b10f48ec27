"""flup's ``cgi``: ``WSGIServer(application).run()`` serves the one plain-CGI request of this
process (the environment and stdin in, the response on stdout), bytes-correct on Python 3.

Only assembly: the environ, ``start_response`` and the result loop are gateway.py's, the
``Status:`` header block output.py's, stdin and stdout the FastCGI CGI fallback's.
"""
import sys
import traceback

from flupfast import _impl, gateway
from flupfast.output import build_cgi_head
from flupfast.cgi_fallback import CGIOutput as StdoutWrapper, cgi_params, cgi_stdin

__all__ = ['WSGIServer']


class WSGIServer(object):
    """A plain CGI gateway for a WSGI app (flup's ``cgi.WSGIServer``, PEP 333's sample, which
    writes str to ``sys.stdout`` and so cannot send a bytes body on Python 3)."""

    def __init__(self, application):
        self.application = application

    def run(self):
        """Serve the request described by the process environment and stdin; the response
        goes to stdout as ``Status:``, headers, blank line, body. An exception from the app is
        printed to stderr and answered with flup's 500 page when nothing was sent yet."""
        stdout = StdoutWrapper(sys.stdout)
        sys.stdout.flush()  # anything printed before run() precedes the response
        environ = _impl.build_environ(cgi_params(), None, cgi_stdin(), sys.stderr,
                                      multithread=False, multiprocess=True, run_once=True)
        try:
            _impl.run_application(self.application, environ, stdout)
        except Exception:
            traceback.print_exc(file=sys.stderr)
            sys.stderr.flush()
            if not stdout.dataWritten:
                stdout.write(build_cgi_head(gateway.ERROR_STATUS, gateway.ERROR_HEADERS)
                             + gateway.ERROR_BODY)
