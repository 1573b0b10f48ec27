"""flupfast.server.paste_factory through Paste Deploy: a real ini file names the runner by its
``paste.server_runner`` entry point (flup's names: ``egg:flupfast#fcgi_thread`` ...), a
subprocess loads it with ``loadserver``/``loadapp`` and serves, the test sends one request in
the protocol. flup's runners all raise NameError on Python 3
(known_differences 'paste-factory-py3'); the uwsgi runners (not in flup) take SCGI's keys.
"""
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from flupfast.server import NoDefault
from flupfast.server import paste_factory as pf
from tests import fcgi_client, scgi_client, uwsgi_client
from tests.ajp_client import Response, read_container_packets, request_bytes
from tests.apps import probe
from tests.integration.backend_process import ROOT, free_port, wait_connectable

paste_deploy = pytest.importorskip('paste.deploy')

LOADER = ('import sys\n'
          'from paste.deploy import loadapp, loadserver\n'
          'ini = "config:" + sys.argv[1]\n'
          'loadserver(ini)(loadapp(ini))\n')

INI = """\
[DEFAULT]
debug = {debug}

[app:main]
use = call:tests.apps.paste_app:make_app
greeting = hello from the ini

[server:main]
use = egg:flupfast#{entry}
{address}
{pool}
"""

RUNNERS = {  # entry point name -> (protocol, runner)
    'fcgi': ('fcgi', pf.run_fcgi_thread), 'fcgi_thread': ('fcgi', pf.run_fcgi_thread),
    'fcgi_fork': ('fcgi', pf.run_fcgi_fork), 'scgi': ('scgi', pf.run_scgi_thread),
    'scgi_thread': ('scgi', pf.run_scgi_thread), 'scgi_fork': ('scgi', pf.run_scgi_fork),
    'ajp': ('ajp', pf.run_ajp_thread), 'ajp_thread': ('ajp', pf.run_ajp_thread),
    'ajp_fork': ('ajp', pf.run_ajp_fork), 'uwsgi': ('uwsgi', pf.run_uwsgi_thread),
    'uwsgi_thread': ('uwsgi', pf.run_uwsgi_thread), 'uwsgi_fork': ('uwsgi', pf.run_uwsgi_fork),
}


def test_entry_points_are_flups_names():
    from importlib.metadata import entry_points
    found = {ep.name: ep.value for ep in entry_points(group='paste.server_runner')
             if ep.value.startswith('flupfast.')}
    # The installed metadata's: after editing pyproject.toml's list, reinstall to see it here.
    assert found == {name: 'flupfast.server.paste_factory:%s' % runner.__name__
                     for name, (_, runner) in RUNNERS.items()}


class PasteServer:
    def __init__(self, tmp_path, entry, address_lines, address, debug=False):
        fork = entry.endswith('_fork')
        pool = 'minSpare = 1\nmaxSpare = 2\n' + ('maxChildren = 3\nmaxRequests = 100'
                                                if fork else 'maxThreads = 4')
        ini = tmp_path / 'site.ini'
        ini.write_text(INI.format(debug='true' if debug else 'false', entry=entry,
                                  address=textwrap.dedent(address_lines), pool=pool))
        env = dict(os.environ, PYTHONPATH=ROOT)
        self.proc = subprocess.Popen([sys.executable, '-c', LOADER, str(ini)], cwd=ROOT,
                                     env=env, stderr=subprocess.PIPE)
        try:
            wait_connectable(address, self.proc)
        except BaseException:
            self.stop()
            raise

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.stderr.read().decode('utf-8', 'replace')


