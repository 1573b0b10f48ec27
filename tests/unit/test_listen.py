"""listen.py: binding (Unix with umask, TCP v4/v6), fd-0 detection in a subprocess (a listening
Unix or TCP socket vs a pipe, a file, a connected socket or nothing), fd flags."""
import errno
import json
import os
import socket
import stat
import subprocess
import sys
import textwrap

import pytest

from flupfast.serving.listen import (
    bind_listen_socket, inherited_listen_socket, resolve_owner, set_cloexec, set_nodelay)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ipv6_loopback_available():
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


def accepts_connection(listener, family, address):
    with socket.socket(family) as client:
        client.settimeout(5)
        client.connect(address)
        conn, _ = listener.accept()
        conn.close()
    return True


def test_unix_socket_with_umask_restores_process_umask(tmp_path):
    path = str(tmp_path / "app.sock")
    socket.socket(socket.AF_UNIX).bind(path)  # a stale socket: unlinked first, as flup does
    before = os.umask(0o022)
    try:
        sock = bind_listen_socket(path, umask=0o077)
        try:
            assert os.umask(0o022) == 0o022  # restored after listen()
            mode = os.stat(path).st_mode
            assert stat.S_ISSOCK(mode)
            assert stat.S_IMODE(mode) & 0o077 == 0
            assert sock.family == socket.AF_UNIX
            assert not os.get_inheritable(sock.fileno())
            assert accepts_connection(sock, socket.AF_UNIX, path)
        finally:
            sock.close()
    finally:
        os.umask(before)
    assert os.path.exists(path)  # flup leaves the socket file behind; so do we


@pytest.mark.parametrize('owner', ['nobody', '65534', 'nobody:nogroup', ':nogroup',
                                   (65534, -1)])
def test_unix_socket_owner_and_mode_set_before_listen(tmp_path, owner):
    import grp
    import pwd
    if os.geteuid() != 0:
        pytest.skip('chown to another user needs root')
    try:
        nobody, nogroup = pwd.getpwnam('nobody'), grp.getgrnam('nogroup')
    except KeyError:
        pytest.skip('no nobody/nogroup here')
    uid, gid = resolve_owner(owner)
    path = str(tmp_path / 's.sock')
    sock = bind_listen_socket(path, owner=owner, mode=0o640)
    try:
        st = os.stat(path)
        assert stat.S_IMODE(st.st_mode) == 0o640
        assert st.st_uid == (nobody.pw_uid if uid != -1 else 0)
        expected_gid = {'nobody': nobody.pw_gid, '65534': nobody.pw_gid}.get(owner, nogroup.gr_gid)
        if owner == (65534, -1):
            expected_gid = 0  # the group left as it was
        assert st.st_gid == expected_gid
    finally:
        sock.close()


@pytest.mark.parametrize('owner, message', [('no-such-user-x', "no such user: 'no-such-user-x'"),
                                            (':no-such-group-x', "no such group: "
                                                                 "'no-such-group-x'")])
def test_unknown_socket_owner_is_named(owner, message):
    with pytest.raises(ValueError, match=message):
        resolve_owner(owner)


def test_unix_socket_accepts_path_like(tmp_path):
    sock = bind_listen_socket(tmp_path / "p.sock")
    with sock:
        assert sock.getsockname() == str(tmp_path / "p.sock")


def test_tcp_v4():
    sock = bind_listen_socket(("127.0.0.1", 0))
    with sock:
        assert sock.family == socket.AF_INET
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)
        assert accepts_connection(sock, socket.AF_INET, sock.getsockname())


@pytest.mark.skipif(not ipv6_loopback_available(), reason="no IPv6 loopback")
@pytest.mark.parametrize("address", [("::1", 0, 0, 0), ("::1", 0)])
def test_tcp_v6(address):
    # A 4-tuple is IPv6 as in flup; a 2-tuple with an IPv6 literal is an addition.
    sock = bind_listen_socket(address)
    with sock:
        assert sock.family == socket.AF_INET6
        assert accepts_connection(sock, socket.AF_INET6, sock.getsockname()[:2])


@pytest.mark.parametrize("bad", [["127.0.0.1", 0], ("127.0.0.1",), 4000, b"/tmp/x.sock"])
def test_rejects_other_address_types(bad):
    with pytest.raises(TypeError):
        bind_listen_socket(bad)


def test_bind_failure_raises():
    # SO_REUSEADDR does not allow two listeners on one port: EADDRINUSE propagates (as flup).
    with bind_listen_socket(("127.0.0.1", 0)) as taken:
        with pytest.raises(OSError):
            bind_listen_socket(taken.getsockname())


