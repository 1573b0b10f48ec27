"""docs/systemd.md's unit pair, run as systemd would run it, read from the page: the .socket's
ListenStream made by ``systemd-socket-activate`` (PID 1 is not systemd on the test machines,
so the units themselves cannot be started), the .service's ExecStart with its Type=notify
socket, ExecReload's SIGHUP and KillSignal: READY=1 with MAINPID, a request answered on the
passed socket, RELOADING=1 then READY=1 again from the same PID, STOPPING=1 and exit status 0.
"""
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys


from tests.integration.peers import REPO, ManagedProcess, require
from tests.waiting import wait_until

PAGE = REPO / 'docs' / 'systemd.md'


def unit(name):
    """{key: value} of the page's ``/etc/systemd/system/NAME`` block."""
    text = PAGE.read_text()
    match = re.search(r'`/etc/systemd/system/%s`:\n\n```ini\n(.*?)```' % re.escape(name), text,
                      re.S)
    assert match, name
    return dict(line.split('=', 1) for line in match.group(1).splitlines() if '=' in line)


def notices(sock, timeout=30):
    """The next datagram's KEY=value lines, as a dict."""
    sock.settimeout(timeout)
    data = sock.recv(4096).decode()
    return dict(line.split('=', 1) for line in data.splitlines() if '=' in line)


def test_the_documented_unit_pair_under_socket_activation(tmp_path):
    activate = shutil.which('systemd-socket-activate') or '/usr/bin/systemd-socket-activate'
    require(activate, 'systemd-socket-activate (Debian: systemd)')
    socket_unit, service = unit('myapp.socket'), unit('myapp.service')
    assert service['Type'] == 'notify' and service['KillSignal'] == 'SIGTERM'
    assert service['ExecReload'] == '/bin/kill -HUP $MAINPID'
    # The stop's signal to the main process alone, which drains the fork children: with the
    # default control-group, each child got SIGTERM too and died in its request.
    assert service['KillMode'] == 'mixed'
    listen = str(tmp_path / os.path.basename(socket_unit['ListenStream']))
    argv = shlex.split(service['ExecStart'])
    assert argv[0].endswith('/python') and argv[1:3] == ['-m', 'flupfast'], argv
    argv = [sys.executable] + argv[1:3] + ['tests.apps.probe:app' if a == 'myapp:application'
                                           else a for a in argv[3:]]
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / 'notify'))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    backend = ManagedProcess('backend', [activate, '-l', listen, '-E',
                                         'NOTIFY_SOCKET=%s' % (tmp_path / 'notify')] + argv,
                             env=env, cwd=str(REPO), log_dir=tmp_path)

    def ask():
        proc = subprocess.run([sys.executable, '-m', 'flupfast.client', 'fcgi', listen, '/'],
                              env=env, capture_output=True, timeout=30)
        return proc.stdout.rpartition(b'\r\n\r\n')[2]

    try:
        # systemd-socket-activate starts the service at the first connection, as a .socket
        # unit without Accept= does: that request waits in the socket's backlog.

        def listening():
            assert backend.alive(), backend.describe()
            return os.path.exists(listen)
        wait_until(listening, 30, what=lambda: '%s\n%s' % (listen, backend.describe()))
        assert ask() == b'Hello world!\n'
        ready = notices(notify)
        assert ready.get('READY') == '1' and ready['MAINPID'] == str(backend.pid), ready
        assert 'passed on fd 3' in ready['STATUS'], ready
        os.kill(int(ready['MAINPID']), signal.SIGHUP)  # ExecReload
        assert notices(notify).get('RELOADING') == '1'
        again = notices(notify)
        assert again.get('READY') == '1' and again['MAINPID'] == ready['MAINPID'], again
        assert ask() == b'Hello world!\n'
        os.kill(backend.pid, signal.SIGTERM)  # KillSignal
        assert notices(notify).get('STOPPING') == '1'
        wait_until(lambda: not backend.alive(), 30,
                   what=lambda: 'the service to exit\n' + backend.describe())
        assert backend.status() == 'exited 0', backend.describe()
    finally:
        notify.close()
        backend.stop()
