"""Access control against real server processes: a peer outside ``allowedServers`` (SCGI, AJP)
or FCGI_WEB_SERVER_ADDRS (FastCGI), connecting from a second loopback address (127.0.0.2), is
refused, logged and never served while the listed peer is; Unix sockets get the mode the
requested umask gives; request bodies spooled to disk (multiplexed FastCGI) live in 0600
nameless files in a private 0700 directory, released when the request ends, also when the app
raises or the web server leaves, and the directory goes when the process exits.
"""
import grp
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile

import pytest

from flupfast.body import ClientDisconnected, Spool, spool_directory
from tests import fcgi_client, scgi_client
from tests.reliability.fault_harness import WAIT, Exchange, ask, fd_targets
from tests.waiting import wait_until
from tests.reliability.test_faults import start  # noqa: F401  (a fixture)

STRANGER = "127.0.0.2"
SPOOL_BODY = b"s" * (3 << 20)  # past SPOOL_MEMORY_LIMIT (1 MiB): spooled to a file

REFUSAL_LOG = "Server connection from 127.0.0.2 disallowed"
REFUSALS = 12


@pytest.fixture
def second_loopback_address():
    with socket.socket() as sock:
        try:
            sock.bind((STRANGER, 0))
        except OSError:
            pytest.skip("no 127.0.0.2 loopback address")


@pytest.mark.parametrize("mode", ["thread", "fork", "single"])
@pytest.mark.parametrize("protocol, rule", [("fcgi", "env"), ("fcgi", "option"),
                                            ("scgi", "option"), ("ajp", "option")])
def test_peer_not_allowed_is_refused_logged_and_never_served(start, second_loopback_address,
                                                            protocol, rule, mode):
    """FCGI_WEB_SERVER_ADDRS, or --allowed-servers (allowedServers) for every protocol: the
    stranger's connections are closed unanswered, and logged once per address per minute in
    each process (thread and single mode: once; fork mode: at most once per child)."""
    if rule == "env":
        backend = start(protocol, mode, tcp=True, env={"FCGI_WEB_SERVER_ADDRS": "127.0.0.1"})
    else:
        backend = start(protocol, mode, "--allowed-servers", "127.0.0.1", tcp=True)
    for _ in range(REFUSALS):
        refused = Exchange(backend, "/?stranger", b"", source=STRANGER)
        assert refused.answer().status is None  # closed without an answer
        refused.close()
    assert ask(backend, "/?friend").status == 200
    assert backend.calls() == ["/ friend"]  # the stranger's requests never reached the app
    logged = backend.log().count(REFUSAL_LOG)
    if mode == "fork":
        assert 1 <= logged <= len(backend.children()) < REFUSALS
    else:
        assert logged == 1
    assert ("not in FCGI_WEB_SERVER_ADDRS" if rule == "env" else "") in backend.log()


@pytest.mark.parametrize("protocol", ["fcgi", "scgi"])
@pytest.mark.parametrize("umask, mode", [(0o077, 0o700), (0o027, 0o750), (0o002, 0o775)])
def test_unix_socket_mode_follows_umask(start, protocol, umask, mode):
    backend = start(protocol, "thread", "--umask", "%03o" % umask)
    assert stat.S_ISSOCK(os.stat(backend.address).st_mode)
    assert stat.S_IMODE(os.stat(backend.address).st_mode) == mode
    assert ask(backend, "/").status == 200


SYSTEM_PYTHON = "/usr/bin/python3"  # readable by other users, unlike pyenv's under /root
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONNECT = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "try:\n"
    "    s.connect(sys.argv[1])\n"
    "except PermissionError:\n"
    "    sys.exit(13)\n"
    "s.sendall(bytes.fromhex(sys.argv[2]))\n"
    "data = b''\n"
    "while True:\n"
    "    piece = s.recv(65536)\n"
    "    if not piece:\n"
    "        break\n"
    "    data += piece\n"
    "sys.stdout.write(data.decode('latin-1'))\n")


def connect_as(user, sock_path):
    """(exit status, answer) of an SCGI hello sent to ``sock_path`` by ``user`` (a name or
    uid, with the group of the same name or number and no other); exit status 13: EACCES."""
    done = subprocess.run([SYSTEM_PYTHON, "-c", CONNECT, sock_path,
                           scgi_client.request_bytes("/").hex()],
                          user=user, group=user, extra_groups=[],
                          capture_output=True, timeout=30, cwd="/")
    return done.returncode, done.stdout.decode("latin-1")


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(SYSTEM_PYTHON),
                    reason="needs root (to run as other users) and /usr/bin/python3")
