"""The WSGI glue, once for every protocol and mode: the environ, ``start_response`` and
``write``, the result loop with flup's Content-Length rule, ``close()``, and the error pages.

It knows no protocol: a *responder* puts the status, headers and body on the wire
(``send_head(status, headers, data, more)`` and ``send_body(data, more)``, where ``more=True``
says more data follows at once, so the responder may hold the bytes and send them together).
Behaviour matches flup 1.0.3's ``fcgi_base.py:1074-1192`` (copied there three times).

``build_environ``, ``Response`` and ``run_application`` run for every request and have
compiled twins (_cython/gateway.pxi; callers take them from _impl); the checks, their caches,
``FileWrapper`` and the observer stay here, the one copy both twins use.
"""
import errno
import html
import linecache
import re
import sys
import traceback
from urllib.parse import unquote_to_bytes

# flup's error page, byte for byte (fcgi_base.py:1238, scgi_base.py:572, ajp_base.py:979).
ERROR_STATUS = b'500 Internal Server Error'
ERROR_HEADERS = ((b'Content-Type', b'text/html'),)
ERROR_BODY = b"""<!DOCTYPE HTML PUBLIC "-//IETF//DTD HTML 2.0//EN">
<html><head>
<title>Unhandled Exception</title>
</head><body>
<h1>Unhandled Exception</h1>
<p>An unhandled exception was thrown by the application.</p>
</body></html>
"""

# The peer went away: nothing left to answer, and not the app's fault.
_GONE_ERRNOS = frozenset((errno.EPIPE, errno.ECONNRESET, errno.ESHUTDOWN, errno.ENOTCONN))


def is_peer_gone(exc):
    return isinstance(exc, OSError) and exc.errno in _GONE_ERRNOS


def build_environ(environ, overrides, stdin, stderr, multithread, multiprocess, run_once):
    """Add the ``wsgi.*`` keys to the protocol's variables, in place, as flup does.

    ``overrides`` (the constructor's ``environ=``) wins over the request's values.
    """
    if overrides:
        environ.update(overrides)
    environ['wsgi.version'] = (1, 0)
    environ['wsgi.input'] = stdin
    environ['wsgi.errors'] = stderr
    environ['wsgi.multithread'] = multithread
    environ['wsgi.multiprocess'] = multiprocess
    environ['wsgi.run_once'] = run_once
    # flup compares exactly: only 'on' and '1' mean https.
    if environ.get('HTTPS', 'off') in ('on', '1'):
        environ['wsgi.url_scheme'] = 'https'
    else:
        environ['wsgi.url_scheme'] = 'http'
    return environ


def split_request_uri(environ):
    """REQUEST_URI as [path] or [path, query], or None when the server sent none."""
    uri = environ.get('REQUEST_URI')
    if uri is None:
        return None
    return uri.split('?', 1)


def fill_query_string(environ, request_uri):
    """QUERY_STRING from REQUEST_URI when absent or empty (flup fcgi_base.py:1213)."""
    if not environ.get('QUERY_STRING'):
        if request_uri is not None and len(request_uri) > 1:
            environ['QUERY_STRING'] = request_uri[1]
        else:
            environ['QUERY_STRING'] = ''


def derive_path_info(uri_path, script_name):
    """PATH_INFO from the REQUEST_URI path, or None when SCRIPT_NAME is not its prefix.

    flup cuts the raw URI at ``len(SCRIPT_NAME)`` (PATH_INFO stays percent-encoded); we keep
    that whenever the raw path starts with SCRIPT_NAME. nginx's stock fastcgi_params and
    mod_proxy_fcgi send the *decoded* path as SCRIPT_NAME, where flup's cut yields garbage
    (``/a%20b`` with SCRIPT_NAME ``/a b`` gives ``0b``): then the decoded path is cut instead.
    """
    if uri_path.startswith(script_name):
        return uri_path[len(script_name):]
    decoded = unquote_to_bytes(uri_path).decode('latin-1')  # environ values are latin-1
    if decoded.startswith(script_name):
        return decoded[len(script_name):]
    return None


