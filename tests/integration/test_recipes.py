"""docs/deployment.md's recipes, run as written against the real servers: each section's
snippets are read from the page (no second copy here), only paths and ports are replaced (the
socket, the ports, the venv, the app module), and the front must answer 200 with the app's
hello, take a 2 MiB upload, and give the app a decoded PATH_INFO where the recipe promises one.
"""
import hashlib
import http.client
import json
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.integration.backend_process import free_port
from tests.integration.nginx import launch_nginx, nginx_config
from tests.integration.peers import (
    APACHE, APACHE_BASE_CONF, APACHE_MODULES, IO_TIMEOUT, NGINX, REPO, ManagedProcess,
    ServerSpec, fcgid_venv, make_tempdir, remove_tempdir, require, require_root, tail,
    wait_until_connectable)

pytestmark = pytest.mark.peer

PAGE = REPO / 'docs' / 'deployment.md'
LIGHTTPD = '/usr/sbin/lighttpd'
UPLOAD = bytes(range(256)) * 8192  # 2 MiB: past nginx's and mod_fcgid's default body limits
PROBE = REPO / 'tests' / 'apps' / 'probe.py'


def sections():
    """{heading: [(language, code)]} of the page's '## ' sections."""
    found = {}
    for part in re.split(r'^## ', PAGE.read_text(), flags=re.M)[1:]:
        heading, _, body = part.partition('\n')
        found[heading.strip()] = re.findall(r'^```(\w+)\n(.*?)^```', body, flags=re.M | re.S)
    return found


def snippet(section, language):
    (code,) = [c for lang, c in sections()[section] if lang == language]
    return code