def test_unprivileged_app_behind_a_socket_only_the_web_server_can_open():
    """docs/security.md's recipe: the app runs as its own user (nobody) with --umask 007 in a
    setgid 2750 directory of the web server's group (www-data): the socket is 0770, group
    www-data; www-data is served, any other user gets EACCES."""
    try:
        app_user, web_group = pwd.getpwnam("nobody"), grp.getgrnam("www-data")
    except KeyError:
        pytest.skip("no nobody user or www-data group")
    top = tempfile.mkdtemp(prefix="flupfast-unpriv-", dir="/tmp")
    os.chmod(top, 0o755)
    run_dir = os.path.join(top, "run")
    os.mkdir(run_dir)
    os.chown(run_dir, app_user.pw_uid, web_group.gr_gid)
    os.chmod(run_dir, 0o2750)
    sock_path = os.path.join(run_dir, "app.sock")
    # The package copied where nobody can read it (a checkout under root's home, or in a
    # 0700 temporary directory, is not): the pure twins, no build.
    lib = os.path.join(top, "lib")
    shutil.copytree(os.path.join(ROOT, "flupfast"), os.path.join(lib, "flupfast"),
                    ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"))
    for here, dirs, files in os.walk(lib):
        os.chmod(here, 0o755)
        for name in files:
            os.chmod(os.path.join(here, name), 0o644)
    env = {"PYTHONPATH": lib, "FLUPFAST_SPEEDUPS": "0", "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([SYSTEM_PYTHON, "-m", "flupfast", "--protocol", "scgi",
                             "--bind", "unix:" + sock_path, "--umask", "007"],
                            user="nobody", group="nogroup", extra_groups=[], env=env, cwd="/",
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_until(lambda: os.path.exists(sock_path) or proc.poll() is not None, 30)
        assert proc.poll() is None, proc.stderr.read().decode()
        info = os.stat(sock_path)
        assert stat.S_IMODE(info.st_mode) == 0o770
        assert (info.st_uid, info.st_gid) == (app_user.pw_uid, web_group.gr_gid)
        status, answer = connect_as("www-data", sock_path)
        assert status == 0 and answer.startswith("Status: 200"), (status, answer)
        assert connect_as(54321, sock_path)[0] == 13  # a stranger: EACCES at the directory
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        proc.stderr.close()
        shutil.rmtree(top, ignore_errors=True)


# -- spooled bodies -----------------------------------------------------------------------------

def spool_files(pid):
    """{fd: (mode bits, link count, directory)} of ``pid``'s open files in a spool directory."""
    found = {}
    for fd, target in fd_targets(pid).items():
        if "/flupfast-spool-" in target:
            st = os.stat("/proc/%d/fd/%d" % (pid, fd))
            found[fd] = (stat.S_IMODE(st.st_mode), st.st_nlink, os.path.dirname(target))
    return found


def assert_private(files):
    assert files
    for mode, links, directory in files.values():
        assert mode == 0o600
        assert links == 0  # no name anywhere: nobody can open it by path
        st = os.stat(directory)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()


@pytest.mark.parametrize("ending", ["answer", "app-raises", "client-leaves"])
def test_spooled_body_private_and_released(start, tmp_path, ending):
    backend = start("fcgi", "thread", "--multiplexed")
    uri = "/spool?tag=s" + ("&raise=1" if ending == "app-raises" else "")
    head, rest = fcgi_client.request_bytes(uri, body=SPOOL_BODY, split=True)
    sock = backend.connect()
    try:
        sock.sendall(head)
        sock.sendall(rest if ending != "client-leaves" else rest[:2 << 20])
        files = wait_until(lambda: spool_files(backend.pid), WAIT)
        assert_private(files)
        directory = next(iter(files.values()))[2]
        if ending == "client-leaves":
            sock.close()
        (backend.workdir / "s.go").write_text("go")
        if ending != "client-leaves":
            answer = fcgi_client.read_response(sock)
            if ending == "answer":
                assert answer.status == 200 and answer.body == str(len(SPOOL_BODY)).encode()
            else:
                assert answer.status == 500
    finally:
        sock.close()
    wait_until(lambda: not spool_files(backend.pid), WAIT)
    assert ask(backend, "/").status == 200
    backend.signal(signal.SIGTERM)
    assert backend.wait_exit() == 0
    assert not os.path.exists(directory)  # removed at exit


def test_spool_in_process_file_is_private_and_closed():
    spool = Spool(memory_limit=10)
    spool.push(b"0123456789abcdef")
    fd = spool._file.fileno()
    st = os.fstat(fd)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_nlink == 0
    assert os.readlink("/proc/self/fd/%d" % fd).startswith(spool_directory() + "/")
    assert stat.S_IMODE(os.stat(spool_directory()).st_mode) == 0o700
    assert spool.pull() == b"0123456789abcdef"
    spool.close()
    with pytest.raises(OSError):
        os.fstat(fd)
    spool.push(b"late")  # after close: dropped, nothing reopened
    assert spool._file is None
    with pytest.raises(ClientDisconnected):
        spool.pull()