def sanitize_cgi_environ(environ, server_name):
    """flup's FastCGI ``_sanitizeEnv`` (fcgi_base.py:1194-1227), exactly.

    PATH_INFO derived from REQUEST_URI stays percent-encoded, as flup leaves it (apps depend
    on that), except where flup's cut gives garbage (see derive_path_info).
    """
    if 'SCRIPT_NAME' not in environ:
        environ['SCRIPT_NAME'] = ''
    if environ.get('PATH_INFO') and environ.get('QUERY_STRING') is not None \
            and 'REQUEST_METHOD' in environ and 'SERVER_NAME' in environ \
            and 'SERVER_PORT' in environ and 'SERVER_PROTOCOL' in environ:
        # What nginx and Apache send: only an empty QUERY_STRING may need REQUEST_URI's.
        if not environ['QUERY_STRING']:
            fill_query_string(environ, split_request_uri(environ))
        return
    request_uri = split_request_uri(environ)
    if not environ.get('PATH_INFO'):
        if request_uri is not None:
            script_name = environ['SCRIPT_NAME']
            path_info = derive_path_info(request_uri[0], script_name)
            if path_info is None:
                environ['wsgi.errors'].write('WARNING: SCRIPT_NAME does not match REQUEST_URI')
                path_info = request_uri[0][len(script_name):]  # flup's blind cut
            environ['PATH_INFO'] = path_info
        else:
            environ['PATH_INFO'] = ''
    fill_query_string(environ, request_uri)
    for name, default in (('REQUEST_METHOD', 'GET'), ('SERVER_NAME', 'localhost'),
                          ('SERVER_PORT', '80'), ('SERVER_PROTOCOL', 'HTTP/1.0')):
        if name not in environ:
            environ['wsgi.errors'].write('%s: missing FastCGI param %s required by WSGI!\n'
                                         % (server_name, name))
            environ[name] = default


def _to_bytes(value, what):
    if type(value) is str:
        return value.encode('latin-1')  # flup's lenient str acceptance
    if type(value) is not bytes:
        raise AssertionError(what)
    return value


class ResponseHeadError(AssertionError):
    """The app's status or a header would corrupt the response head (known_differences
    'response-head-checked'): raised by ``start_response``, so the request ends as for any app
    exception (logged, 500 page). An AssertionError like flup's own start_response checks."""


# RFC 9110 5.1: a field name is a token, 1*tchar.
_is_token = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+").fullmatch
# RFC 9110 5.5: a field value is VCHAR, SP, HTAB and obs-text (0x80-0xFF, which latin-1 str
# values encode to, as flup sends them). Anything else is a control character: CR and LF end
# the header (response splitting), NUL truncates it in C front ends, the rest have no meaning.
_bad_value_char = re.compile(rb'[\x00-\x08\x0a-\x1f\x7f]').search
# RFC 9110 15: three digits, a space, a reason phrase of HTAB, SP, VCHAR and obs-text.
_is_status = re.compile(rb'[0-9]{3} [\t\x20-\x7e\x80-\xff]*').fullmatch


def _shown(name):
    """A header name as the error names it: repr (no CR/LF reaches the log), at most 80."""
    text = repr(name)
    return text if len(text) <= 80 else text[:77] + '...'


def _bad_name(name):
    return ResponseHeadError('Header name %s is not an HTTP token (RFC 9110 5.1)'
                             % _shown(name))


def _bad_value(name):
    """The error for a value with a control character: it names the header, never shows the
    value (it may be a secret, or an attacker's text)."""
    return ResponseHeadError('Value of header %s contains a control character (CR, LF, NUL'
                             '...; RFC 9110 5.5)' % _shown(name))


# str statuses already validated -> their bytes: apps answer the same few statuses again and
# again. Bounded: an app inventing statuses cannot grow it without limit.
_checked_statuses = {}
_CHECKED_STATUSES_MAX = 64

# (name, value) str pairs already checked -> their bytes: most responses repeat a few fixed
# headers (Content-Type: text/html...), which then cost one lookup instead of two encodes and
# two matches. Only small pairs (a 1 MiB header is checked each time), at most 512 of them
# (an app whose values vary, Set-Cookie or Location, empties it when full): under 2 MiB held.
_checked_pairs = {}
_CHECKED_PAIRS_MAX = 512
_CACHED_PAIR_BYTES = 1024



def _cached_pair(pair):
    """A checked pair from _checked_pairs: only a tuple of two exact str, as cached, is looked
    up. A pair of str subclasses equal to a cached one would otherwise pass or fail by the
    process's history (_check_pair refuses it), and under ``python -b`` bytes compared with
    str on equal hashes warn."""
    if type(pair) is tuple and len(pair) == 2 and type(pair[0]) is str \
            and type(pair[1]) is str:
        return _checked_pairs.get(pair)
    return None

# str header names found to be tokens: apps use a few dozen names, so when a pair's value
# varies its name costs a set lookup, not a match. Never emptied; at most 512 names.
_token_names = set()
_TOKEN_NAMES_MAX = 512