class Recipe:
    """One section's servers, started from its snippets with paths and ports replaced."""

    def __init__(self, section):
        self.section = section
        self.root = make_tempdir('recipe')
        for sub in ('tmp', 'run', 'logs', 'htdocs', 'app'):
            (self.root / sub).mkdir()
            (self.root / sub).chmod(0o755)
        self.port = free_port()
        self.backend_ports = {p: free_port() for p in ('9000', '4000', '8009')}
        self.processes = []
        # The app the recipes name, myapp:application, is the probe app.
        (self.root / 'app' / 'myapp.py').write_text(
            'from tests.apps.probe import app as application\n')

    def paths(self, text):
        """The one edit a user makes to a recipe: where things are on this machine."""
        text = text.replace('/run/myapp.sock', str(self.root / 'run' / 'myapp.sock'))
        text = text.replace('/srv/myapp/htdocs', str(self.root / 'htdocs'))
        for port, ours in self.backend_ports.items():
            text = text.replace('127.0.0.1:%s' % port, '127.0.0.1:%d' % ours)
        text = text.replace('listen 80;', 'listen 127.0.0.1:%d;' % self.port)
        # nginx reads these relative to its configuration directory, /etc/nginx on a real host.
        text = re.sub(r'include (fastcgi_params|scgi_params|uwsgi_params);',
                      r'include /etc/nginx/\1;', text)
        return text

    # -- the backend, from the section's command line ------------------------------------
    def start_backend(self):
        command = self.paths(snippet(self.section, 'sh')).replace('\\\n', ' ')
        argv = shlex.split(command)
        assert argv[:3] == ['python', '-m', 'flupfast'], argv
        backend = ManagedProcess('backend', [sys.executable] + argv[1:],
                                 env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                     [str(REPO), str(self.root / 'app')])),
                                 cwd=str(self.root / 'app'), umask=0o022, log_dir=self.root)
        self.processes.append(backend)
        bind = argv[argv.index('--bind') + 1]
        if bind.startswith('unix:'):
            wait_until_connectable(bind[5:], backend)
        else:
            host, _, port = bind.rpartition(':')
            wait_until_connectable((host, int(port)), backend)
        return backend

    # -- the fronts ------------------------------------------------------------------------
    def start_nginx(self):
        require(NGINX, 'nginx')
        http_block = self.paths(snippet(self.section, 'nginx'))
        if http_block.lstrip().startswith('location'):
            http_block = 'server {\n    listen 127.0.0.1:%d;\n%s}\n' % (self.port, http_block)
        self.processes.insert(0, launch_nginx(
            self.root, nginx_config(self.root, http_block, worker_connections=64), [self.port],
            'front'))

    def start_apache(self, modules):
        require(APACHE, 'apache2')
        body = 'Listen 127.0.0.1:%d\n%s' % (self.port, self.paths(snippet(self.section, 'apache')))
        conf = self.root / 'httpd.conf'
        conf.write_text(APACHE_BASE_CONF.format(
            root=self.root, mods=APACHE_MODULES, loglevel='info', timeout=IO_TIMEOUT, body=body,
            modules='\n'.join('LoadModule %s_module %s/mod_%s.so' % (m, APACHE_MODULES, m)
                              for m in modules)))
        self._front([APACHE, '-d', str(self.root), '-f', str(conf), '-DFOREGROUND'],
                    self.root / 'logs' / 'error.log',
                    env={'PATH': os.environ.get('PATH', '/usr/bin:/bin'), 'LANG': 'C'})

    def start_lighttpd(self):
        require(LIGHTTPD, 'lighttpd')
        own = self.root / 'lighttpd'  # lighttpd opens its log and spool as www-data
        own.mkdir()
        www = pwd.getpwnam('www-data')
        os.chown(str(own), www.pw_uid, www.pw_gid)
        conf = self.root / 'lighttpd.conf'
        conf.write_text('\n'.join([
            'server.modules = ( )',
            'server.document-root = "%s"' % (self.root / 'htdocs'),
            'server.bind = "127.0.0.1"', 'server.port = %d' % self.port,
            'server.pid-file = "%s"' % (self.root / 'lighttpd.pid'),
            'server.errorlog = "%s"' % (own / 'error.log'),
            'server.upload-dirs = ( "%s" )' % own,
            'server.username = "www-data"', 'server.groupname = "www-data"',
            self.paths(snippet(self.section, 'lighttpd'))]))
        self._front([LIGHTTPD, '-D', '-f', str(conf)], own / 'error.log')

    def _front(self, argv, log, env=None):
        front = ManagedProcess('front', argv, logs=[log], log_dir=self.root, env=env)
        self.processes.insert(0, front)
        wait_until_connectable(('127.0.0.1', self.port), front)

    # -- requests --------------------------------------------------------------------------
    def request(self, method, path, body=None):
        conn = http.client.HTTPConnection('127.0.0.1', self.port, timeout=IO_TIMEOUT)
        try:
            conn.request(method, path, body=body, headers={'Host': 'localhost'})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def describe(self):
        return '\n'.join('----- %s -----\n%s' % s for p in self.processes
                         for s in p.log_sections())

    def check(self, prefix='', decoded_path_info=True):
        status, body = self.request('GET', prefix + '/')
        assert (status, body) == (200, b'Hello world!\n'), (status, body[:300], self.describe())
        status, body = self.request('POST', prefix + '/upload?limit=%d' % len(UPLOAD), UPLOAD)
        assert status == 200, (status, body[:300], self.describe())
        answer = json.loads(body)
        assert answer['sha256'] == hashlib.sha256(UPLOAD).hexdigest(), answer
        if decoded_path_info:
            status, body = self.request('GET', prefix + '/environ/caf%C3%A9')
            assert status == 200, self.describe()
            environ = json.loads(body)
            assert environ['PATH_INFO'] == '/environ/caf\u00c3\u00a9', environ  # PEP 3333 latin-1

    def stop(self):
        for process in self.processes:
            process.stop()
        if not os.environ.get('FLUPFAST_PEER_KEEP'):
            remove_tempdir(self.root)


@pytest.fixture
def recipe(request):
    require_root()  # the fronts run their workers as www-data
    made = []

    def make(section):
        made.append(Recipe(section))
        return made[-1]
    yield make
    for one in made:
        one.stop()


