"""``python -m flupfast`` as a new user meets it: every mistake is one line on stderr (exit 2 for
the command line, 1 for a server that cannot start), "serving" is logged only once the socket
listens, and the same wording names the address for every protocol.
"""
import os
import pty
import shutil
import socket
import subprocess
import sys

import pytest

from tests.fcgi_client import roundtrip
from tests.integration.backend_process import ROOT, free_port
from tests.integration.backend_process import server_factory  # noqa: F401  (a fixture)
from tests.waiting import wait_until


def run_cli(args, cwd=ROOT, env=None, python_args=()):
    full_env = dict(os.environ, PYTHONPATH=ROOT)
    full_env.update(env or {})
    return subprocess.run([sys.executable, *python_args, '-m', 'flupfast', *args], cwd=cwd,
                          env=full_env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60)


def one_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and 'Traceback' not in proc.stderr, proc.stderr
    return lines[0]


@pytest.mark.parametrize('args, words', [
    (['--bind', '127.0.0.1:99999'], "the port in '127.0.0.1:99999' must be a number from 0"),
    (['--bind', '[::1]:x'], "the port in '[::1]:x' must be a number"),
    (['--bind', 'localhost'], 'expected host:port, [v6]:port or unix:/path'),
    (['--bind', 'unix:'], 'unix: needs a path'),
    (['--log-level', 'verbose'], "expected one of debug, info, warning, error, critical, not "
                                 "'verbose'"),
    (['--umask', '9'], "expected an octal umask such as 007"),
    (['--max-threads', 'many'], "expected a whole number >= 1, not 'many'"),
    (['--max-children', '0', '--mode', 'fork'], "expected a whole number >= 1, not '0'"),
    (['--overload-wait', '-1', '--mode', 'fork'], "expected seconds >= 0, not '-1'"),
    (['--ajp-packet-size', '100', '--protocol', 'ajp'], 'expected bytes from 8192 to 65536'),
    (['--ajp-packet-size', '70000', '--protocol', 'ajp'], '--ajp-packet-size must be 8192 to '
                                                          '65536, not 70000'),
    (['--timeout', '5'], '--timeout applies to --mode fork only'),
    (['--max-requests', '5', '--mode', 'single'], '--max-requests applies to --mode fork only'),
    (['--max-threads', '5', '--mode', 'fork'], '--max-threads applies to --mode thread only'),
    (['--overload-wait', '1'], '--overload-wait applies to --mode fork only'),
    (['--multiplexed', '--protocol', 'scgi'], '--multiplexed applies to --protocol fcgi only'),
    (['--umask', '007', '--protocol', 'ajp'], '--umask applies to --protocol fcgi or scgi or '
                                                          'uwsgi only'),
    (['--ajp-secret', 's'], '--ajp-secret applies to --protocol ajp only'),
    (['--protocol', 'http'], "argument --protocol: invalid choice: 'http'"),
    (['--mode', 'fork', '--min-spare', '8'], '--min-spare (8) is above --max-spare (5, the '
                                             'default)'),
    (['--mode', 'fork', '--min-spare', '3', '--max-spare', '2'], '--min-spare (3) is above '
                                                                 '--max-spare (2)'),
])
def test_a_usage_error_is_one_line_and_status_2(args, words):
    proc = run_cli(args + ['--bind', '127.0.0.1:1'] if '--bind' not in args else args)
    assert proc.returncode == 2
    line = one_line(proc)
    assert line.startswith('python -m flupfast: error: ') and words in line, line
    assert line.endswith('(see --help)') or 'applies to' in line or 'must be' in line \
        or 'is above' in line
    assert 'lambda' not in line and 'parse_' not in line


def test_unknown_host_is_one_line_and_status_1():
    proc = run_cli(['--bind', 'no-such-host.invalid:9000'])
    assert proc.returncode == 1
    assert one_line(proc).startswith('flupfast: cannot listen on no-such-host.invalid:9000: '
                                     'unknown host')


