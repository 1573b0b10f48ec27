# The compiled twins of the connections' constructors (connection.py init_logged_connection,
# fastcgi_connection.py init_fastcgi_connection): with the compiled backend each class's
# __init__ is its twin itself, so building the job for a new connection runs no Python frame
# (two were a tenth of a prefork child's request). They set the same attributes, in the same
# order, to the same kinds of objects (tests compare them). Read at call time: _impl's
# FastCGIParser, which a test may switch to the other backend's.

import _thread
import logging as _conn_logging
from collections import deque as _deque

cdef object _allocate_lock = _thread.allocate_lock
cdef dict _conn_loggers = {}  # name -> logger (logging.getLogger takes a lock per call)
cdef object _impl_module = None


cdef inline int _init_connection(self, sock, addr) except -1:
    """Connection.__init__."""
    self._sock = sock
    self._addr = addr
    self._out = []
    self._out_bytes = 0
    self._send_lock = _allocate_lock()
    self.closed = False
    return 0


def init_logged_connection(self, sock, addr, server, timeout=None, logger_name=None):
    """LoggedConnection.__init__ (see the pure twin)."""
    _init_connection(self, sock, addr)
    self.server = server
    self._timeout = timeout
    if logger_name is None:
        logger_name = self.logger_name
    logger = _conn_loggers.get(logger_name)
    if logger is None:
        logger = _conn_loggers[logger_name] = _conn_logging.getLogger(logger_name)
    self.logger = logger
    self.served = 0


def init_fastcgi_connection(self, sock, addr, server, timeout=None, config=None):
    """FastCGIConnection.__init__ (see the pure twin)."""
    global _impl_module
    if _impl_module is None:  # at the first connection: _impl imports this extension
        from flupfast import _impl
        _impl_module = _impl
    _init_connection(self, sock, addr)
    self.server = server
    self.timeout = timeout
    if config is None:
        config = server._connectionConfig()
    self._config = config
    multiplexed = self.multiplexed
    if multiplexed is None:
        multiplexed = config.multiplexed
        self.multiplexed = multiplexed
    self.can_park = not multiplexed
    self.max_content = config.max_content
    self._parser = _impl_module.FastCGIParser()
    self._events = _deque()
    self._requests = {}
    self._request_threads = []
    self._eof = False
    self.max_requests = None
    self.served = 0
    self.idle = False
