"""``python -m flupfast.client``: send one request to a FastCGI, SCGI, uwsgi or AJP13 backend, as
the web server would, and print its answer (``Status:`` line, headers, blank line, body) — what
``cgi-fcgi`` is for FastCGI, for all four protocols, with an exit status a health check can use:
0 for an answer below 500, 1 for a 5xx answer or a backend that cannot be reached or answers
nonsense (one line on stderr), 2 for a mistake on the command line.

    python -m flupfast.client fcgi unix:/run/app.sock /ping
    python -m flupfast.client scgi 127.0.0.1:4000 /api -X POST -d @body.json -H 'Content-Type: application/json'
"""
import argparse
import io
import os
import socket
import sys
import urllib.parse

from flupfast.client._proxy import BackendError
from flupfast.protocols.errors import ProtocolError

PROTOCOLS = ('fcgi', 'scgi', 'uwsgi', 'ajp')


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        print('python -m flupfast.client: error: %s (see --help)' % message, file=sys.stderr)
        sys.exit(2)


def parse_address(value):
    """``unix:/path`` or a path with a slash; ``host:port``; ``[v6addr]:port``."""
    if value.startswith('unix:') or '/' in value:
        return value[5:] if value.startswith('unix:') else value
    host, sep, port = value.rpartition(':')
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError('expected host:port, [v6]:port or unix:/path, not %r'
                                         % value)
    return (host.strip('[]') or '127.0.0.1', int(port))


def parse_seconds(value):
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float('inf'):
        raise argparse.ArgumentTypeError('expected seconds > 0, not %r' % value)
    return seconds


def parse_header(value):
    name, sep, text = value.partition(':')
    if not sep or not name.strip() or name != name.strip():
        raise argparse.ArgumentTypeError("expected 'Name: value', not %r" % value)
    return name, text.strip()