@pytest.mark.parametrize('protocol', ['fcgi', 'scgi', 'uwsgi', 'ajp'])
def test_a_busy_address_is_worded_the_same_for_every_protocol(protocol):
    with socket.socket() as taken:
        taken.bind(('127.0.0.1', 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_cli(['--protocol', protocol, '--bind', '127.0.0.1:%d' % port,
                        '--log-level', 'warning'])
    assert proc.returncode == 1
    assert one_line(proc) == ('flupfast: cannot listen on 127.0.0.1:%d: Address already in use'
                              % port)


@pytest.mark.parametrize('protocol', ['scgi', 'uwsgi', 'ajp'])
def test_a_unix_socket_in_a_missing_directory_names_the_path(protocol, tmp_path):
    path = tmp_path / 'missing' / 'app.sock'
    proc = run_cli(['--protocol', protocol, '--bind', 'unix:%s' % path, '--log-level', 'error'])
    assert proc.returncode == 1
    assert one_line(proc) == 'flupfast: cannot listen on unix:%s: No such file or directory' % path


@pytest.mark.parametrize('source, words', [
    ('def app(:\n', "cannot import 'brokenapp': invalid syntax at "),
    ('import no_such_module_here\n', "cannot import 'brokenapp': it imports "
                                     "'no_such_module_here', which is not installed for "),
    ('x = 1\n1 / 0\n', "cannot import 'brokenapp': ZeroDivisionError: division by zero (at "),
    ('application = 42\n', 'brokenapp is not callable'),
    ('app = None\n', "'brokenapp' has no attribute 'application'"),
])
def test_an_app_that_does_not_load_is_one_line_and_status_1(tmp_path, source, words):
    (tmp_path / 'brokenapp.py').write_text(source)
    proc = run_cli(['brokenapp', '--bind', '127.0.0.1:%d' % free_port()], cwd=str(tmp_path),
                   env={'PYTHONPATH': os.pathsep.join([ROOT, str(tmp_path)])})
    assert proc.returncode == 1
    line = one_line(proc)
    assert line.startswith('flupfast: ') and words in line, line


def test_a_module_not_found_names_the_app_or_its_missing_import(tmp_path):
    """The app's module is not on sys.path: the hint says so; found, but one of its own
    imports is missing: the message names that import, the file and the line (found in
    review: both had the first hint)."""
    proc = run_cli(['nowhere_app', '--bind', '127.0.0.1:%d' % free_port()], cwd=str(tmp_path))
    assert one_line(proc) == ("flupfast: cannot import 'nowhere_app': No module named "
                              "'nowhere_app' (is it on sys.path? run from its directory or set "
                              "PYTHONPATH)")
    (tmp_path / 'needsdep.py').write_text('import os\nimport no_such_dependency\n')
    proc = run_cli(['needsdep', '--bind', '127.0.0.1:%d' % free_port()], cwd=str(tmp_path),
                   env={'PYTHONPATH': os.pathsep.join([ROOT, str(tmp_path)])})
    assert one_line(proc) == ("flupfast: cannot import 'needsdep': it imports "
                              "'no_such_dependency', which is not installed for %s (at %s line 2)"
                              % (sys.executable, tmp_path / 'needsdep.py'))


def test_the_console_script_serves_an_app_in_the_current_directory(server_factory, tmp_path):
    """`flupfast myapp:application` is `python -m flupfast myapp:application`: the console
    script's sys.path starts with its own directory, not the current one (found in review:
    the app was not found where the user ran it)."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    script = bin_dir / 'flupfast'
    script.write_text('import sys\nfrom flupfast.__main__ import main\nsys.exit(main())\n')
    site = tmp_path / 'site'
    site.mkdir()
    (site / 'myapp.py').write_text(
        'def application(environ, start_response):\n'
        '    start_response("200 OK", [])\n    return [b"from the current directory"]\n')
    path = str(tmp_path / 'app.sock')
    server_factory(None, path, cwd=str(site), command=[
        sys.executable, str(script), 'myapp:application', '--bind', 'unix:' + path])
    assert roundtrip(path, '/').body == b'from the current directory'


def test_a_unix_path_that_is_not_a_socket_is_refused_and_left_alone(tmp_path):
    """flup unlinks whatever is at the path: a mistyped --bind deleted a file
    (known_differences 'unix-bind-not-a-socket', found in review)."""
    notes = tmp_path / 'notes.txt'
    notes.write_text('keep me')
    proc = run_cli(['--bind', 'unix:%s' % notes])
    assert proc.returncode == 1
    assert one_line(proc) == ('flupfast: cannot listen on unix:%s: it exists and is not a '
                              'socket (left as it is)' % notes)
    assert notes.read_text() == 'keep me'


def test_a_unix_socket_another_server_listens_on_is_refused(server_factory, tmp_path):
    """flup takes the path over, and the server there serves on unreached (found in
    review); a socket left by a server that died is replaced."""
    path = tmp_path / 'app.sock'
    with socket.socket(socket.AF_UNIX) as other:
        other.bind(str(path))
        other.listen()
        proc = run_cli(['--bind', 'unix:%s' % path])
        assert proc.returncode == 1
        assert one_line(proc) == ('flupfast: cannot listen on unix:%s: another server is '
                                  'listening there (stop it first, or give another path)' % path)
    assert path.exists()  # closed, not unlinked: a socket nobody listens on
    server_factory(['--bind', 'unix:%s' % path], str(path))
    assert roundtrip(str(path), '/').status == 200


def test_debug_log_level_shows_the_import_traceback(tmp_path):
    (tmp_path / 'brokenapp.py').write_text('x = 1\n1 / 0\n')
    proc = run_cli(['brokenapp', '--bind', '127.0.0.1:%d' % free_port(), '--log-level', 'DEBUG'],
                   cwd=str(tmp_path), env={'PYTHONPATH': os.pathsep.join([ROOT, str(tmp_path)])})
    assert proc.returncode == 1
    assert 'Traceback' in proc.stderr and 'brokenapp.py", line 2' in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("flupfast: cannot import 'brokenapp'")


def test_fastcgi_on_a_terminal_says_how_to_bind():
    pid, fd = pty.fork()
    if pid == 0:  # the child: fd 0 is the terminal
        os.environ['PYTHONPATH'] = ROOT
        os.chdir(ROOT)
        os.execv(sys.executable, [sys.executable, '-m', 'flupfast'])
    output = b''
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        output += data
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 2
    lines = output.decode().strip().splitlines()
    assert len(lines) == 1 and 'fd 0 is a terminal; give --bind' in lines[0], output


def test_version_names_the_backend():
    proc = run_cli(['--version'])
    assert proc.returncode == 0
    assert proc.stdout.startswith('flupfast 0.') and 'backend' in proc.stdout


def test_help_is_plain_text():
    proc = run_cli(['--help'])
    assert proc.returncode == 0
    assert '``' not in proc.stdout and 'SIGHUP reloads' in proc.stdout


@pytest.mark.parametrize('protocol', ['fcgi', 'scgi', 'uwsgi', 'ajp'])
def test_serving_is_logged_after_the_socket_listens(server_factory, protocol, tmp_path):
    path = str(tmp_path / 'app.sock')
    server = server_factory(['--protocol', protocol, '--bind', 'unix:' + path], path,
                            log_path=str(tmp_path / 'log'))
    if protocol == 'fcgi':
        assert roundtrip(path, '/').status == 200
    # The line follows listen(): a client may connect (and the test stop it) before it is out.
    wait_until(lambda: ' serving ' in server.log(), 10, what=lambda: 'the serving line in\n'
               + server.log())
    log = server.stop()
    serving = [line for line in log.splitlines() if ' serving ' in line]
    assert len(serving) == 1, log
    assert serving[0].endswith(' on unix:%s' % path), log


def test_serving_names_the_port_the_kernel_chose(server_factory, tmp_path):
    log_path = tmp_path / 'log'
    server = server_factory(['--bind', '127.0.0.1:0'], None, wait=False, log_path=str(log_path))

    def serving():
        lines = [line for line in server.log().splitlines() if ' serving ' in line]
        assert lines or server.proc.poll() is None, server.log()
        return lines
    lines = wait_until(serving, 15.0, what=lambda: "the 'serving' line\n" + server.log())
    port = int(lines[0].rsplit(':', 1)[1])
    assert port > 0 and roundtrip(('127.0.0.1', port), '/').status == 200


def test_required_compiled_backend_missing_is_one_line(tmp_path):
    """FLUPFAST_SPEEDUPS=1 where the compiled part was never built (a copy of the package
    without it; ``-S`` so no other flupfast on site-packages can stand in)."""
    shutil.copytree(os.path.join(ROOT, 'flupfast'), tmp_path / 'flupfast',
                    ignore=shutil.ignore_patterns('*.so', '*.pyd', '__pycache__'))
    proc = run_cli([], cwd=str(tmp_path), python_args=('-S',),
                   env={'PYTHONPATH': str(tmp_path), 'FLUPFAST_SPEEDUPS': '1'})
    assert proc.returncode == 1
    line = one_line(proc)
    assert line.startswith('flupfast: FLUPFAST_SPEEDUPS=1 requires the compiled backend: '
                           'flupfast._speedups is not built.'), line
    assert 'circular import' not in line and 'C compiler' in line


@pytest.mark.parametrize('script_name, link', [('', '/environ'), ('/', '/environ'),
                                                ('/app', '/app/environ')])
def test_demo_links_its_environ_page(script_name, link):
    from flupfast.__main__ import demo_app
    body = b''.join(demo_app({'SCRIPT_NAME': script_name, 'PATH_INFO': '/'},
                             lambda status, headers: None))
    assert b'<a href="%s">' % link.encode() in body


@pytest.mark.skipif(sys.version_info < (3, 11), reason='python -P came with 3.11')
def test_the_current_directory_stays_off_sys_path_under_python_safe_path(tmp_path):
    """-P (PYTHONSAFEPATH) says: import nothing from the current directory. The console
    script's addition of it respects that (found in review)."""
    (tmp_path / 'here.py').write_text('raise SystemExit("imported from the current directory")\n')
    proc = subprocess.run(
        [sys.executable, '-P', '-c', 'import sys; from flupfast.__main__ import main; '
         'sys.exit(main(sys.argv[1:]))', 'here:app', '--bind', 'unix:%s' % (tmp_path / 's')],
        cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
        text=True, timeout=60)
    assert proc.returncode == 1
    assert one_line(proc).startswith("flupfast: cannot import 'here': No module named 'here'")
