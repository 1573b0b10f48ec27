# The WSGI gateway's per-request part, compiled: the twin of flupfast/gateway.py's
# build_environ, Response and run_application (same names, signatures, attributes, results and
# errors, and the same calls to the app, the responder and the observer, in the same order).
# The rules themselves stay in gateway.py, once: the status and header checks with their
# caches, _to_bytes, FileWrapper, is_peer_gone and the observer are the pure module's own
# objects, used from here. What this
# saves is the interpreter: the Python frames of the environ's wsgi.* keys, start_response,
# send and the result loop ran for every request of every protocol (bench/gateway_cost.py).

from flupfast import gateway as _gateway

cdef dict _gw_checked_statuses = _gateway._checked_statuses
cdef object _gw_check_status = _gateway._check_status
cdef dict _gw_checked_pairs = _gateway._checked_pairs
cdef object _gw_check_pair = _gateway._check_pair
cdef object _gw_to_bytes = _gateway._to_bytes
cdef object _gw_FileWrapper = _gateway.FileWrapper
cdef object _gw_is_peer_gone = _gateway.is_peer_gone
cdef dict _gw_globals = vars(_gateway)  # its _observer, read per request as the pure twin does
cdef object _gw_sanitize_cgi_environ = _gateway.sanitize_cgi_environ


def build_environ(environ, overrides, stdin, stderr, multithread, multiprocess, run_once):
    """Add the ``wsgi.*`` keys to the protocol's variables, in place, as flup does
    (``overrides`` win over the request's values)."""
    return _build_environ(environ, overrides, stdin, stderr, multithread, multiprocess,
                          run_once)


cdef object _build_environ(environ, overrides, stdin, stderr, multithread, multiprocess,
                           run_once):
    if overrides:
        environ.update(overrides)
    environ['wsgi.version'] = (1, 0)
    environ['wsgi.input'] = stdin
    environ['wsgi.errors'] = stderr
    environ['wsgi.multithread'] = multithread
    environ['wsgi.multiprocess'] = multiprocess
    environ['wsgi.run_once'] = run_once
    # A dict (the codecs'): the lookup in C, not a method call.
    https = (<dict>environ).get('HTTPS', 'off') if type(environ) is dict \
        else environ.get('HTTPS', 'off')
    # flup compares exactly: only 'on' and '1' mean https.
    environ['wsgi.url_scheme'] = 'https' if https == 'on' or https == '1' else 'http'
    return environ


def sanitize_cgi_environ(environ, server_name):
    """flup's FastCGI ``_sanitizeEnv``: what nginx and Apache send (PATH_INFO, every
    variable WSGI requires) here, with at most QUERY_STRING taken from REQUEST_URI; anything
    else by the pure twin, whose rules these are."""
    if not _sanitize_cgi_fast(environ):
        return _gw_sanitize_cgi_environ(environ, server_name)


cdef bint _sanitize_cgi_fast(environ) except -1:
    """sanitize_cgi_environ where it changes at most QUERY_STRING; False, with the environ
    untouched, for the pure twin to do the rest."""
    cdef object query
    if type(environ) is not dict:
        return False
    cdef dict variables = <dict>environ
    if 'SCRIPT_NAME' not in variables or not variables.get('PATH_INFO') \
            or 'REQUEST_METHOD' not in variables or 'SERVER_NAME' not in variables \
            or 'SERVER_PORT' not in variables or 'SERVER_PROTOCOL' not in variables:
        return False
    query = variables.get('QUERY_STRING')
    if query is None:
        return False
    if not query:
        _query_from_request_uri(<dict>environ)
    return True


cdef int _query_from_request_uri(dict environ) except -1:
    """gateway.fill_query_string for an empty or absent QUERY_STRING: REQUEST_URI's query,
    or '' (FastCGI's and SCGI's sanitize alike)."""
    uri = environ.get('REQUEST_URI')
    if uri is None or (type(uri) is str and '?' not in <str>uri):
        query = environ.get('QUERY_STRING')
        if not (type(query) is str and PyUnicode_GET_LENGTH(query) == 0):
            environ['QUERY_STRING'] = ''  # no query (split's answer, without its list)
    else:
        parts = uri.split('?', 1)
        environ['QUERY_STRING'] = parts[1] if len(parts) > 1 else ''
    return 0


cdef bytes _decimal(Py_ssize_t n):
    """``b'%d' % n`` for n >= 0, without a format string to parse (PyBytes_FromFormat's cost
    was a tenth of the response's)."""
    cdef char digits[24]
    cdef Py_ssize_t at = 24
    while True:
        at -= 1
        digits[at] = <char>(0x30 + n % 10)
        n //= 10
        if n == 0:
            return PyBytes_FromStringAndSize(digits + at, 24 - at)


cdef inline bint _one_item(result) except -1:
    """flup adds Content-Length only for a one-item result (fcgi_base.py:1121); an iterable
    without len() has no known count."""
    if type(result) is list:
        return len(<list>result) == 1
    try:
        return len(result) == 1
    except TypeError:
        return False


