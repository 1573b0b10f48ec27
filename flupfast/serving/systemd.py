"""systemd's two small protocols, without libsystemd: listening sockets passed in
(sd_listen_fds(3): LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES, fds from 3) and readiness notices
(sd_notify(3): one datagram of ``KEY=value`` lines to $NOTIFY_SOCKET).

The command line also uses the first to keep its listening socket across a reload (SIGHUP
re-executes the process with the socket on fd 3, as systemd would pass it). Nothing here
accepts connections or installs signal handlers.
"""
import os
import socket

from flupfast.serving.listen import inherited_listen_socket

__all__ = ["LISTEN_FDS_START", "hand_over", "listen_socket", "listen_sockets", "notify",
           "sockets_passed"]

LISTEN_FDS_START = 3  # SD_LISTEN_FDS_START


def sockets_passed(environ=None):
    """True when LISTEN_PID names this process and LISTEN_FDS is at least 1."""
    environ = os.environ if environ is None else environ
    try:
        return int(environ.get("LISTEN_PID", "")) == os.getpid() and \
            int(environ.get("LISTEN_FDS", "")) > 0
    except ValueError:
        return False


def listen_sockets(environ=None):
    """The listening sockets systemd (or a reloading flupfast) passed to this process, as
    ``[(name, socket)]`` in fd order; [] when LISTEN_PID is not this process.

    Each socket wraps a duplicate of its fd, so the passed fd stays open for a later run() or
    reload, as fd 0 does for mod_fcgid. An fd that is not a listening stream socket is skipped.
    """
    environ = os.environ if environ is None else environ
    if not sockets_passed(environ):
        return []
    count = int(environ["LISTEN_FDS"])
    names = environ.get("LISTEN_FDNAMES", "").split(":")
    found = []
    for index in range(count):
        sock = inherited_listen_socket(LISTEN_FDS_START + index)
        if sock is not None:
            name = names[index] if index < len(names) and names[index] else "unknown"
            found.append((name, sock))
    return found


def listen_socket(environ=None, take=False):
    """The first passed socket (the one a single-socket server serves), or None; any others are
    closed. With ``take``, the passed fds themselves are closed too and the LISTEN_* variables
    removed from ``environ`` (sd_listen_fds' unset_environment): the caller holds the only
    descriptor, as after a bind, and a child cannot mistake the variables for its own."""
    environ = os.environ if environ is None else environ
    passed = listen_sockets(environ)
    for _, extra in passed[1:]:
        extra.close()
    if take and sockets_passed(environ):
        for fd in range(LISTEN_FDS_START, LISTEN_FDS_START + int(environ["LISTEN_FDS"])):
            try:
                os.close(fd)
            except OSError:
                pass
        for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            environ.pop(name, None)
    return passed[0][1] if passed else None


def notify(*lines, environ=None):
    """Send ``KEY=value`` lines to $NOTIFY_SOCKET (``READY=1``, ``RELOADING=1``,
    ``STOPPING=1``, ``STATUS=...``); False, silently, when there is no such socket or the send
    fails (a notice must never stop the server)."""
    environ = os.environ if environ is None else environ
    address = environ.get("NOTIFY_SOCKET")
    if not address or address[0] not in "/@":
        return False
    if address[0] == "@":
        address = "\0" + address[1:]  # the abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall("\n".join(lines).encode("utf-8", "replace"))
    except OSError:
        return False
    return True


def hand_over(sock, environ):
    """Prepare ``sock`` to survive an exec as fd 3 of the next image, announced in ``environ``
    the way systemd announces its sockets (the PID stays the same across exec). Returns the
    environ for ``os.execve``."""
    fd = sock.fileno()
    if fd != LISTEN_FDS_START:
        os.dup2(fd, LISTEN_FDS_START)  # whatever was on fd 3 would be closed by exec anyway
    os.set_inheritable(LISTEN_FDS_START, True)
    environ = dict(environ)
    environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="1", LISTEN_FDNAMES="flupfast")
    return environ
