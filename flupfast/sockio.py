"""The request path's receive and close on a connection's socket (pure twin of
_cython/sockio.pxi): Python's own socket methods. The compiled twin makes the same system
calls itself, on Python's own socket class read in place, without giving up the GIL when they
need not wait (compat/known_differences.py has no key for this: results, errors, signals and
timeouts are the same; a class-level patch of ``socket.socket.recv_into`` is not called).
"""

import threading

from flupfast.limits import RECV_BUFFER_SIZE

__all__ = ["recv_into", "close_socket", "epoll_arm", "epoll_ready_now", "receive_buffer"]

# One receive buffer per thread, reused by every connection that thread serves: allocating and
# zeroing 256 KiB per accepted connection costs more than a small request. Safe because the
# codecs copy what they keep out of it before the next receive.
_thread_state = threading.local()


def receive_buffer():
    """This thread's (buffer, memoryview of it): one thread-local attribute, read once per
    receive (a threading.local attribute costs as much as a small Python call)."""
    pair = getattr(_thread_state, 'recv', None)
    if pair is None:
        buf = bytearray(RECV_BUFFER_SIZE)
        pair = _thread_state.recv = (buf, memoryview(buf))
    return pair


def recv_into(sock, buf, limit=0):
    """``sock.recv_into(buf, limit)``: the bytes received into ``buf`` (0 at EOF); waits as
    the socket's timeout says when nothing is there yet. A count the buffer cannot hold (a
    socket class of one's own may answer anything) is a ValueError: the compiled callers copy
    that many bytes."""
    got = sock.recv_into(buf, limit)
    if type(got) is not int or not 0 <= got <= (limit or len(buf)):
        raise ValueError('%s.recv_into() returned %r for a buffer of %d bytes'
                         % (type(sock).__name__, got, limit or len(buf)))
    return got


def close_socket(sock):
    """``sock.close()``."""
    sock.close()


def epoll_arm(epoll, fd, mask, again):
    """Arm ``fd`` in the ``select.epoll`` set for ``mask``: ``again`` guesses that the set
    still has it (re-arm a one-shot event), else that it is new. Whichever the guess, the other
    call completes it, so the set's view and the caller's cannot disagree into an error."""
    if again:
        try:
            epoll.modify(fd, mask)
        except FileNotFoundError:
            epoll.register(fd, mask)
    else:
        try:
            epoll.register(fd, mask)
        except FileExistsError:
            epoll.modify(fd, mask)


def epoll_ready_now(epoll):
    """The fd of one event ready in the ``select.epoll`` set now, or -1: no wait."""
    events = epoll.poll(0, 1)
    return events[0][0] if events else -1
