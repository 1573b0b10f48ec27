"""The differential harness: one server of each implementation (real flup 1.0.3 and flupfast),
both started by tests/integration/flup_launcher.py with the same command line, the same probe
app and the same keyword arguments, and a protocol-blind way for a scenario to send them the
same bytes and read back comparable answers.

It owns server start and stop (by PID), the per-protocol adapters over tests/*_client.py and
the link from a scenario to the compat/known_differences.py keys it depends on. It must not
build requests itself: the wire bytes come from the test clients.
"""
import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from compat.known_differences import DIFFERENCES
from tests import ajp_client, fcgi_client, scgi_client
from tests.integration import flup_launcher
from tests.integration.backend_process import ROOT, Server, free_port
from tests.integration.test_modes import proc_children

IMPLS = ('flup', 'flupfast')
PROTOCOLS = ('fcgi', 'scgi', 'ajp')
MODES = ('thread', 'fork', 'single')
MATRIX = [(protocol, mode) for protocol in PROTOCOLS for mode in MODES]
PROBE = 'tests.apps.probe:app'
LAUNCHER = flup_launcher.__file__
ALLOWED = '127.0.0.1'      # allowedServers / FCGI_WEB_SERVER_ADDRS of every server
OTHER_PEER = '127.0.0.2'   # a loopback source address outside that list
# The prefork pools: small, so that growth past maxSpare shows (flup's stays at maxSpare).
FORK_KWARGS = {'minSpare': 1, 'maxSpare': 2, 'maxChildren': 4}
IO_TIMEOUT = 10.0          # an answer that takes longer is a hang
HANG = 2.0                 # how long a scenario waits to call a server "hung" where flup hangs
STOP_GRACE = 8.0           # bound for a server to act on a signal

BY_KEY = {d.key: d for d in DIFFERENCES}
# key -> names of the scenarios that depend on it (filled by @differs at import).
REFERENCED = {}


def differs(*keys):
    """Mark a scenario as depending on these known differences (unknown keys fail at import)."""
    for key in keys:
        if key not in BY_KEY:
            raise KeyError('%r is not in compat/known_differences.py' % key)

    def mark(func):
        for key in keys:
            REFERENCED.setdefault(key, []).append(func.__name__)
        return pytest.mark.differs(*keys)(func)
    return mark


def describe(key):
    d = BY_KEY[key]
    return '%s (flup %s): flup %s; flupfast %s' % (key, d.flup_location, d.flup_does,
                                                  d.flupfast_does)


def patience(backend):
    """How long a scenario waits for an answer: HANG for flup, where a hang is a finding;
    IO_TIMEOUT for flupfast, which must answer."""
    return HANG if backend.impl == 'flup' else IO_TIMEOUT


def flup_mode(protocol, mode):
    """flup has no SCGI or AJP single mode: its thread mode stands in (N/A otherwise)."""
    return 'thread' if protocol != 'fcgi' and mode == 'single' else mode


def mode_kwargs(mode):
    return dict(FORK_KWARGS) if mode == 'fork' else {}


# ------------------------------------------------------------------------------------------
# Answers

class Answer:
    """A response as the web server sees it: status code, reason, headers in order and case,
    body; ``head`` is the exact header block for FastCGI and SCGI (None for AJP, whose
    headers are packets), ``extra`` protocol details (END_REQUEST, stderr, reuse, ...)."""

    def __init__(self, status, reason, headers, body, head=None, **extra):
        self.status, self.reason, self.headers, self.body, self.head = (
            status, reason, headers, body, head)
        self.extra = extra

    def key(self):
        return (self.status, self.reason, tuple(self.headers), self.body, self.head)

    def __eq__(self, other):
        return isinstance(other, Answer) and self.key() == other.key()

    def __repr__(self):
        body = self.body if len(self.body) < 300 else self.body[:300] + b'...'
        return 'Answer(%r %r %r %r %r)' % (self.status, self.reason, self.headers, body,
                                         self.extra)

    def header(self, name):
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    def json(self):
        return json.loads(self.body)


