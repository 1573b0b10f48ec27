"""flupfast.serving.systemd: the LISTEN_FDS and NOTIFY_SOCKET protocols, as sd_listen_fds(3) and
sd_notify(3) define them. Passing fds runs in a child interpreter (fd 3 is the child's)."""
import os
import socket
import subprocess
import sys
import textwrap

from flupfast.serving import systemd

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = textwrap.dedent('''
    import os, socket, sys
    from flupfast.serving import systemd
    sources = [int(fd) for fd in sys.argv[1:]]
    assert min(sources) > 2 + len(sources)  # placing them on 3, 4, ... clobbers none of them
    for index, fd in enumerate(sources):
        os.dup2(fd, 3 + index)
        os.close(fd)
    os.environ['LISTEN_PID'] = str(os.getpid())
    print(systemd.sockets_passed())
    found = systemd.listen_sockets()
    print([(name, sock.getsockname()[0]) for name, sock in found])
    sock = systemd.listen_socket(take=True)
    print(sock.getsockname()[0] if sock else None, 'LISTEN_PID' in os.environ)
    try:
        os.fstat(3)
        print('fd 3 open')
    except OSError:
        print('fd 3 closed')
''')


def run_child(fds, env):
    """Run CHILD with ``fds`` placed on 3, 4, ... (it sets LISTEN_PID to its own PID) and
    ``env`` added."""
    proc = subprocess.run([sys.executable, '-c', CHILD] + [str(fd) for fd in fds],
                          env=dict(os.environ, PYTHONPATH=ROOT, **env), pass_fds=fds,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_passed_sockets_are_found_named_and_taken():
    with socket.socket() as a, socket.socket() as b, socket.socket() as not_listening:
        for sock in (a, b):
            sock.bind(('127.0.0.1', 0))
            sock.listen()
        not_listening.bind(('127.0.0.2', 0))
        lines = run_child([a.fileno(), not_listening.fileno(), b.fileno()],
                          {'LISTEN_FDS': '3', 'LISTEN_FDNAMES': 'web:junk:admin'})
    assert lines == ['True', "[('web', '127.0.0.1'), ('admin', '127.0.0.1')]",
                     '127.0.0.1 False', 'fd 3 closed']


def test_sockets_for_another_pid_are_not_ours():
    assert systemd.sockets_passed({'LISTEN_PID': str(os.getpid() + 1), 'LISTEN_FDS': '1'}) is False
    assert systemd.sockets_passed({'LISTEN_PID': str(os.getpid()), 'LISTEN_FDS': '0'}) is False
    assert systemd.listen_sockets({'LISTEN_PID': '1', 'LISTEN_FDS': '1'}) == []
    assert systemd.listen_sockets({'LISTEN_PID': 'x', 'LISTEN_FDS': '1'}) == []
    assert systemd.listen_sockets({}) == []


def test_notify_sends_one_datagram(tmp_path):
    path = str(tmp_path / 'notify')
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(path)
        assert systemd.notify('READY=1', 'STATUS=serving', environ={'NOTIFY_SOCKET': path})
        assert listener.recv(4096) == b'READY=1\nSTATUS=serving'


def test_notify_abstract_socket():
    name = '@flupfast-test-%d' % os.getpid()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind('\0' + name[1:])
        assert systemd.notify('STOPPING=1', environ={'NOTIFY_SOCKET': name})
        assert listener.recv(4096) == b'STOPPING=1'


def test_notify_without_a_socket_is_a_quiet_no(tmp_path):
    assert systemd.notify('READY=1', environ={}) is False
    assert systemd.notify('READY=1', environ={'NOTIFY_SOCKET': str(tmp_path / 'none')}) is False
    assert systemd.notify('READY=1', environ={'NOTIFY_SOCKET': 'relative'}) is False
