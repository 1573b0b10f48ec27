"""The access log: one line per request, in gunicorn's ``access_log_format`` language, kept in
the process and written in batches of whole lines to a file opened O_APPEND or to stderr
(``-``): at most FLUSH_DELAY late, at once past BUFFER_SIZE, and before a rotation's reopen
and the process's exit.

A log file renamed or removed by logrotate is noticed within a second (its inode changes) and
opened again; no signal is needed, so SIGUSR1 keeps flup's meaning (replace the children).
The format is compiled once: a request computes only the fields the format names.
"""
import atexit
import logging
import os
import re
import select
import signal
import stat
import threading
import time
import weakref

__all__ = ['ATOMS', 'BUFFER_SIZE', 'DEFAULT_FORMAT', 'FLUSH_DELAY', 'AccessLog',
           'compile_format', 'flush_all', 'flush_on_signals']

# gunicorn's default: the Apache/nginx "combined" log format.
DEFAULT_FORMAT = '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"'

# A log file is checked for rotation at most this often (seconds).
REOPEN_CHECK_INTERVAL = 1.0
# A line waits at most this long (seconds) in the process before it is written: the lines of a
# burst go out together, one write() for many requests (a write per request was most of the
# log's cost in fork mode: bench/README.md, "The access log's cost").
FLUSH_DELAY = 0.2
# Lines kept past this many bytes are written at once, without waiting for FLUSH_DELAY.
BUFFER_SIZE = 32768
# A pipe (or a terminal, a socket) takes a write of up to PIPE_BUF bytes whole, without another
# process's write inside it (pipe(7)); bigger batches go to such a target in pieces of whole
# lines up to that size.
PIPE_BUF = getattr(select, 'PIPE_BUF', 4096)

logger = logging.getLogger('flupfast')

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


# A field's value may carry what a client sent (a URI, a header, the user nginx decodes from
# any Authorization header): written raw, a newline forges a line and a '"' ends a quoted
# field early. Escaped as nginx's log does (escape=default): '"', '\\' and every character
# outside printable ASCII as \xHH (of its UTF-8 bytes past U+00FF), so a line of this log
# reads as the front's own line of the same request.
_needs_escape = re.compile(r'[^ !#-\[\]-~]').search
# The bytes a field may hold as they are (what _needs_escape does not find).
_SAFE = bytes(code for code in range(0x20, 0x7f) if code not in b'"\\')


def _escaped(value):
    out = []
    for char in value:
        code = ord(char)
        if 0x20 <= code < 0x7f and char not in '"\\':
            out.append(char)
        elif code < 0x100:
            out.append('\\x%02X' % code)
        else:
            out.extend('\\x%02X' % byte for byte in char.encode('utf-8', 'surrogatepass'))
    return ''.join(out)


# The atoms whose values are the server's own (numbers, the clock, the status): written as
# they are. Every other field is escaped.
_PLAIN_ATOMS = frozenset('ltsBbTMDLp')

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
              '_needs_escape': _needs_escape, '_escaped': _escaped, '_SAFE': _SAFE,
              '_request_path': _request_path, '_status': _status, '_status_text': _status_text,
              '_response_header': _response_header, '_getpid': os.getpid, '_time': time.time}


def compile_format(fmt):
    """One function ``(e, r, f, s) -> line`` (bytes, newline included) for the format.
    Unknown atoms give '-', as gunicorn's do; ``{name}i``, ``{name}o`` and ``{name}e`` are a
    request header, a response header and an environ variable (their names go in as string
    literals). The duration is taken only if the format shows it."""
    exprs = []
    escaped = []  # per expression: whether its value is escaped

    def field(match):
        name = match.group(1)
        special = re.fullmatch(r'\{([^}]*)\}([ioe])', name)
        escape = name not in _PLAIN_ATOMS
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
                escaped.append(escape)
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
    # The fields a client can fill, checked at once (their bytes less the safe ones, one C
    # pass: nothing is left in nearly every request), then each one only when something is.
    client = [i for i in range(len(exprs)) if escaped[i]]
    if client:
        source += "    if %s.encode('latin-1', 'backslashreplace').translate(None, _SAFE):\n" % (
            "''.join((%s,))" % ', '.join('v%d' % i for i in client) if len(client) > 1
            else 'v%d' % client[0])
        for i in client:
            source += '        if _needs_escape(v%d):\n            v%d = _escaped(v%d)\n' % (
                i, i, i)
    source += "    return f%r.encode('latin-1', 'backslashreplace')\n" % (template + '\n')
    namespace = dict(_NAMESPACE)
    exec(source, namespace)  # the expressions are ATOMS' and repr()'d literals
    return namespace['format_line']


