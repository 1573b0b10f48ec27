"""The request path's receive and close on a connection's socket (pure twin of
_cython/sockio.pxi): Python's own socket methods. The compiled twin makes the same calls
without giving up the GIL when they need not wait (compat/known_differences.py has no key for
this: results, errors and timeouts are the same).
"""

__all__ = ["recv_into", "close_socket"]


def recv_into(sock, buf, limit=0):
    """``sock.recv_into(buf, limit)``: the bytes received into ``buf`` (0 at EOF); waits as
    the socket's timeout says when nothing is there yet."""
    return sock.recv_into(buf, limit)


def close_socket(sock):
    """``sock.close()``."""
    sock.close()
