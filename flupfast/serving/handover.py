"""What survives a reload besides the app: listening sockets and idle kept connections.

Owns the in-process keep (a listening socket by bind address, kept connections by the address
of the socket they came from) between one run() and the next, and passing kept connections to
a re-executed image (inheritable fds named in FLUPFAST_KEPT_FDS, for FLUPFAST_KEPT_PID only).
The listening socket itself crosses an exec as systemd passes it (serving/systemd.py). Nothing
here accepts, reads or writes.
"""
import fcntl
import os
import socket
import threading

from flupfast.serving.listen import set_cloexec

__all__ = ["FIRST_KEPT_FD", "inherited_connections", "keep_connections", "keep_listener",
           "pass_connections", "release_listener", "take_connections", "take_listener"]

KEPT_FDS = "FLUPFAST_KEPT_FDS"
KEPT_PID = "FLUPFAST_KEPT_PID"
# Kept connections cross an exec on fds from here: above fd 3, where the listening socket goes
# (sd_listen_fds' SD_LISTEN_FDS_START), so moving that one cannot overwrite them.
FIRST_KEPT_FD = 4

_lock = threading.Lock()
_listeners = {}    # bind address -> listening socket kept by a reload
_connections = {}  # listening socket's address -> [client sockets idle between requests]


def _key(address):
    return os.fspath(address) if isinstance(address, (str, os.PathLike)) else tuple(address)


def keep_listener(bind_address, sock):
    """Keep ``sock`` (a server's listening socket, run() ended by a reload) for the next run()
    on ``bind_address``: it is not closed, so connections wait in its backlog meanwhile and a
    Unix socket's path is never unlinked. One kept before on that address is closed."""
    with _lock:
        old = _listeners.get(_key(bind_address))
        _listeners[_key(bind_address)] = sock
    if old is not None and old is not sock:
        old.close()


def release_listener(bind_address, sock, reloading):
    """What a server's ``_cleanupSocket`` does: a reload keeps a bound socket for the next
    run() on ``bind_address``; a stop (or a socket passed in, ``bind_address`` None) closes."""
    if reloading and bind_address is not None:
        keep_listener(bind_address, sock)
    else:
        sock.close()


def take_listener(bind_address):
    """The socket a reload kept for ``bind_address`` (and forget it), or None."""
    with _lock:
        sock = _listeners.pop(_key(bind_address), None)
    if sock is not None and sock.fileno() < 0:
        return None  # closed by its owner meanwhile
    return sock


def keep_connections(listen_address, clients):
    """Keep idle persistent connections (between two requests, nothing buffered) accepted on
    the socket named ``listen_address``, for whoever serves that socket next."""
    if clients:
        with _lock:
            _connections.setdefault(listen_address, []).extend(clients)


def take_connections(listen_address):
    """The kept connections of ``listen_address`` (and forget them); [] when none."""
    with _lock:
        return _connections.pop(listen_address, [])


def pass_connections(clients, environ):
    """Make ``clients`` survive an exec on fds from FIRST_KEPT_FD, named in the returned copy of
    ``environ``. Call before the listening socket is moved to fd 3."""
    fds = []
    for client in clients:
        try:
            fd = fcntl.fcntl(client.fileno(), fcntl.F_DUPFD, FIRST_KEPT_FD)
        except OSError:
            continue  # closed meanwhile, or no fd left: the web server reconnects
        os.set_inheritable(fd, True)
        fds.append(fd)
    environ = dict(environ)
    environ.pop(KEPT_FDS, None)
    if fds:
        environ.update({KEPT_FDS: ",".join(map(str, fds)), KEPT_PID: str(os.getpid())})
    return environ


def inherited_connections(environ=None):
    """The kept connections a reloading image passed to this one, as sockets (close-on-exec
    again); the variables are removed from ``environ``. [] when they name another process."""
    environ = os.environ if environ is None else environ
    fds = environ.pop(KEPT_FDS, "")
    pid = environ.pop(KEPT_PID, "")
    if not fds or pid != str(os.getpid()):
        return []
    clients = []
    for text in fds.split(","):
        try:
            client = socket.socket(fileno=int(text))
        except (ValueError, OSError):
            continue  # not a socket (any more)
        if client.type != socket.SOCK_STREAM:
            client.close()
            continue
        set_cloexec(client)
        clients.append(client)
    return clients