class AccessLog:
    """A request observer (flupfast.gateway.set_observer) logging one line per request to
    ``target``: a path, or ``-`` for stderr.

    A request only appends its line to the process's list; a daemon thread of the process
    (started by its first line, so each prefork child has its own) writes what is there
    FLUSH_DELAY after the first line of a batch, a request that finds BUFFER_SIZE bytes waiting
    writes them itself, and ``flush`` (a rotation, ``close``, the process's exit: flush_all
    and flush_on_signals) writes them at once. Lines leave in the order they were logged, each
    write holds whole lines only: to a regular file (O_APPEND, one write per batch) Linux writes
    each write() whole at the end of the file under the file's lock, so children's batches never
    interleave inside a line; to a pipe, a terminal or a socket a batch goes in writes of whole
    lines of at most PIPE_BUF bytes, which a pipe keeps whole."""

    def __init__(self, target, fmt=DEFAULT_FORMAT, flush_delay=None, buffer_size=None):
        self.target = target
        self.format_line = compile_format(fmt)
        self.flush_delay = FLUSH_DELAY if flush_delay is None else flush_delay
        self.buffer_size = BUFFER_SIZE if buffer_size is None else buffer_size
        self._reopen_failed = False  # the last look at the target could not open it
        self._fd = 2 if target == '-' else self._open()
        self._whole = self._takes_whole_batches()
        # When to look for a rotated file next (never for stderr).
        self._next_check = float('inf') if target == '-' else time.time() + REOPEN_CHECK_INTERVAL
        self._after_fork()
        _logs.add(self)

    def _after_fork(self):
        """A fresh process's state: no lines yet (a forked child's copies of its parent's are
        the parent's to write), no flusher thread, locks no other thread holds."""
        self._lines = []          # formatted lines not written yet, oldest first
        self._size = 0            # about how many bytes they hold (a trigger, not an account)
        self._armed = False       # a flush is on its way (the flusher woke for these lines)
        self._wake = threading.Event()  # set: lines wait for the flusher
        self._closed = threading.Event()  # set: the flusher writes what is left and ends
        self._write_lock = threading.Lock()  # one batch at a time, in order, on a current fd
        self._flusher = None

    def _open(self):
        return os.open(self.target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def _takes_whole_batches(self):
        """A regular file takes a batch in one write; anything else gets PIPE_BUF pieces."""
        try:
            return stat.S_ISREG(os.fstat(self._fd).st_mode)
        except OSError:
            return False

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
        self._lines.append(line)  # one C call: atomic under the GIL, the list is never replaced
        self._size += len(line)
        if self._size >= self.buffer_size:
            self.flush()
        elif not self._armed:
            self._arm()

    def _arm(self):
        """Have the flusher write the lines kept now within flush_delay."""
        self._armed = True
        if self._flusher is None:
            self._flusher = threading.Thread(target=self._flush_later, daemon=True,
                                             name='flupfast-access-log')
            self._flusher.start()
        self._wake.set()

    def _flush_later(self):
        wake, closed = self._wake, self._closed
        while not closed.is_set():
            wake.wait()
            wake.clear()
            closed.wait(self.flush_delay)  # close() cuts the wait short
            # Before the write: a line kept from here on arms the next round itself.
            self._armed = False
            self.flush()

    def flush(self, timeout=-1):
        """Write the lines kept so far (in order, whole). ``timeout``: how long to wait for a
        write under way in another thread (-1: as long as it takes); False if it was not
        waited for."""
        if not self._write_lock.acquire(timeout=timeout):
            return False
        try:
            self._flush_locked()
            return True
        finally:
            self._write_lock.release()

    def _flush_locked(self):
        lines = self._lines
        count = len(lines)
        if count:
            data = b''.join(lines[:count])
            del lines[:count]  # lines appended meanwhile stay, after these
            self._size = max(0, self._size - len(data))
            self._write(data)

    def _write(self, data):
        view = memoryview(data)
        start, end = 0, len(data)
        try:
            while start < end:
                stop = end
                if not self._whole and end - start > PIPE_BUF:
                    # The last whole line within PIPE_BUF (a longer line goes alone).
                    cut = data.rfind(b'\n', start, start + PIPE_BUF)
                    stop = cut + 1 if cut >= 0 else data.find(b'\n', start + PIPE_BUF) + 1 or end
                while start < stop:  # a short write (a signal, a full disk): the rest after it
                    start += os.write(self._fd, view[start:stop])
        except OSError:
            pass  # a full disk or a closed stderr must not fail requests; these lines are lost

    def _reopen_if_rotated(self):
        """Open the target anew if it is no longer the file written to. A file that cannot
        be opened (its directory gone, a read-only file system) leaves the lines going to the
        old one, a warning logged once, and is tried again at the next check: a request never
        fails for its log line."""
        try:
            on_disk = os.stat(self.target)
            current = os.fstat(self._fd)
            if (on_disk.st_ino, on_disk.st_dev) == (current.st_ino, current.st_dev):
                self._reopen_failed = False
                return
        except FileNotFoundError:
            pass  # removed: open it anew
        except OSError as exc:
            self._warn_reopen_failed(exc)
            return
        with self._write_lock:
            self._flush_locked()  # the lines before the rotation go to the rotated file
            try:
                fd = self._open()
            except OSError as exc:
                self._warn_reopen_failed(exc)
                return
            old, self._fd = self._fd, fd
            self._reopen_failed = False
            os.close(old)

    def _warn_reopen_failed(self, exc):
        if not self._reopen_failed:
            self._reopen_failed = True
            logger.warning("access log: cannot open %s again after its rotation (%s); "
                           "writing to the old file until it can", self.target, exc)

    def close(self):
        """Write the kept lines and close the file (later lines go to stderr)."""
        # The flusher ends; a line logged after this starts another with fresh events.
        self._closed.set()
        self._wake.set()
        self._flusher, self._armed = None, False
        self._wake, self._closed = threading.Event(), threading.Event()
        with self._write_lock:
            self._flush_locked()
            if self._fd != 2:
                os.close(self._fd)
                self._fd = 2
                self._whole = self._takes_whole_batches()
        _logs.discard(self)


# Every open access log of this process: what flush_all writes out.
_logs = weakref.WeakSet()


def flush_all(timeout=1.0):
    """Write every access log's kept lines now: before the process exits or execs (a reload).
    ``timeout`` bounds the wait for a write under way in another thread."""
    for log in list(_logs):
        log.flush(timeout)


def _after_fork_in_child():
    for log in list(_logs):
        log._after_fork()


atexit.register(flush_all)  # sys.exit, and a prefork child's end (it leaves by SystemExit)
os.register_at_fork(after_in_child=_after_fork_in_child)


def _flush_and_die(signum, frame):
    """SIGTERM/SIGQUIT at their default action: the kept lines are written first."""
    flush_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def flush_on_signals(signals=('SIGTERM', 'SIGQUIT')):
    """In a prefork child: the signals whose default action ends the process write the kept
    lines first, then end it as before (an app's own handler is left alone)."""
    if not _logs:
        return
    for name in signals:
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) == signal.SIG_DFL:
            signal.signal(signum, _flush_and_die)
