"""Who may open the Unix socket: a server run as root behind nginx, whose workers run as
www-data. ``--umask 007`` alone leaves the socket root:root 0770 and nginx answers 502;
``--socket-owner``/``--socket-mode`` (PHP-FPM's listen.owner, listen.group, listen.mode) make
the recipe work as written.
"""
import grp
import http.client
import os
import stat
import sys

import pytest

from tests.integration.backend_process import free_port
from tests.integration.nginx import launch_nginx
from tests.integration.peers import (
    NGINX, REPO, IO_TIMEOUT, ManagedProcess, make_tempdir, nginx_config, remove_tempdir,
    require, require_root, tail, wait_until_connectable)

pytestmark = pytest.mark.peer

PASS = {'fcgi': 'include /etc/nginx/fastcgi_params; fastcgi_pass unix:{sock};',
        'scgi': 'include /etc/nginx/scgi_params; scgi_pass unix:{sock};'}

HTTP = """\
    server {{
        listen 127.0.0.1:{port};
        location / {{ {pass_} }}
    }}
"""


def serve_through_nginx(protocol, options):
    """Start the backend (as root, umask 022) and nginx; return (status, socket stat, root)."""
    require(NGINX, 'nginx')
    require_root()
    try:
        grp.getgrnam('www-data')
    except KeyError:
        pytest.skip('no www-data group')
    root = make_tempdir('socket-owner')
    (root / 'tmp').mkdir()
    sock = root / 'app.sock'
    port = free_port()
    processes = []
    try:
        backend = ManagedProcess(
            'backend', [sys.executable, '-m', 'flupfast', 'tests.apps.probe:app', '--protocol',
                        protocol, '--bind', 'unix:%s' % sock] + options,
            env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=str(REPO), umask=0o022,
            log_dir=root)
        processes.append(backend)
        wait_until_connectable(str(sock), backend)
        processes.append(launch_nginx(root, nginx_config(root, HTTP.format(
            port=port, pass_=PASS[protocol].format(sock=sock))), [port]))
        conn = http.client.HTTPConnection('127.0.0.1', port, timeout=IO_TIMEOUT)
        conn.request('GET', '/')
        status = conn.getresponse().status
        conn.close()
        return status, os.stat(sock), tail(root / 'error.log')
    finally:
        for process in reversed(processes):
            process.stop()
        remove_tempdir(root)


@pytest.mark.parametrize('protocol', ['fcgi', 'scgi'])
def test_umask_alone_leaves_nginx_outside(protocol):
    status, st, error_log = serve_through_nginx(protocol, ['--umask', '007'])
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o770)
    assert status == 502 and 'Permission denied' in error_log


@pytest.mark.parametrize('protocol', ['fcgi', 'scgi'])
def test_socket_group_and_mode_let_nginx_in(protocol):
    status, st, error_log = serve_through_nginx(
        protocol, ['--socket-owner', 'root:www-data', '--socket-mode', '660'])
    assert (st.st_uid, st.st_gid) == (0, grp.getgrnam('www-data').gr_gid)
    assert stat.S_IMODE(st.st_mode) == 0o660
    assert status == 200, error_log


def test_socket_owner_alone_takes_the_users_group():
    status, st, error_log = serve_through_nginx('fcgi', ['--socket-owner', 'www-data',
                                                         '--umask', '077'])
    www = grp.getgrnam('www-data').gr_gid
    assert (st.st_gid, stat.S_IMODE(st.st_mode)) == (www, 0o700)
    assert status == 200, error_log
