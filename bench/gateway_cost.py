"""Instructions per hello request through the WSGI gateway alone (environ, start_response,
the result loop), counted by ``valgrind --tool=callgrind``: the figure the response-head
checks of gateway.py are judged by (they must cost < 3% of it: docs/security.md).

    python -m bench.gateway_cost              # runs itself under callgrind with N and 2N
    python -m bench.gateway_cost --loop N     # the loop alone (what callgrind runs)
    python -m bench.gateway_cost --access-log /tmp/a.log   # with flupfast.ops' access log on
    python -m bench.gateway_cost --status fork   # with the status page's slots (or thread)
    python -m bench.gateway_cost --proctitle   # with a prefork child's busy/idle titles on

(total(2N) - total(N)) / N is one request, start-up subtracted. No sockets, no protocol:
a null responder takes the head and body, so the count is the gateway's and the app's.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HEADERS = [('Content-Type', 'text/plain')]
BODY = [b'Hello world!\n']
# What nginx's stock fastcgi_params send for GET / (the values do not matter here).
PARAMS = {
    'QUERY_STRING': '', 'REQUEST_METHOD': 'GET', 'CONTENT_TYPE': '', 'CONTENT_LENGTH': '',
    'SCRIPT_NAME': '/', 'REQUEST_URI': '/', 'DOCUMENT_URI': '/', 'DOCUMENT_ROOT': '/srv',
    'SERVER_PROTOCOL': 'HTTP/1.1', 'REQUEST_SCHEME': 'http', 'GATEWAY_INTERFACE': 'CGI/1.1',
    'SERVER_SOFTWARE': 'nginx', 'REMOTE_ADDR': '127.0.0.1', 'REMOTE_PORT': '40000',
    'SERVER_ADDR': '127.0.0.1', 'SERVER_PORT': '80', 'SERVER_NAME': 'localhost',
    'HTTP_HOST': 'localhost', 'HTTP_USER_AGENT': 'bench', 'HTTP_ACCEPT': '*/*',
}


def hello(environ, start_response):
    start_response('200 OK', list(HEADERS))  # a fresh list per request, as apps build it
    return BODY


_counter = [0]


def varying(environ, start_response):
    """A header that differs on every request (a session cookie): never in a cache."""
    _counter[0] += 1
    start_response('200 OK', [('Content-Type', 'text/plain'),
                              ('Set-Cookie', 'sid=%d; Path=/; HttpOnly' % _counter[0])])
    return BODY


APPS = {'hello': hello, 'varying': varying}


class NullResponder:
    def send_head(self, status, headers, data, more):
        pass

    def send_body(self, data, more):
        pass


def loop(n, app, access_log=None, status=None, proctitle=False):
    from flupfast import _impl, gateway, ops
    app = APPS[app]
    if access_log:
        ops.install(app, access_log=access_log)
    if status:
        # What a statusPath facade adds per request: its path check before the app, and its
        # board's slot writes at the request's start and end (fork: a shared-memory slot).
        from flupfast.ops import status as status_page
        board = status_page.board_for(status, 1, 1, 1)
        if status == 'fork':
            board.prepare(0)
            board.attach(0)
        status_page.watch(board)
        app = status_page.StatusPage(app, '/fpm-status', board)
    if proctitle:
        if not ops.proctitle.enable('bench'):
            sys.exit('setproctitle is not installed (pip install setproctitle)')
        ops.become_worker(1)
    responder = NullResponder()
    for _ in range(n):
        environ = _impl.build_environ(dict(PARAMS), None, None, sys.stderr, True, False,
                                      False)
        gateway.sanitize_cgi_environ(environ, 'WSGIServer')
        _impl.run_application(app, environ, responder)


def count(n, app, workdir, access_log=None, status=None, proctitle=False):
    out = os.path.join(workdir, 'cg-%d.out' % n)
    env = dict(os.environ, PYTHONHASHSEED='0')
    subprocess.run(['valgrind', '--tool=callgrind', '--callgrind-out-file=' + out,
                    '--dump-line=no', sys.executable, '-m', 'bench.gateway_cost', '--loop',
                    str(n), '--app', app] + (['--access-log', access_log] if access_log else [])
                   + (['--status', status] if status else [])
                   + (['--proctitle'] if proctitle else []),
                   check=True, env=env, capture_output=True)
    with open(out, 'rb') as f:
        return int(re.search(rb'^(?:summary|totals):\s+(\d+)', f.read(), re.M).group(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--loop', type=int)
    parser.add_argument('-n', type=int, default=20000)
    parser.add_argument('--app', choices=sorted(APPS), default='hello',
                        help='hello (fixed headers) or varying (a new Set-Cookie each time)')
    parser.add_argument('--access-log', metavar='FILE', default=None,
                        help='count with the access log on, writing to FILE')
    parser.add_argument('--status', choices=('thread', 'fork'), default=None,
                        help="count with the status page's per-worker slots of that mode")
    parser.add_argument('--proctitle', action='store_true',
                        help='count with the process titles of a prefork child on')
    args = parser.parse_args()
    if args.loop is not None:
        loop(args.loop, args.app, args.access_log, args.status, args.proctitle)
        return
    if not shutil.which('valgrind'):
        sys.exit('valgrind is not installed (apt-get install valgrind)')
    with tempfile.TemporaryDirectory() as workdir:
        one = count(args.n, args.app, workdir, args.access_log, args.status, args.proctitle)
        two = count(2 * args.n, args.app, workdir, args.access_log, args.status, args.proctitle)
    print('instructions per %s request through the gateway: %d (N=%d)'
          % (args.app, round((two - one) / args.n), args.n))


if __name__ == '__main__':
    main()
