# The compiled twin of flupfast/ops/proctitle.py's WorkerTitle: the request observer that keeps
# a prefork child's process title current. The twin's two Python frames per request (begin,
# end) were a tenth of a fork child's request in the interpreter; the title itself is
# setproctitle's, called the same way.


cdef class WorkerTitle:
    """A prefork child's ``busy METHOD URI`` / ``idle`` title (see the pure twin)."""

    cdef readonly str busy
    cdef readonly str idle
    cdef object _set_title

    def __init__(self, number, app_name, set_title):
        prefix = 'flupfast: worker %d [%s] ' % (number, app_name)
        self.busy = prefix + 'busy '
        self.idle = prefix + 'idle'
        self._set_title = set_title
        set_title(self.idle)

    def begin(self, environ):
        self._set_title('%s%s %s' % (self.busy, environ.get('REQUEST_METHOD', '-'),
                                     environ.get('REQUEST_URI') or environ.get('PATH_INFO', '')))

    def end(self, token, response, failed):
        self._set_title(self.idle)