def _check_status(status):
    """flup's status asserts (fcgi_base.py:1160-1166), then the status line's grammar;
    returns the status as bytes."""
    text = status if type(status) is str else None
    if text is not None:
        status = text.encode('latin-1')
    else:
        status = _to_bytes(status, 'Status must be a string')
    if len(status) < 4:
        raise AssertionError('Status must be at least 4 characters')
    try:
        code = int(status[:3])
    except ValueError:
        raise AssertionError('Status must begin with 3-digit code') from None
    if not code:
        raise AssertionError('Status must begin with 3-digit code')
    if status[3] != 0x20:
        raise AssertionError('Status must have a space after code')
    if not _is_status(status):
        raise ResponseHeadError('Status must be 3 digits, a space and a reason phrase without '
                                'control characters (RFC 9110 15)')
    if text is not None and len(_checked_statuses) < _CHECKED_STATUSES_MAX:
        _checked_statuses[text] = status
    return status


def _check_pair(pair):
    """One (name, value) of the app's header list as (bytes, bytes): flup's type asserts,
    then the name a token and the value free of control characters (ResponseHeadError).
    A small str pair is remembered in _checked_pairs."""
    name, value = pair
    # str is the WSGI norm: encoded inline; anything else through _to_bytes' checks.
    name_str = type(name) is str
    if name_str:
        known = name in _token_names
        name = name.encode('latin-1')
    else:
        known = False
        if type(name) is not bytes:
            raise AssertionError('Header name "%s" must be bytes' % (name,))
    if not known:
        if not _is_token(name):
            raise _bad_name(name)
        if name_str and len(_token_names) < _TOKEN_NAMES_MAX:
            _token_names.add(name.decode('latin-1'))
    value_str = type(value) is str
    if value_str:
        # isprintable() is False for every control character (and for HTAB and some of
        # obs-text, which the match then lets through): the match only runs for those.
        printable = value.isprintable()
        value = value.encode('latin-1')
    else:
        printable = False
        if type(value) is not bytes:
            raise AssertionError('Value of header "%s" must be bytes' % (name,))
    if not printable and _bad_value_char(value):
        raise _bad_value(name)
    checked = (name, value)
    if name_str and value_str and type(pair) is tuple and \
            len(name) + len(value) <= _CACHED_PAIR_BYTES:
        if len(_checked_pairs) >= _CHECKED_PAIRS_MAX:
            _checked_pairs.clear()
        _checked_pairs[pair] = checked
    return checked


class Response:
    """``start_response`` and ``write`` for one request, over a responder.

    The checks are flup's asserts with its messages, raised even under ``python -O``.
    """

    __slots__ = ('responder', 'status', 'headers', 'headers_sent', 'result', 'sent')

    def __init__(self, responder):
        self.responder = responder
        self.status = None
        self.headers = None
        self.headers_sent = False
        self.sent = 0  # body bytes handed to the responder (None: a responder sent them uncounted)
        self.result = None

    def start_response(self, status, response_headers, exc_info=None):
        if exc_info:
            try:
                if self.headers_sent:
                    raise exc_info[1].with_traceback(exc_info[2])
            finally:
                exc_info = None  # no reference cycle through the frame
        elif self.status is not None:
            raise AssertionError('Headers already set!')
        checked = _checked_statuses.get(status) if type(status) is str else None
        status = checked if checked is not None else _check_status(status)
        if type(response_headers) is not list:
            raise AssertionError('Headers must be a list')
        headers = []
        for pair in response_headers:
            try:
                checked = _cached_pair(pair)
            except TypeError:  # a list [name, value]: unhashable, checked every time
                checked = None
            if checked is None:
                checked = _check_pair(pair)
            headers.append(checked)
        self.status = status
        self.headers = headers
        return self.write

    def write(self, data):
        """The WSGI ``write`` callable: sends at once."""
        self.send(data, False)

    def send(self, data, more):
        if type(data) is not bytes:
            data = _to_bytes(data, 'write() argument must be bytes')
        if self.headers_sent:
            if data:
                self.sent += len(data)
                self.responder.send_body(data, more)
            return
        if self.status is None:
            raise AssertionError('write() before start_response()')
        headers = self.headers
        result = self.result
        if result is not None and (len(result) == 1 if type(result) is list
                                   else _has_one_item(result)):
            # flup adds Content-Length only for a one-item result (fcgi_base.py:1121).
            for name, _ in headers:
                if name.lower() == b'content-length':
                    break
            else:
                headers.append((b'Content-Length', str(len(data)).encode('latin-1')))
        self.headers_sent = True
        self.sent = len(data)
        self.responder.send_head(self.status, headers, data, more)


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


def _has_one_item(result):
    try:
        return len(result) == 1
    except TypeError:
        return False


class FileWrapper:
    """``wsgi.file_wrapper`` (PEP 3333): iterates a file in ``blksize`` blocks; a responder
    that can hand a regular file to the kernel (``send_file``: ``os.sendfile`` on SCGI's raw
    socket) sends it that way instead, without the file passing through Python."""

    def __init__(self, filelike, blksize=8192):
        self.filelike = filelike
        self.blksize = blksize
        if hasattr(filelike, 'close'):
            self.close = filelike.close

    def __iter__(self):
        return self

    def __next__(self):
        data = self.filelike.read(self.blksize)
        if data:
            return data
        raise StopIteration