def build_parser():
    parser = _OneLineParser(prog='python -m flupfast.client',
                            description=__doc__.split('\n\n')[0].replace('``', ''),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('protocol', choices=PROTOCOLS, help='what the backend speaks')
    parser.add_argument('address', type=parse_address, help='host:port or unix:/path')
    parser.add_argument('path', nargs='?', default='/', help='path and query (default /)')
    parser.add_argument('-X', '--request', dest='method', default=None,
                        help='method (default GET, or POST with -d)')
    parser.add_argument('-d', '--data', default=None,
                        help='request body; @FILE reads it from a file, @- from stdin')
    parser.add_argument('-H', '--header', action='append', type=parse_header, default=[],
                        help="a request header, 'Name: value' (repeatable)")
    parser.add_argument('--host', default='localhost', help='Host header and SERVER_NAME')
    parser.add_argument('--script-name', default='', help='SCRIPT_NAME (default empty)')
    parser.add_argument('--secret', default=None, help='AJP13: the secret (mod_proxy_ajp '
                        'secret=)')
    parser.add_argument('--timeout', type=parse_seconds, default=10.0,
                        help='seconds to wait for the backend (default 10)')
    parser.add_argument('-s', '--silent', action='store_true',
                        help='print nothing; only the exit status tells')
    return parser


def read_body(data):
    if data is None:
        return b''
    if data == '@-':
        return sys.stdin.buffer.read()
    if data.startswith('@'):
        with open(data[1:], 'rb') as source:
            return source.read()
    return data.encode('utf-8')


def _wire(text):
    """A command-line string as a web server passes it: its bytes (UTF-8, or as the
    command line gave them) as latin-1 code points, as environ strings are (PEP 3333)."""
    return text.encode('utf-8', 'surrogateescape').decode('latin-1')


def build_environ(args, body):
    """The CGI variables a web server would send for this request."""
    path, _, query = _wire(args.path).partition('?')
    script_name = _wire(args.script_name).rstrip('/')
    if script_name and path.startswith(script_name):
        path = path[len(script_name):]
    environ = {
        'REQUEST_METHOD': args.method or ('POST' if args.data is not None else 'GET'),
        'SCRIPT_NAME': script_name,
        'PATH_INFO': urllib.parse.unquote(path, 'latin-1'),
        'QUERY_STRING': query,
        'REQUEST_URI': script_name + _wire(args.path),
        'SERVER_NAME': _wire(args.host),
        'SERVER_PORT': '80',
        'SERVER_PROTOCOL': 'HTTP/1.1',
        'REMOTE_ADDR': '127.0.0.1',
        'REMOTE_PORT': '0',
        'HTTP_HOST': _wire(args.host),
        'CONTENT_LENGTH': str(len(body)) if body or args.data is not None else '',
        'wsgi.input': io.BytesIO(body),
        'wsgi.errors': sys.stderr,
    }
    for name, value in args.header:
        key = _wire(name).upper().replace('-', '_')
        if key not in ('CONTENT_TYPE', 'CONTENT_LENGTH'):
            key = 'HTTP_' + key
        environ[key] = _wire(value)
    if not environ['CONTENT_LENGTH']:
        del environ['CONTENT_LENGTH']
    return environ


def make_app(args):
    if args.protocol == 'fcgi':
        from flupfast.client.fcgi_app import FCGIApp
        return FCGIApp(connect=args.address)
    if args.protocol == 'scgi':
        from flupfast.client.scgi_app import SCGIApp
        return SCGIApp(connect=args.address)
    if args.protocol == 'uwsgi':
        from flupfast.client.uwsgi_app import UWSGIApp
        return UWSGIApp(connect=args.address)
    from flupfast.client.ajp_app import AJPApp
    return AJPApp(connect=args.address, secret=args.secret)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.secret is not None and args.protocol != 'ajp':
        parser.error('--secret applies to ajp only')
    try:
        body = read_body(args.data)
    except OSError as exc:
        print('flupfast.client: cannot read %s: %s' % (args.data[1:], exc.strerror),
              file=sys.stderr)
        return 2
    out = _Output(sys.stdout.buffer)
    answer = {}

    def start_response(status, headers):
        answer['status'] = status
        if not args.silent:
            out.write(b'Status: %s\r\n' % status.encode('latin-1'))
            for name, value in headers:
                out.write(b'%s: %s\r\n' % (name.encode('latin-1'), value.encode('latin-1')))
            out.write(b'\r\n')

    socket.setdefaulttimeout(args.timeout)
    try:
        result = make_app(args)(build_environ(args, body), start_response)
        try:
            for chunk in result:
                if not args.silent:
                    out.write(chunk)
        finally:
            close = getattr(result, 'close', None)
            if close is not None:
                close()
    except (OSError, ProtocolError, BackendError) as exc:
        where = args.address if isinstance(args.address, str) else '%s:%d' % args.address
        reason = getattr(exc, 'strerror', None) or str(exc) or type(exc).__name__
        if isinstance(exc, socket.timeout):
            reason = 'no answer within %g s' % args.timeout
        print('flupfast.client: %s %s: %s' % (args.protocol, where, reason), file=sys.stderr)
        return 1
    out.flush()
    status = answer.get('status', '500')
    if not status[:3].isdigit():
        where = args.address if isinstance(args.address, str) else '%s:%d' % args.address
        print('flupfast.client: %s %s: a status without a code: %r'
              % (args.protocol, where, status[:100]), file=sys.stderr)
        return 1
    return 1 if int(status[:3]) >= 500 else 0


class _Output:
    """stdout for the answer; a reader that went away (``| head``) ends the printing, not
    the request: the exit status still tells the backend's answer."""

    def __init__(self, stream):
        self.stream = stream
        self.gone = False

    def write(self, data):
        if not self.gone:
            try:
                self.stream.write(data)
            except BrokenPipeError:
                self._went_away()

    def flush(self):
        if not self.gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._went_away()

    def _went_away(self):
        self.gone = True
        # What is left in the buffer would fail again at exit: stdout becomes /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.stream.fileno())
        os.close(devnull)


if __name__ == '__main__':
    sys.exit(main())