def fetch(protocol, address, path):
    """(status, {header: value}, body) for GET ``path`` in ``protocol``."""
    if protocol == 'fcgi':
        resp = fcgi_client.roundtrip(address, path, params={'SCRIPT_NAME': ''})
        return resp.status, dict(line.decode('latin-1').split(': ', 1)
                                 for line in resp.head.split(b'\r\n')[1:]), resp.body
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    with socket.socket(family) as sock:
        sock.settimeout(20)
        sock.connect(address)
        if protocol in ('scgi', 'uwsgi'):
            client = scgi_client if protocol == 'scgi' else uwsgi_client
            sock.sendall(client.request_bytes(path))
            status, headers, body = client.parse_response(client.read_all(sock))
            return int(status[:3]), {k.decode(): v.decode('latin-1') for k, v in headers}, body
        sock.sendall(request_bytes('GET', path))
        buf, packets = b'', []
        while not packets or packets[-1][0] != 'end':
            data = sock.recv(1 << 20)
            assert data, 'AJP connection closed before END_RESPONSE'
            new, buf = read_container_packets(buf + data)
            packets += new
        resp = Response(packets)
        return resp.status, {k.decode(): v.decode('latin-1') for k, v in resp.headers}, \
            resp.body


@pytest.mark.parametrize('entry', sorted(RUNNERS))
def test_ini_file_serves_through_each_runner(tmp_path, entry):
    protocol = RUNNERS[entry][0]
    port = free_port()
    lines = 'host = 127.0.0.1\nport = %d\nallowedServers = 127.0.0.1 ::1' % port
    if protocol == 'fcgi':
        lines = 'host = 127.0.0.1\nport = %d\nmultiplexed = no\numask = 022' % port
    server = PasteServer(tmp_path, entry, lines, ('127.0.0.1', port))
    try:
        status, headers, body = fetch(protocol, ('127.0.0.1', port), '/')
    finally:
        log = server.stop()
    assert (status, body) == (200, probe.HELLO), log
    assert headers['X-Paste-Greeting'] == 'hello from the ini'


def test_fcgi_unix_socket_and_debug_from_global_conf(tmp_path):
    """``socket =`` binds a Unix socket; ``debug`` comes from [DEFAULT] (global_conf) and
    turns the 500 page into a traceback page."""
    path = str(tmp_path / 'app.sock')
    server = PasteServer(tmp_path, 'fcgi_thread', 'socket = %s' % path, path, debug=True)
    try:
        status, _, body = fetch('fcgi', path, '/error')
    finally:
        log = server.stop()
    assert status == 500, log
    assert b'RuntimeError' in body and b'probe: error before start_response' in body


@pytest.mark.parametrize('value,expected', [
    ('true', True), (' Yes ', True), ('on', True), ('1', True), ('t', True),
    ('false', False), ('NO', False), ('off', False), ('0', False), ('f', False),
    (1, True), (0, False), (None, False)])
def test_asbool(value, expected):
    assert pf.asbool(value) is expected


def test_asbool_rejects_other_strings():
    with pytest.raises(ValueError, match='not true/false'):
        pf.asbool('maybe')


def test_aslist():
    assert pf.aslist('127.0.0.1  10.0.0.1 ') == ['127.0.0.1', '10.0.0.1']
    assert pf.aslist('a, b', sep=',') == ['a', 'b']
    assert pf.aslist(['x']) == ['x'] and pf.aslist(None) == [] and pf.aslist(5) == [5]


def test_fcgi_address_rules():
    assert pf._fcgi_address(None, None, None) is None  # fd 0: mod_fcgid, spawn-fcgi
    assert pf._fcgi_address('127.0.0.1', '9000', None) == ('127.0.0.1', 9000)
    assert pf._fcgi_address(None, None, '/run/app.sock') == '/run/app.sock'
    with pytest.raises(ValueError, match='not both'):
        pf._fcgi_address('127.0.0.1', '9000', '/run/app.sock')
    with pytest.raises(ValueError, match='without a port'):
        pf._fcgi_address('127.0.0.1', None, None)


def test_bad_pool_value_is_a_clear_error():
    with pytest.raises(ValueError):
        pf.run_scgi_thread(None, {}, port='4000', maxThreads='many')
    assert pf.run_scgi_thread.__defaults__[0] is NoDefault  # scriptName, as flup's
