"""The threaded mode's leader/follower accept (pure twin of _cython/leader.pxi): idle workers
take turns, one at a time, waiting on the listening socket; the one that accepts serves.

Owns the leader lock, the wait set (the listening socket and a wakeup pipe) and the accept. It
must not know the pool's limits or the protocol, nor block a stop: ``wake()`` ends one
leader's wait, ``close()`` every present and future one.

Why: with one accept thread handing each connection to a pool worker, every request paid a
condition notify, a thread wake-up and a GIL hand-off (futexes) before the worker could even
read. Here the worker that accepts is the one that serves; followers wait on the leader lock,
and only the accepted connection takes the GIL. The compiled twin waits without the GIL and,
where the kernel has EPOLLEXCLUSIVE, without the lock: each waiting worker on its own epoll set,
woken one per connection by the kernel (the lock's hand-off cost futex calls per request).
"""
import os
import selectors
import socket
import threading

from flupfast.serving.listen import ACCEPT_RETRY_ERRORS

__all__ = ["Leader"]


class Leader:
    """Leader/follower accept on ``listen_sock`` (non-blocking: another thread may take a
    connection first, and ``lead()`` must never block in accept()).

    ``lead()`` waits for the leader lock, then for a connection or a wakeup; returns
    ``(client, addr)`` (the client blocking and close-on-exec, as ``socket.accept()`` gives it),
    or None when woken (``wake()``: a job was queued for the pool; ``close()``). Each ``wake()``
    ends exactly one wait (a byte per wakeup), so no queued job is left behind a leader that
    drained another's wakeup. Accept errors other than "nobody to accept after all" raise
    OSError (the caller backs off); the lock is then free for the next leader.
    """

    def __init__(self, listen_sock):
        self._sock = listen_sock
        self._family = listen_sock.family
        self._type = listen_sock.type
        self._proto = listen_sock.proto
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK) \
            if hasattr(os, "pipe2") else os.pipe()
        if not hasattr(os, "pipe2"):
            for fd in (self._wake_r, self._wake_w):
                os.set_blocking(fd, False)
                os.set_inheritable(fd, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(listen_sock.fileno(), selectors.EVENT_READ, True)
        self._selector.register(self._wake_r, selectors.EVENT_READ, False)
        self._users = 0      # threads inside lead(): the fds are closed after the last one
        self._count = threading.Lock()  # guards _users
        self.closed = False

    def lead(self):
        with self._count:
            self._users += 1
        try:
            with self._lock:
                return self._wait_and_accept()
        finally:
            with self._count:
                self._users -= 1
                last = self.closed and not self._users
            if last:
                self._release()

    def _wait_and_accept(self):
        accept = self._sock._accept
        while not self.closed:
            listener = False
            for key, _ in self._selector.select():
                if not key.data:
                    try:
                        os.read(self._wake_r, 1)  # one wakeup for one wait
                    except BlockingIOError:
                        continue  # another leader's: look again
                    return None
                listener = True
            if not listener or self.closed:
                continue
            try:
                fd, addr = accept()
            except ACCEPT_RETRY_ERRORS:
                continue  # another thread took it (the loop's own accept, when it watches)
            client = socket.socket(self._family, self._type, self._proto, fileno=fd)
            return client, addr
        return None

    def wake(self):
        """End one leader's wait (the next one's, if none waits now)."""
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):
            pass  # full: plenty of wakeups pending; closed: nobody waits any more

    def close(self):
        """End every wait, now and to come; the fds go with the last thread inside lead()."""
        if self.closed:
            return
        self.closed = True
        self.wake()
        with self._count:
            idle = not self._users
        if idle:
            self._release()

    def _release(self):
        selector, self._selector = self._selector, None
        if selector is None:
            return
        selector.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
