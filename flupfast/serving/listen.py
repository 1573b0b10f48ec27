"""Protocol-blind socket setup: bind a listening socket, find one inherited on fd 0, tune fds,
and the allow-list of peers that may connect (with the warning for a socket open to anybody).

Used by every protocol's facade so the bind/umask/fd-0/allow-list rules exist once (flup copies
them per protocol). It must not accept connections, read or write bytes, or close descriptors
it does not own (fd 0 in particular).
"""
import errno
import grp
import ipaddress
import os
import pwd
import select
import socket
import stat
import time

from flupfast.limits import REFUSED_PEER_LOG_INTERVAL, REFUSED_PEERS_REMEMBERED

__all__ = [
    "ACCEPT_RETRY_ERRORS", "ACCEPT_EXHAUSTION_ERRNOS", "AllowList", "bind_listen_socket",
    "has_waiting", "inherited_listen_socket", "is_tcp", "resolve_owner", "set_cloexec",
    "set_nodelay", "warn_if_exposed",
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


def has_waiting(listen_sock):
    """True when a connection waits in ``listen_sock``'s queue (readable; nothing is accepted)."""
    poller = select.poll()
    poller.register(listen_sock, select.POLLIN)
    return bool(poller.poll(0))


def set_nodelay(sock):
    """Disable Nagle on an accepted TCP socket: responses split across sends otherwise stall on
    delayed ACKs (fastcgi-nagle, ajp-upload-speed). Errors (e.g. an AF_UNIX socket) are ignored."""
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

    A str (or path-like) is a Unix socket path: a socket already there is unlinked first
    (flup unlinks whatever is there; anything but a socket is refused here,
    known_differences 'unix-bind-not-a-socket') and ``umask`` applies from bind() to listen()
    (flup fcgi_base.py:1040-1068);
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
            _unlink_old_socket(path)
            uid, gid = (-1, -1) if owner is None else resolve_owner(owner)
            old_umask = None if umask is None else os.umask(umask)
            try:
                sock.bind(path)
                try:
                    if (uid, gid) != (-1, -1):
                        _give_socket(path, uid, gid, owner)
                    if mode is not None:
                        os.chmod(path, mode)
                except OSError:
                    _unlink_quietly(path)  # ours, made a moment ago: no half-set socket left
                    raise
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


def _unlink_old_socket(path):
    """Make room for a socket at ``path``: a socket left there (by a server that died, or
    one this replaces, as flup does) is unlinked; anything else is refused, never deleted (a
    mistyped path would have removed a file)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError:
        return  # bind() says what is wrong with the path
    if not stat.S_ISSOCK(st.st_mode):
        raise FileExistsError(errno.EEXIST, 'it exists and is not a socket (left as it is)',
                              path)
    _unlink_quietly(path)


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _give_socket(path, uid, gid, owner):
    try:
        os.chown(path, uid, gid)
    except OSError as exc:
        raise type(exc)(exc.errno, 'cannot give it to %s: %s%s' % (
            owner, exc.strerror, ' (changing an owner takes root)'
            if exc.errno == errno.EPERM else ''), path) from None


def socket_in_use(path):
    """Whether a server listens on the Unix socket at ``path`` (a connection is accepted
    into its queue)."""
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


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
    for a non-socket (cgi-detection: ``socket.fromfd`` raises ENOTSOCK on Python >= 3.8 before its
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


class AllowList:
    """Who may connect: ``allows(addr)`` for the address ``accept()`` returned.

    ``addresses`` None admits everybody; otherwise (a list, as flup's ``allowedServers``, read
    at each check) a TCP peer's host must be in it, an exact string compare as flup's (no
    CIDR, no names; an IPv4-mapped IPv6 peer ``::ffff:a.b.c.d`` counts as ``a.b.c.d``).
    ``unix_peers``: whether Unix-socket peers are admitted (the socket file's permissions
    decide who reaches it); ``ipv6_peers``: whether an IPv6 peer may be admitted at all. flup's
    two rules are two settings of these: ``allowedServers`` (Unix admitted; IPv6 checked,
    known_differences 'scgi-allowed-servers-ipv6') and FastCGI's FCGI_WEB_SERVER_ADDRS (only
    listed IPv4 peers: Unix and IPv6 refused, flup fcgi.py:98-100).

    A refusal is logged as a warning naming the peer and ``reason``, once per address per
    REFUSED_PEER_LOG_INTERVAL in each process: a peer retrying in a loop cannot flood the log.
    """

    def __init__(self, addresses, unix_peers=True, ipv6_peers=True, logger=None,
                 reason='', clock=time.monotonic):
        self.addresses = addresses
        self.unix_peers = unix_peers
        self.ipv6_peers = ipv6_peers
        self.logger = logger
        self.reason = reason
        self._clock = clock
        self._logged = {}  # host -> when its refusal was last logged

    @classmethod
    def web_server_addrs(cls, addresses, logger=None):
        """FastCGI's FCGI_WEB_SERVER_ADDRS (spec 3.2), ``addresses`` parsed as flup does
        (split on commas, stripped); None (the variable unset) admits everybody."""
        return cls(addresses, unix_peers=False, ipv6_peers=False, logger=logger,
                   reason='not in FCGI_WEB_SERVER_ADDRS')

    @property
    def restricted(self):
        return self.addresses is not None

    def admits(self, addr):
        """True when ``addr`` may connect (nothing logged)."""
        addresses = self.addresses
        if addresses is None:
            return True
        if not isinstance(addr, tuple) or not addr:
            return self.unix_peers  # a Unix peer: '' or a path, never a tuple
        if len(addr) != 2 and not self.ipv6_peers:
            return False
        host = addr[0]
        if host in addresses:
            return True
        return host.startswith('::ffff:') and host[7:] in addresses

    def allows(self, addr):
        """``admits``, logging a refusal (at most once a minute per address)."""
        if self.addresses is None or self.admits(addr):  # no list: no call (every connection)
            return True
        if self.logger is not None:
            self.log_refusal(addr)
        return False

    def log_refusal(self, addr):
        host = addr[0] if isinstance(addr, tuple) and addr else 'a Unix socket'
        now = self._clock()
        last = self._logged.get(host)
        if last is not None and now - last < REFUSED_PEER_LOG_INTERVAL:
            return
        if len(self._logged) >= REFUSED_PEERS_REMEMBERED:
            self._logged.clear()
        self._logged[host] = now
        # flup's words first (scgi_base.py:391, ajp_base.py:838): sites grep for them.
        self.logger.warning('Server connection from %s disallowed%s (logged at most once '
                            'every %d s per address)', host,
                            ': ' + self.reason if self.reason else '',
                            REFUSED_PEER_LOG_INTERVAL)


def is_loopback(host):
    """True for a loopback IP address (127.0.0.0/8, ::1, ::ffff:127.x)."""
    try:
        address = ipaddress.ip_address(host.split('%', 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, 'ipv4_mapped', None)
    return (mapped or address).is_loopback


def warn_if_exposed(sock, logger, *allow_lists):
    """One warning when ``sock`` listens on TCP beyond loopback and none of ``allow_lists`` is
    restricted: whoever reaches the port can run any request, with any environ (REMOTE_USER,
    HTTPS...), as this process's user. Returns True when it warned."""
    if not is_tcp(sock) or any(a is not None and a.restricted for a in allow_lists):
        return False
    host, port = sock.getsockname()[:2]
    if is_loopback(host):
        return False
    logger.warning('listening on %s port %d, beyond loopback, with no allow-list: anybody who '
                   'can reach it can run requests as this process\'s user, with any '
                   'environ (REMOTE_USER, HTTPS...); list the web servers (allowedServers, '
                   '--allowed-servers, FCGI_WEB_SERVER_ADDRS), bind 127.0.0.1 or use a Unix '
                   'socket', host or '*', port)
    return True