# What watches every request of this process (the access and slow logs: flupfast.ops), or
# None: then a request costs one global read more than without the feature.
_observer = None


def set_observer(observer):
    """Watch every request of this process: ``observer.begin(environ)`` returns a token before
    the app is called, ``observer.end(token, response, failed)`` runs once the request is over
    (``response`` has ``status``, ``headers``, ``headers_sent`` and ``sent``; ``failed`` is
    true when the app raised). None stops watching."""
    global _observer
    _observer = observer


def get_observer():
    """The observer set_observer installed, or None."""
    return _observer


def run_application(application, environ, responder, app_lock=None):
    """Call the app and send its result through ``responder``; ``close()`` always called.

    A list or tuple result is complete in memory, so its chunks are coalesced (``more=True``)
    and leave with the end of the request; any other iterable may stream, so each chunk leaves
    at once. EPIPE and ECONNRESET (the web server went away) end the request quietly and are
    reported by the return value: False when the peer was gone, True otherwise.

    The observer's two calls are here, around the app's part (``_respond``); a request
    without the app lock runs no other frame.
    """
    response = Response(responder)
    observer = _observer
    token = None if observer is None else observer.begin(environ)
    done = None  # None until the app's part ended without an exception
    try:
        if app_lock is None:
            done = _respond(application, environ, response, responder)
        else:
            # Held by `with`, never acquire-then-try: the request timeout raises as soon as a
            # call returns, and after acquire() that left the lock held for good.
            with app_lock:
                done = _respond(application, environ, response, responder)
    finally:
        if observer is not None:
            # The request timeout's exception, sent while a send ran in C past the bound,
            # lands at the first Python call after it: this end's first line. The end is
            # called once more, then the exception goes on (the timeout fires once; an end cut
            # short at its first line did nothing, and Observers goes on where it stopped).
            try:
                observer.end(token, response, done is None)
            except BaseException:
                observer.end(token, response, done is None)
                raise
    return done


def _respond(application, environ, response, responder):
    """Call the app, send its result; True, or False when the peer was gone."""
    try:
        result = application(environ, response.start_response)
        try:
            response.result = result
            more = type(result) in (list, tuple)
            if not (type(result) is FileWrapper and hasattr(responder, 'send_file')
                    and response.send_file(result.filelike)):
                for data in result:
                    if data:
                        response.send(data, more)
                if not response.headers_sent:
                    response.send(b'', more)  # the body was empty: headers only
        finally:
            if hasattr(result, 'close'):
                result.close()
        return True
    except OSError as exc:
        if not is_peer_gone(exc):
            raise
        return False


def error_page(debug, exc_info=None):
    """The body of the 500 page: flup's fixed page, or with ``debug`` a traceback page.

    flup renders the debug page with ``cgitb``, which Python 3.13 removed (the request then
    dies with no answer); ours needs nothing outside the standard library's core.
    """
    if not debug:
        return ERROR_BODY
    return render_traceback_html(exc_info or sys.exc_info())


def render_traceback_html(exc_info):
    """An HTML page with the exception and, per frame, the source line and the locals."""
    etype, value, tb = exc_info
    esc = html.escape
    title = esc('%s: %s' % (getattr(etype, '__name__', etype), value))
    parts = ['<!DOCTYPE html>\n<html><head><title>', title, '</title></head><body>\n',
             '<h1>', title, '</h1>\n', '<p>Python %s</p>\n' % esc(sys.version.split()[0])]
    for frame, lineno in traceback.walk_tb(tb):
        code = frame.f_code
        parts.append('<h3>%s, line %d, in %s</h3>\n'
                     % (esc(code.co_filename), lineno, esc(code.co_name)))
        source = linecache.getline(code.co_filename, lineno, frame.f_globals).strip()
        if source:
            parts.append('<pre>%s</pre>\n' % esc(source))
        if frame.f_locals:
            parts.append('<table>\n')
            for name, local in sorted(frame.f_locals.items()):
                try:
                    shown = repr(local)
                except Exception as exc:  # a broken __repr__ must not hide the real error
                    shown = '<unrepresentable: %s>' % type(exc).__name__
                if len(shown) > 500:
                    shown = shown[:500] + '...'
                parts.append('<tr><td>%s</td><td><code>%s</code></td></tr>\n'
                             % (esc(name), esc(shown)))
            parts.append('</table>\n')
    parts.append('<pre>%s</pre>\n</body></html>\n'
                 % esc(''.join(traceback.format_exception(etype, value, tb))))
    return ''.join(parts).encode('latin-1', 'xmlcharrefreplace')
