"""Protocol-blind socket setup: bind a listening socket, find one inherited on fd 0, tune fds.

Used by every protocol's facade so the bind/umask/fd-0 rules exist once (flup copies them per
protocol). It must not accept connections, read or write bytes, or close descriptors it does
not own (fd 0 in particular).
"""
import errno
import grp
import os
import pwd
import socket
import stat

__all__ = [
    "ACCEPT_RETRY_ERRORS", "ACCEPT_EXHAUSTION_ERRNOS", "bind_listen_socket",
    "inherited_listen_socket", "is_tcp", "resolve_owner", "set_cloexec", "set_nodelay",
]

# accept() failures that mean "nobody to accept after all": EAGAIN when another process won the
# race on a shared non-blocking socket (flup preforkserver.py:400), EINTR, and a peer that reset
# before we got to it.
ACCEPT_RETRY_ERRORS = (BlockingIOError, InterruptedError, ConnectionAbortedError)

# accept() failures from resource exhaustion: the socket stays readable, so retrying at once
# would spin; callers log, back off briefly and retry.
ACCEPT_EXHAUSTION_ERRNOS = frozenset(
    getattr(errno, name) for name in ("EMFILE", "ENFILE", "ENOBUFS", "ENOMEM")
    if hasattr(errno, name))

_TCP_FAMILIES = frozenset(
    getattr(socket, name) for name in ("AF_INET", "AF_INET6") if hasattr(socket, name))


def set_cloexec(sock):
    """Set FD_CLOEXEC on ``sock`` (a socket, or an int fd), as flup's ``setCloseOnExec(sock)``
    does on the listening and accepted sockets (threadedserver.py:73, :92). Sockets Python
    creates are already non-inheritable; one inherited on fd 0 is not."""
    os.set_inheritable(sock if isinstance(sock, int) else sock.fileno(), False)


def is_tcp(sock):
    """True for AF_INET/AF_INET6 sockets (the ones TCP_NODELAY applies to)."""
    return sock.family in _TCP_FAMILIES


def set_nodelay(sock):
    """Disable Nagle on an accepted TCP socket: responses split across sends otherwise stall on
    delayed ACKs (inventory 3.2-3.3). Errors (e.g. an AF_UNIX socket) are ignored."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass


def _family_for(bind_address):
    if isinstance(bind_address, (str, os.PathLike)):
        return socket.AF_UNIX
    if not isinstance(bind_address, tuple) or len(bind_address) < 2:
        raise TypeError("bindAddress must be a str (Unix socket path) or a (host, port[, "
                        "flowinfo, scope_id]) tuple, not %r" % (bind_address,))
    if len(bind_address) > 2:
        return socket.AF_INET6  # flup: a tuple longer than 2 is IPv6 (fcgi_base.py:1050)
    host = bind_address[0]
    if isinstance(host, str) and ":" in host:
        return socket.AF_INET6  # additive: flup fails on an IPv6 literal in a 2-tuple
    return socket.AF_INET


def resolve_owner(owner):
    """``"user"``, ``"user:group"`` or ``":group"`` (names or numbers) -> ``(uid, gid)``, -1 for
    the part left out (``os.chown`` leaves it). A user alone takes that user's primary group,
    as PHP-FPM's ``listen.owner`` does. Unknown names raise ValueError naming them."""
    if isinstance(owner, tuple):
        return owner
    user, _, group = str(owner).partition(":")
    uid = gid = -1
    if user:
        try:
            entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
        except KeyError:
            raise ValueError("no such user: %r" % user) from None
        uid = entry.pw_uid
        gid = entry.pw_gid
    if group:
        try:
            gid = (grp.getgrgid(int(group)) if group.isdigit() else grp.getgrnam(group)).gr_gid
        except KeyError:
            raise ValueError("no such group: %r" % group) from None
    return uid, gid


def bind_listen_socket(bind_address, umask=None, owner=None, mode=None):
    """Return a listening socket for ``bind_address``.

    A str (or path-like) is a Unix socket path: whatever is there is unlinked first (errors
    ignored) and ``umask`` applies from bind() to listen() (flup fcgi_base.py:1040-1068);
    ``owner`` (see resolve_owner) and ``mode`` (e.g. 0o660), PHP-FPM's ``listen.owner``,
    ``listen.group`` and ``listen.mode``, are set before listen(), so no connection is accepted
    under the wrong permissions. A 2-tuple is AF_INET (or AF_INET6 when the host contains ':'),
    a longer tuple AF_INET6 (``owner`` and ``mode`` do not apply); TCP sockets get SO_REUSEADDR.
    Backlog is SOMAXCONN; the socket is close-on-exec.
    """
    family = _family_for(bind_address)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        set_cloexec(sock)
        if family == socket.AF_UNIX:
            path = os.fspath(bind_address)
            try:
                os.unlink(path)
            except OSError:
                pass
            uid, gid = (-1, -1) if owner is None else resolve_owner(owner)
            old_umask = None if umask is None else os.umask(umask)
            try:
                sock.bind(path)
                if (uid, gid) != (-1, -1):
                    os.chown(path, uid, gid)
                if mode is not None:
                    os.chmod(path, mode)
                sock.listen(socket.SOMAXCONN)
            finally:
                if old_umask is not None:
                    os.umask(old_umask)
        else:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(bind_address)
            sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        raise
    return sock


def _is_listening(sock):
    acceptconn = getattr(socket, "SO_ACCEPTCONN", None)
    if acceptconn is not None:
        try:
            return bool(sock.getsockopt(socket.SOL_SOCKET, acceptconn))
        except OSError:
            pass  # ENOPROTOOPT on some systems: fall back to flup's getpeername test
    try:
        sock.getpeername()
    except OSError as exc:
        # ENOTCONN: not connected, i.e. a listening socket (flup fcgi_base.py:1027-1033).
        return exc.errno == errno.ENOTCONN
    return False  # connected: a CGI request whose stdin is a socket, not a listener


def inherited_listen_socket(fd=0):
    """Return the listening stream socket the web server left on ``fd`` (FastCGI's
    FCGI_LISTENSOCK_FILENO), or None when ``fd`` is closed, not a socket, or not listening.

    The returned socket wraps a duplicate of ``fd``: closing it leaves ``fd`` open. Never raises
    for a non-socket (flup bug 2: ``socket.fromfd`` raises ENOTSOCK on Python >= 3.8 before its
    guarded ``getpeername``). The family is read from the socket itself, so Unix and TCP both
    work.
    """
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return None  # EBADF: nothing on fd
    if not stat.S_ISSOCK(mode):
        return None
    dup = os.dup(fd)
    try:
        sock = socket.socket(fileno=dup)  # detects family, type and protocol from the fd
    except OSError:
        os.close(dup)
        return None
    try:
        if sock.type != socket.SOCK_STREAM or not _is_listening(sock):
            sock.close()
            return None
        set_cloexec(sock)
    except BaseException:
        sock.close()
        raise
    return sock