@cython.freelist(8)
cdef class Response:
    """``start_response`` and ``write`` for one request, over a responder (see the pure twin)."""

    cdef public object responder
    cdef public object status
    cdef public object headers
    cdef public bint headers_sent
    cdef public object result
    cdef public object sent

    def __init__(self, responder):
        self.responder = responder
        self.status = None
        self.headers = None
        self.headers_sent = False
        self.sent = 0
        self.result = None

    def start_response(self, status, response_headers, exc_info=None):
        cdef list headers
        if exc_info:
            try:
                if self.headers_sent:
                    raise exc_info[1].with_traceback(exc_info[2])
            finally:
                exc_info = None  # no reference cycle through the frame
        elif self.status is not None:
            raise AssertionError('Headers already set!')
        checked = _gw_checked_statuses.get(status) if type(status) is str else None
        status = checked if checked is not None else _gw_check_status(status)
        if type(response_headers) is not list:
            raise AssertionError('Headers must be a list')
        headers = []
        for pair in response_headers:
            # gateway._cached_pair: only a tuple of two exact str is looked up
            checked = None
            if type(pair) is tuple and PyTuple_GET_SIZE(pair) == 2 \
                    and type(<object>PyTuple_GET_ITEM(pair, 0)) is str \
                    and type(<object>PyTuple_GET_ITEM(pair, 1)) is str:
                checked = _gw_checked_pairs.get(pair)
            if checked is None:
                checked = _gw_check_pair(pair)
            headers.append(checked)
        self.status = status
        self.headers = headers
        return self.write

    def write(self, data):
        """The WSGI ``write`` callable: sends at once."""
        self._send(data, False)

    def send(self, data, more):
        self._send(data, more)

    cdef _send(self, data, more):
        cdef list headers
        if type(data) is not bytes:
            data = _gw_to_bytes(data, 'write() argument must be bytes')
        responder = self.responder
        cdef bint direct = isinstance(responder, PartsWriter) and (<PartsWriter>responder)._direct
        if self.headers_sent:
            if data:
                self.sent += len(<bytes>data)
                if direct:
                    (<PartsWriter>responder)._write_parts((data,), more)
                else:
                    responder.send_body(data, more)
            return
        if self.status is None:
            raise AssertionError('write() before start_response()')
        headers = self.headers
        result = self.result
        if result is not None and _one_item(result):
            for name, _ in headers:
                # Length first: lower() is a method call per header, and few are 14 long.
                if len(name) == 14 and name.lower() == b'content-length':
                    break
            else:
                headers.append((b'Content-Length', _decimal(PyBytes_GET_SIZE(data))))
        self.headers_sent = True
        self.sent = len(<bytes>data)
        if direct:
            (<PartsWriter>responder)._write_parts(
                (<PartsWriter>responder)._head_parts(self.status, headers, data), more)
        else:
            responder.send_head(self.status, headers, data, more)

    def send_file(self, filelike):
        """Send the headers, then the rest of ``filelike`` through the responder's
        ``send_file``; False (nothing sent) when the responder cannot take this file."""
        if self.status is None:
            raise AssertionError('write() before start_response()')
        if not self.responder.can_send_file(filelike):
            return False
        if not self.headers_sent:
            self.headers_sent = True
            self.responder.send_head(self.status, self.headers, b'', False)
        self.sent = None  # until the responder says how many bytes went
        self.sent = self.responder.send_file(filelike)
        return True


def run_application(application, environ, responder, app_lock=None):
    """Call the app and send its result through ``responder``; ``close()`` always called.
    True when done, False when the peer was gone (see the pure twin)."""
    return _run_application(application, environ, responder, app_lock)


cdef object _run_application(application, environ, responder, app_lock):
    cdef Response response = Response.__new__(Response)
    cdef bint more
    response.responder = responder
    response.sent = 0
    observer = _gw_globals['_observer']
    token = None if observer is None else _observer_begin(observer, environ)
    done = None  # None until the app's part ended without an exception
    # acquire() then try is safe here, unlike in Python: the request timeout's exception
    # surfaces only where this code calls Python, and the lock's acquire is C.
    if app_lock is not None:
        app_lock.acquire()
    try:
        try:
            result = application(environ, response.start_response)
            try:
                response.result = result
                more = type(result) is list or type(result) is tuple
                if not (type(result) is _gw_FileWrapper and hasattr(responder, 'send_file')
                        and response.send_file(result.filelike)):
                    for data in result:
                        if data:
                            response._send(data, more)
                    if not response.headers_sent:
                        response._send(b'', more)  # the body was empty: headers only
            finally:
                # A plain list (most apps' result) has no close: no attribute lookup for it.
                if type(result) is not list and hasattr(result, 'close'):
                    result.close()
            done = True
        except OSError as exc:
            if not _gw_is_peer_gone(exc):
                raise
            done = False
    finally:
        if app_lock is not None:
            app_lock.release()
        if observer is not None:
            _observer_end(observer, token, response, done is None)
    return done