def test_set_nodelay_tcp_and_unix():
    with bind_listen_socket(("127.0.0.1", 0)) as listener, socket.socket() as client:
        client.connect(listener.getsockname())
        conn, _ = listener.accept()
        with conn:
            set_nodelay(conn)
            assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    left, right = socket.socketpair()
    with left, right:
        set_nodelay(left)  # AF_UNIX: silently nothing


def test_set_cloexec_on_raw_fd():
    read_fd, write_fd = os.pipe()
    try:
        os.set_inheritable(read_fd, True)
        set_cloexec(read_fd)
        assert not os.get_inheritable(read_fd)
    finally:
        os.close(read_fd)
        os.close(write_fd)


# -- fd 0 detection, in a subprocess whose stdin is the thing under test ------------------------

PROBE = textwrap.dedent("""
    import json, os, socket, sys
    sys.path.insert(0, %r)
    from flupfast.serving.listen import inherited_listen_socket
    sock = inherited_listen_socket()
    out = {"found": sock is not None}
    if sock is not None:
        out["family"] = int(sock.family)
        out["fd_differs"] = sock.fileno() != 0
        sock.close()
    os.fstat(0)  # fd 0 must still be open (raises EBADF otherwise) ...
    out["fd0_open"] = True
    print(json.dumps(out))
""" % ROOT)


def probe(stdin):
    result = subprocess.run([sys.executable, "-c", PROBE], stdin=stdin, capture_output=True,
                            timeout=30, check=False)
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def test_fd0_unix_listening_socket(tmp_path):
    with bind_listen_socket(str(tmp_path / "fd0.sock")) as listener:
        out = probe(listener.fileno())
    assert out == {"found": True, "family": socket.AF_UNIX, "fd_differs": True,
                   "fd0_open": True}


def test_fd0_tcp_listening_socket():
    with bind_listen_socket(("127.0.0.1", 0)) as listener:
        out = probe(listener.fileno())
    assert out["found"] and out["family"] == socket.AF_INET


def test_fd0_pipe_is_none():
    read_fd, write_fd = os.pipe()
    try:
        assert probe(read_fd) == {"found": False, "fd0_open": True}
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_fd0_regular_file_is_none(tmp_path):
    path = tmp_path / "stdin.txt"
    path.write_text("GET / HTTP/1.0\n")
    with open(path, "rb") as stdin:
        assert probe(stdin) == {"found": False, "fd0_open": True}


def test_fd0_dev_null_is_none():
    assert probe(subprocess.DEVNULL) == {"found": False, "fd0_open": True}


def test_fd0_connected_socket_is_none():
    # A CGI request whose stdin is a socket is not a FastCGI listener.
    left, right = socket.socketpair()
    with left, right:
        assert probe(left.fileno()) == {"found": False, "fd0_open": True}


def test_closed_fd_is_none():
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    os.close(write_fd)
    assert inherited_listen_socket(read_fd) is None


def test_a_path_that_is_not_a_socket_is_refused_and_left_alone(tmp_path):
    """flup unlinks whatever is at the path (known_differences 'unix-bind-not-a-socket'): a
    mistyped path deleted a file. A socket left there is replaced, as flup does."""
    notes = tmp_path / 'notes.txt'
    notes.write_text('keep me')
    with pytest.raises(FileExistsError, match='it exists and is not a socket'):
        bind_listen_socket(str(notes))
    assert notes.read_text() == 'keep me'
    stale = tmp_path / 'stale.sock'
    socket.socket(socket.AF_UNIX).bind(str(stale))
    with bind_listen_socket(str(stale)) as sock:
        assert sock.getsockname() == str(stale)


def test_an_owner_that_cannot_be_set_leaves_no_socket_and_says_so(tmp_path, monkeypatch):
    """Changing a socket's owner takes root: the message says which owner and why, and the
    socket made a moment before is removed (found in review: "cannot listen ... Operation not
    permitted", the socket left behind)."""
    def refuse(path, uid, gid):
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), path)
    monkeypatch.setattr(os, 'chown', refuse)
    path = tmp_path / 'own.sock'
    with pytest.raises(PermissionError) as caught:
        bind_listen_socket(str(path), owner='root:root')
    assert caught.value.strerror == ('cannot give it to root:root: Operation not permitted '
                                     '(changing an owner takes root)')
    assert not path.exists()
