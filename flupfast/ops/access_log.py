"""The access log: one line per request, in gunicorn's ``access_log_format`` language, written
with one ``write`` to a file opened O_APPEND (so lines from prefork children never interleave)
or to stderr (``-``).

A log file renamed or removed by logrotate is noticed within a second (its inode changes) and
opened again; no signal is needed, so SIGUSR1 keeps flup's meaning (replace the children).
The format is compiled once: a request computes only the fields the format names.
"""
import os
import re
import time

__all__ = ['ATOMS', 'DEFAULT_FORMAT', 'AccessLog', 'compile_format']

# gunicorn's default: the Apache/nginx "combined" log format.
DEFAULT_FORMAT = '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"'

# A log file is checked for rotation at most this often (seconds).
REOPEN_CHECK_INTERVAL = 1.0

_FIELD = re.compile(r'%\(([^)]*)\)s')
_MONTHS = ('Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec')


def _request_path(environ):
    uri = environ.get('REQUEST_URI')
    if uri is not None:
        return uri.split('?', 1)[0]
    return environ.get('SCRIPT_NAME', '') + environ.get('PATH_INFO', '')


def _request_uri(environ):
    """The request line's URI when REQUEST_URI is missing or empty (empty stays empty)."""
    uri = environ.get('REQUEST_URI')
    if uri is not None:
        return uri
    uri = environ.get('SCRIPT_NAME', '') + environ.get('PATH_INFO', '')
    if environ.get('QUERY_STRING'):
        uri += '?' + environ['QUERY_STRING']
    return uri


_status_text = {}  # b'200 OK' -> '200'


def _status(response, failed):
    if failed and not response.headers_sent:
        return '500'  # the gateway answers the error page
    status = response.status
    if status is None:
        return '-'
    text = _status_text.get(status)
    if text is None:
        text = status[:3].decode('latin-1')
        if len(_status_text) < 64:
            _status_text[status] = text
    return text


def _response_header(response, wanted):
    for key, value in response.headers or ():
        if key.lower() == wanted:
            return value.decode('latin-1')
    return '-'


def _request_header_key(name):
    key = name.upper().replace('-', '_')
    return key if key in ('CONTENT_TYPE', 'CONTENT_LENGTH') else 'HTTP_' + key


# The [10/Oct/2000:13:55:36 +0000] of the second being logged: [from, until, text]. A request
# in the same second pays two float comparisons, not a call.
_clf_cache = [0.0, 0.0, '']


