# The compiled twin of flupfast/ops/proctitle.py's WorkerTitle: the request observer that keeps
# a prefork child's process title current. The twin's two Python frames per request (begin,
# end) were a tenth of a fork child's request in the interpreter.
#
# The title's memory. setproctitle (Linux) writes a title into the process's original argv and
# environment strings (it moves the environment away first), cut to that area and padded with
# NULs to its end, and names the kernel's 15-byte comm after the title's start with a prctl. A
# worker's titles all start "flupfast: worker N": from the second title on, the prctl changes
# nothing. So once set_title has shown where its area is and how long, the twin writes the area
# itself, the bytes setproctitle would write, without its syscall and copies per title.
# Anything else (another platform, a set_title that is not setproctitle's own function, an
# area that does not read back as written) keeps calling set_title.

from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport uintptr_t

cdef enum:
    _COMM_BYTES = 15  # TASK_COMM_LEN - 1: what prctl(PR_SET_NAME) keeps of a title
    _PROBE_SPACES = 128 * 1024  # past the area, or past the page the kernel shows


cdef object _setproctitle():
    """setproctitle's own function, or None."""
    try:
        from setproctitle import setproctitle
    except ImportError:
        return None
    return setproctitle


cdef bytes _read_proc(str name):
    with open('/proc/self/' + name, 'rb') as f:
        return f.read()


cdef Py_ssize_t _title_area(set_title, str title, bytes other, char **area) except -1:
    """Show ``title`` through ``set_title``; when that is setproctitle writing the argv area,
    the area's size (its last byte the NUL that ends a title cut to it), with ``area`` pointing
    at it; else 0. The area is measured with ``title`` and trailing spaces (``ps`` shows the
    same) as long as it takes; ``other`` must give the kernel the same comm. The kernel shows
    at most a page of a title that runs past the argv strings: past that, the area measured
    is the page (what ``ps`` can show), the rest of setproctitle's area left NUL."""
    cdef bytes encoded = title.encode('utf-8')
    cdef Py_ssize_t size, i, n = len(encoded)
    cdef char *at
    if n < _COMM_BYTES or encoded[:_COMM_BYTES] != other[:_COMM_BYTES] or \
            set_title is not _setproctitle():
        set_title(title)
        return 0
    set_title(title + ' ' * _PROBE_SPACES)
    try:
        shown = _read_proc('cmdline').rstrip(b'\0')
        stat = _read_proc('stat')
    except OSError:
        shown = stat = b''
    set_title(title)
    fields = stat[stat.rfind(b')') + 2:].split()
    size = len(shown) + 1
    # arg_start (proc(5) field 48; from Linux 3.5); the probe cut, so the area is its size
    if len(fields) < 46 or not n < len(shown) < n + _PROBE_SPACES or \
            shown != encoded + b' ' * (len(shown) - n):
        return 0
    at = <char *><uintptr_t>int(fields[45])
    if at == NULL or memcmp(at, <const char *>encoded, n) != 0:
        return 0
    for i in range(n, size):
        if at[i] != 0:
            return 0  # not setproctitle's padding: not its area
    area[0] = at
    return size


cdef class WorkerTitle:
    """A prefork child's ``busy METHOD URI`` / ``idle`` title (see the pure twin)."""

    cdef readonly str busy
    cdef readonly str idle
    cdef object _set_title
    cdef bytes _idle_bytes
    cdef char *_area       # the argv area once found (NULL: every title through set_title)
    cdef Py_ssize_t _size  # its bytes, the last one always NUL

    def __init__(self, number, app_name, set_title):
        prefix = 'flupfast: worker %d [%s] ' % (number, app_name)
        self.busy = prefix + 'busy '
        self.idle = prefix + 'idle'
        self._set_title = set_title
        self._idle_bytes = self.idle.encode('utf-8')
        self._area = NULL
        self._size = _title_area(set_title, self.idle, self.busy.encode('utf-8'), &self._area)

    cdef Py_ssize_t _put(self, Py_ssize_t at, str text) except -1:
        """Write ``text`` (UTF-8, as setproctitle encodes it) at ``at``, cut at the area's
        last byte; returns where it ends."""
        cdef Py_ssize_t n = 0
        cdef const char *data = PyUnicode_AsUTF8AndSize(text, &n)
        if n > self._size - 1 - at:
            n = self._size - 1 - at
        memcpy(self._area + at, data, n)
        return at + n

    cdef _show(self, Py_ssize_t end):
        memset(self._area + end, 0, self._size - end)

    def begin(self, environ):
        self._begin(environ)

    cdef _begin(self, environ):
        if type(environ) is dict:  # the codecs': its lookups in C, not method calls
            method = (<dict>environ).get('REQUEST_METHOD', '-')
            uri = (<dict>environ).get('REQUEST_URI') or (<dict>environ).get('PATH_INFO', '')
        else:
            method = environ.get('REQUEST_METHOD', '-')
            uri = environ.get('REQUEST_URI') or environ.get('PATH_INFO', '')
        if self._area == NULL or type(method) is not str or type(uri) is not str or \
                '\0' in <str>method or '\0' in <str>uri:
            # ops.proctitle.busy_title's text (that module imports this one through _impl)
            title = '%s%s %s' % (self.busy, method, uri)
            self._set_title(title.replace('\0', ''))
            return
        self._show(self._put(self._put(self._put(self._put(0, self.busy), method), ' '), uri))

    def end(self, token, response, failed):
        self._end()

    cdef _end(self):
        cdef Py_ssize_t n
        if self._area == NULL:
            self._set_title(self.idle)
            return
        n = len(self._idle_bytes)
        memcpy(self._area, <const char *>self._idle_bytes, n)
        self._show(n)


# The gateway's calls of its request observer (gateway.pxi's _run_application): a WorkerTitle,
# a prefork child's only observer unless logs or watches are on, without the method calls.
cdef object _observer_begin(observer, environ):
    if type(observer) is WorkerTitle:
        (<WorkerTitle>observer)._begin(environ)
        return None
    return observer.begin(environ)


cdef _observer_end(observer, token, response, bint failed):
    if type(observer) is WorkerTitle:
        (<WorkerTitle>observer)._end()
        return
    # Called once more when the request timeout's exception lands at its first line (see
    # the pure twin's run_application).
    try:
        observer.end(token, response, failed)
    except BaseException:
        observer.end(token, response, failed)
        raise