def test_every_recipe_section_has_a_test():
    tested = {'nginx (FastCGI)', 'Apache mod_proxy_fcgi', 'nginx scgi_pass', 'nginx uwsgi_pass',
              'Apache mod_proxy_scgi', 'Apache mod_proxy_ajp', 'Apache mod_fcgid', 'lighttpd',
              'Health checks', 'Several hosts (nginx upstream)'}  # test_scale_out.py
    with_code = {name for name, blocks in sections().items() if blocks}
    assert with_code == tested


def test_nginx_fastcgi_and_the_health_check(recipe):
    one = recipe('nginx (FastCGI)')
    one.start_backend()
    one.start_nginx()
    one.check()
    (command,) = re.findall(r'HEALTHCHECK CMD (.*)', snippet('Health checks', 'dockerfile'))
    argv = shlex.split(one.paths(command))
    assert argv[:3] == ['python', '-m', 'flupfast.client'], argv
    proc = subprocess.run([sys.executable] + argv[1:], env=dict(os.environ, PYTHONPATH=str(REPO)),
                          capture_output=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, b''), proc.stderr


def test_nginx_scgi(recipe):
    one = recipe('nginx scgi_pass')
    one.start_backend()
    one.start_nginx()
    one.check()


def test_nginx_uwsgi(recipe):
    one = recipe('nginx uwsgi_pass')
    one.start_backend()
    one.start_nginx()
    one.check()


@pytest.mark.parametrize('section, modules', [
    ('Apache mod_proxy_fcgi', ['proxy', 'proxy_fcgi']),
    ('Apache mod_proxy_scgi', ['proxy', 'proxy_scgi']),
    ('Apache mod_proxy_ajp', ['proxy', 'proxy_ajp']),
])
def test_apache_proxy(recipe, section, modules):
    one = recipe(section)
    one.start_backend()
    one.start_apache(modules)
    # Apache's proxies send the decoded path as SCRIPT_NAME (FastCGI, SCGI) or the path alone
    # (AJP13): the recipe promises hello and uploads, not a decoded PATH_INFO.
    one.check(decoded_path_info=False)


def test_apache_mod_fcgid(recipe):
    require(str(APACHE_MODULES / 'mod_fcgid.so'), 'libapache2-mod-fcgid')
    one = recipe('Apache mod_fcgid')
    python = fcgid_venv(ServerSpec('cy'))
    script = one.root / 'htdocs' / 'myapp.fcgi'
    script.write_text(snippet('Apache mod_fcgid', 'python').replace(
        '#!/srv/myapp/venv/bin/python', '#!%s' % python))
    script.chmod(0o755)
    shutil.copy(str(PROBE), str(one.root / 'htdocs' / 'probe.py'))
    (one.root / 'htdocs' / 'myapp.py').write_text('from probe import app as application\n')
    for path in one.root.joinpath('htdocs').iterdir():
        path.chmod(0o755 if path.suffix == '.fcgi' else 0o644)
    one.start_apache(['alias', 'fcgid'])  # mod_alias: on in Debian's default install
    one.check(prefix='/myapp')


def test_lighttpd(recipe):
    one = recipe('lighttpd')
    one.start_backend()
    one.start_lighttpd()
    one.check()


def test_recipe_failures_are_visible(recipe):
    """The harness itself: a recipe whose socket www-data cannot open answers 502 (the first-
    hour failure these recipes fix), so the checks above cannot pass by accident."""
    one = recipe('nginx (FastCGI)')
    command = snippet('nginx (FastCGI)', 'sh')
    assert '--socket-owner :www-data --socket-mode 660' in command
    one.section = 'nginx (FastCGI)'
    argv_text = one.paths(command).replace('\\\n', ' ').replace(
        '--socket-owner :www-data --socket-mode 660', '--umask 077')
    argv = shlex.split(argv_text)
    backend = ManagedProcess('backend', [sys.executable] + argv[1:],
                             env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                 [str(REPO), str(one.root / 'app')])),
                             cwd=str(one.root / 'app'), umask=0o022, log_dir=one.root)
    one.processes.append(backend)
    wait_until_connectable(str(one.root / 'run' / 'myapp.sock'), backend)
    one.start_nginx()
    assert one.request('GET', '/')[0] == 502
    assert 'Permission denied' in tail(one.root / 'error.log')