# What a scenario sees instead of an Answer.
CLOSED = 'closed without an answer'
RESET = 'connection reset'
HUNG = 'no answer (hung)'


def _cgi_answer(stdout, **extra):
    head, sep, body = bytes(stdout).partition(b'\r\n\r\n')
    lines = head.split(b'\r\n')
    status_line = lines[0].decode('latin-1')
    assert sep and status_line.startswith('Status: '), stdout[:200]
    code, _, reason = status_line[8:].partition(' ')
    headers = [tuple(line.decode('latin-1').split(': ', 1)) for line in lines[1:]]
    return Answer(int(code), reason, headers, body, head=head, **extra)


def _socket(address, source=None, timeout=IO_TIMEOUT):
    sock = socket.socket(socket.AF_INET6 if ':' in address[0] else socket.AF_INET)
    sock.settimeout(timeout)
    if source:
        sock.bind((source, 0))
    sock.connect(address)
    return sock


class _Connection:
    """A client connection (``source``: the local address to connect from)."""

    def __init__(self, address, source=None, timeout=IO_TIMEOUT):
        self.sock = _socket(address, source, timeout)

    def send(self, data):
        self.sock.sendall(data)

    def at_eof(self, timeout=IO_TIMEOUT):
        """True when the server closed this connection (within ``timeout``)."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1 << 16) == b''
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True

    def close(self):
        self.sock.close()


class FastCGIConnection(_Connection):
    protocol = 'fcgi'

    def read(self, request_id=1):
        """The answer to ``request_id``: an Answer (``end``: END_REQUEST's (app, protocol)
        status; ``records``: record types; ``stdout_records``: STDOUT content sizes), CLOSED,
        RESET, HUNG, or for an END_REQUEST without STDOUT a bare ('end', status)."""
        try:
            resp = fcgi_client.read_response(self.sock, request_id, timeout=self.sock.gettimeout())
        except socket.timeout:
            return HUNG
        except ConnectionResetError:
            return RESET
        if not resp.stdout:
            if resp.end is not None:
                return ('end', resp.end)
            return CLOSED
        return _cgi_answer(resp.stdout, end=resp.end, stderr=bytes(resp.stderr),
                           records=resp.records, other=resp.other)

    def request(self, uri='/', method=None, body=b'', headers=(), keep_conn=False,
                request_id=1, params=None):
        env = {'HTTP_' + name.upper().replace('-', '_'): value for name, value in headers}
        env.update(params or {})
        self.send(fcgi_client.request_bytes(uri, params=env, body=body, method=method,
                                            keep_conn=keep_conn, request_id=request_id))
        return self.read(request_id)


class SCGIConnection(_Connection):
    protocol = 'scgi'

    def read(self):
        """The answer read to EOF (SCGI closes after one), CLOSED, RESET or HUNG."""
        try:
            raw = scgi_client.read_all(self.sock)
        except socket.timeout:
            return HUNG
        except ConnectionResetError:
            return RESET
        if not raw:
            return CLOSED
        return _cgi_answer(raw)

    def request(self, uri='/', method='GET', body=b'', headers=(), **kw):
        extra = [('HTTP_' + name.upper().replace('-', '_'), value) for name, value in headers]
        extra += list(kw.pop('extra', ()))
        self.send(scgi_client.request_bytes(uri, method=method, body=body, extra=extra, **kw))
        return self.read()


class AJPConnection(_Connection):
    protocol = 'ajp'

    def __init__(self, address, source=None, timeout=IO_TIMEOUT):  # the WebServer connects
        self.web = ajp_client.WebServer(address, timeout=timeout, source=source)
        self.sock = self.web.sock

    def exchange(self, wire, rest=b''):
        """The Response of tests/ajp_client.py as an Answer (``reuse``: END_RESPONSE's flag;
        ``get_body``: the GET_BODY_CHUNK sizes asked; ``body_packets``: SEND_BODY_CHUNK sizes),
        CLOSED, RESET or HUNG."""
        try:
            resp = self.web.exchange(wire, rest) if wire else self.web.receive(rest)
        except socket.timeout:
            return HUNG
        except ConnectionResetError:
            return RESET
        if resp is None:
            return CLOSED
        if resp.status is None:
            return ('packets', resp.cpongs, resp.reuse)
        headers = [(name.decode('latin-1'), value.decode('latin-1'))
                   for name, value in resp.headers]
        return Answer(resp.status, resp.reason.decode('latin-1'), headers, resp.body,
                      reuse=resp.reuse, get_body=resp.get_body, cpongs=resp.cpongs)

    def request(self, uri='/', method='GET', body=b'', headers=(), chunk=8186, **kw):
        path, _, query = uri.partition('?')
        attributes = list(kw.pop('attributes', ()))
        if query:
            attributes.append(('query_string', query))
        wire = ajp_client.request_bytes(method, path, body=body, headers=headers, chunk=chunk,
                                        attributes=attributes, **kw)
        return self.exchange(wire, body[chunk:])


CONNECTIONS = {'fcgi': FastCGIConnection, 'scgi': SCGIConnection, 'ajp': AJPConnection}


# ------------------------------------------------------------------------------------------
# Servers

def children_of(pid):
    """PIDs of the live (not zombie) processes whose parent is ``pid``."""
    return [child for child, state in proc_children(pid).items() if state != 'Z']


class Backend:
    """One implementation's server for (protocol, mode), run by flup_launcher.py over TCP on
    127.0.0.1 with ``allowedServers``/``FCGI_WEB_SERVER_ADDRS`` = 127.0.0.1."""

    def __init__(self, impl, protocol, mode, log_dir, kwargs=None, env=None, allowed=ALLOWED,
                 bind=None):
        self.impl, self.protocol, self.mode = impl, protocol, mode
        self.run_mode = flup_mode(protocol, mode) if impl == 'flup' else mode
        port = free_port()
        # ``bind``: a Unix socket path, or a host whose free port is taken.
        if bind and bind.startswith('/'):
            self.address, bind_arg = bind, 'unix:' + bind
        else:
            self.address = (bind or '127.0.0.1', port)
            bind_arg = '%s:%d' % self.address
        kwargs = dict(mode_kwargs(self.run_mode), **(kwargs or {}))
        command = [sys.executable, LAUNCHER, '--package', impl, '--protocol', protocol,
                   '--mode', self.run_mode, '--bind', bind_arg, '--kwargs', json.dumps(kwargs)]
        full_env = {'PYTHONUNBUFFERED': '1'}
        if allowed and protocol == 'fcgi':
            full_env['FCGI_WEB_SERVER_ADDRS'] = allowed
        elif allowed:
            command += ['--allowed-servers', allowed]
        full_env.update(env or {})
        command.append(PROBE)
        self.log_path = os.path.join(str(log_dir), '%s-%s-%s-%d.log' % (
            impl, protocol, self.run_mode, port))
        self.server = Server(None, self.address, env=full_env, command=command,
                             log_path=self.log_path, wait=False)
        self.pid = self.server.proc.pid

    def __repr__(self):
        return '<%s %s %s>' % (self.impl, self.protocol, self.run_mode)

    def wait_ready(self):
        self.server.wait_ready(30)
        return self

    def wait_started(self, timeout=30):
        """Listening, or exited (a server that cannot start); True when listening."""
        try:
            self.server.wait_ready(timeout)
        except AssertionError:
            return False
        return True

    def connect(self, source=None, timeout=IO_TIMEOUT):
        return CONNECTIONS[self.protocol](self.address, source, timeout)

    def request(self, uri='/', **kw):
        """One request on a fresh connection, closed afterwards."""
        conn = self.connect(timeout=kw.pop('timeout', IO_TIMEOUT))
        try:
            return conn.request(uri, **kw)
        finally:
            conn.close()

    def exchange(self, data, timeout=IO_TIMEOUT, half_close=True):
        """Send raw bytes on a fresh connection, then (``half_close``) end our side as a web
        server that gives up would; the protocol's answer to them."""
        conn = self.connect(timeout=timeout)
        try:
            try:
                conn.send(data)
            except (BrokenPipeError, ConnectionResetError):
                return RESET
            if half_close:
                try:
                    conn.sock.shutdown(socket.SHUT_WR)
                except OSError:  # already closed by the server
                    pass
            if self.protocol == 'ajp':
                return conn.exchange(b'')
            return conn.read()
        finally:
            conn.close()

    def serves(self):
        """The server still answers a plain request correctly."""
        answer = self.request('/')
        return isinstance(answer, Answer) and (answer.status, answer.body) == (
            200, b'Hello world!\n')

    def log(self):
        return self.server.log()

    def mark(self):
        return len(self.server.log())

    def log_since(self, mark):
        return self.server.log()[mark:]

    def alive(self):
        return self.server.proc.poll() is None

    def children(self):
        return children_of(self.pid)

    def poke(self):
        """A request that wakes a prefork parent (a child reports busy and idle)."""
        try:
            self.request('/', timeout=3)
        except OSError:
            pass

    def wait_exit(self, timeout):
        try:
            return self.server.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        """Stop it by PID whatever state it is in: SIGTERM; a request to wake flup's idle
        prefork parent; then SIGKILL for it and its children."""
        proc = self.server.proc
        children = set(self.children()) if proc.poll() is None else set()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            if self.wait_exit(1.0) is None:  # flup's idle prefork parent needs a wake-up
                self.poke()
                if self.wait_exit(STOP_GRACE) is None:
                    children |= set(self.children())
                    proc.kill()
                    proc.wait(10)
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.stderr.close()
        return self.log()