def _clf_time(now):
    """[10/Oct/2000:13:55:36 +0000], the request's start in local time, once per second."""
    second = int(now)
    local = time.localtime(second)
    offset = local.tm_gmtoff
    sign = '-' if offset < 0 else '+'
    offset = abs(offset) // 60
    _clf_cache[:] = [float(second), float(second + 1), '[%02d/%s/%d:%02d:%02d:%02d %s%02d%02d]' % (
        local.tm_mday, _MONTHS[local.tm_mon - 1], local.tm_year, local.tm_hour,
        local.tm_min, local.tm_sec, sign, offset // 60, offset % 60)]
    return _clf_cache[2]


# gunicorn's atoms (docs "access_log_format"), each one or more Python expressions (joined in
# the template by the text between them) over e (environ), r (the gateway's Response), f (the
# app failed) and s (start, wall clock); d is the duration in seconds. A str is a constant,
# folded into the template. compile_format joins the ones a format names into one function:
# a request pays for the fields it logs, inline, with no call per field in the common case.
ATOMS = {
    'h': ("e.get('REMOTE_ADDR') or '-'",),
    'l': '-',
    'u': ("e.get('REMOTE_USER') or '-'",),
    't': ("_clf[2] if _clf[0] <= s < _clf[1] else _clf_time(s)",),
    'r': ("e.get('REQUEST_METHOD', '-')", ' ', "e.get('REQUEST_URI') or _request_uri(e)", ' ',
          "e.get('SERVER_PROTOCOL', '-')"),
    'm': ("e.get('REQUEST_METHOD', '-')",),
    'U': ('_request_path(e)',),
    'q': ("e.get('QUERY_STRING', '')",),
    'H': ("e.get('SERVER_PROTOCOL', '-')",),
    's': ('_status(r, f) if f else _status_text.get(r.status) or _status(r, f)',),
    'B': ("'-' if r.sent is None else r.sent",),
    'b': ("r.sent or '-'",),
    'f': ("e.get('HTTP_REFERER') or '-'",),
    'a': ("e.get('HTTP_USER_AGENT') or '-'",),
    'T': ('int(d)',),
    'M': ('int(d * 1000)',),
    'D': ('int(d * 1000000)',),
    'L': ("'%.6f' % d",),
    'p': ("'<%d>' % _getpid()",),
}

_NAMESPACE = {'_clf': _clf_cache, '_clf_time': _clf_time, '_request_uri': _request_uri,
              '_request_path': _request_path, '_status': _status, '_status_text': _status_text,
              '_response_header': _response_header, '_getpid': os.getpid, '_time': time.time}


def compile_format(fmt):
    """One function ``(e, r, f, s) -> line`` (bytes, newline included) for the format.
    Unknown atoms give '-', as gunicorn's do; ``{name}i``, ``{name}o`` and ``{name}e`` are a
    request header, a response header and an environ variable (their names go in as string
    literals). The duration is taken only if the format shows it."""
    exprs = []

    def field(match):
        name = match.group(1)
        special = re.fullmatch(r'\{([^}]*)\}([ioe])', name)
        if special:
            header, kind = special.groups()
            if kind == 'i':
                pieces = ("e.get(%r) or '-'" % _request_header_key(header),)
            elif kind == 'o':
                pieces = ('_response_header(r, %r)' % header.lower().encode('latin-1'),)
            else:
                pieces = ("str(e.get(%r, '-'))" % header,)
        else:
            pieces = ATOMS.get(name, '-')
        if isinstance(pieces, str):
            return pieces.replace('%', '\0')  # a constant: text of the template
        out = []
        for i, piece in enumerate(pieces):
            if i % 2:
                out.append(piece)  # the text between two expressions
            else:
                exprs.append(piece)
                out.append('\1')
        return ''.join(out)
    # An f-string over locals: no argument tuple, no format parsing per request. Fields
    # become \1 (then {vN}), a literal %% a '%', and the text's braces are doubled.
    text = _FIELD.sub(field, fmt.replace('%%', '\0')).replace('{', '{{').replace('}', '}}')
    pieces = text.replace('\0', '%').split('\1')
    template = pieces[0] + ''.join('{v%d}%s' % (i, piece) for i, piece in enumerate(pieces[1:]))
    source = 'def format_line(e, r, f, s):\n'
    if any(re.search(r'\bd\b', expr) for expr in exprs):
        source += '    d = _time() - s\n'  # the duration, only where the format shows it
    for i, expr in enumerate(exprs):
        source += '    v%d = %s\n' % (i, expr)
    source += "    return f%r.encode('latin-1', 'backslashreplace')\n" % (template + '\n')
    namespace = dict(_NAMESPACE)
    exec(source, namespace)  # the expressions are ATOMS' and repr()'d literals
    return namespace['format_line']


class AccessLog:
    """A request observer (flupfast.gateway.set_observer) writing one line per request to
    ``target``: a path, or ``-`` for stderr."""

    def __init__(self, target, fmt=DEFAULT_FORMAT):
        self.target = target
        self.format_line = compile_format(fmt)
        self._fd = 2 if target == '-' else self._open()
        # When to look for a rotated file next (never for stderr).
        self._next_check = float('inf') if target == '-' else time.time() + REOPEN_CHECK_INTERVAL

    def _open(self):
        return os.open(self.target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def begin(self, environ):
        return environ, time.time()

    def end(self, token, response, failed):
        environ, start = token
        # Environ strings are the request's bytes decoded as latin-1 (PEP 3333): encoded back
        # (in format_line), the log holds the bytes the client sent.
        line = self.format_line(environ, response, failed, start)
        if start >= self._next_check:  # the request's start: one clock read per request
            self._next_check = time.time() + REOPEN_CHECK_INTERVAL
            self._reopen_if_rotated()
        try:
            os.write(self._fd, line)
        except OSError:
            pass  # a full disk must not fail the request; the line is lost

    def _reopen_if_rotated(self):
        try:
            on_disk = os.stat(self.target)
            current = os.fstat(self._fd)
            if (on_disk.st_ino, on_disk.st_dev) == (current.st_ino, current.st_dev):
                return
        except FileNotFoundError:
            pass  # removed: open it anew
        old, self._fd = self._fd, self._open()
        os.close(old)

    def close(self):
        if self._fd != 2:
            os.close(self._fd)
            self._fd = 2