def run_once(impl, args, env=None, stdin=subprocess.DEVNULL, timeout=60):
    """flup_launcher.py as a one-shot process (CGI, a bind failure): its CompletedProcess."""
    full_env = dict(os.environ, PYTHONPATH=ROOT)
    full_env.update(env or {})
    return subprocess.run([sys.executable, LAUNCHER, '--package', impl] + list(args),
                          stdin=stdin, capture_output=True, env=full_env, cwd=ROOT,
                          timeout=timeout)


def start_pair(protocol, mode, log_dir, **kw):
    """{impl: Backend} for (protocol, mode), the two started side by side."""
    backends = {impl: Backend(impl, protocol, mode, log_dir, **kw) for impl in IMPLS}
    try:
        for backend in backends.values():
            backend.wait_ready()
    except BaseException:
        for backend in backends.values():
            backend.stop()
        raise
    return backends


def on_both(pair, scenario):
    """Run ``scenario(backend)`` against both implementations at once; {impl: result}."""
    with concurrent.futures.ThreadPoolExecutor(len(pair)) as pool:
        futures = {impl: pool.submit(scenario, backend) for impl, backend in pair.items()}
        return {impl: future.result() for impl, future in futures.items()}


def same(results, what=''):
    """The scenario's result is the same for flup and flupfast."""
    assert results['flup'] == results['flupfast'], '%s\nflup:     %r\nflupfast: %r' % (
        what, results['flup'], results['flupfast'])
    return results['flupfast']


def deviates(key, results):
    """A known difference: the results must differ (else the entry is stale); the scenario
    then asserts what each does. Returns (flup's, flupfast's)."""
    assert results['flup'] != results['flupfast'], (
        'expected a difference, %s; both gave %r' % (describe(key), results['flup']))
    return results['flup'], results['flupfast']
