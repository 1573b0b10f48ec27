"""``python -m flupfast``: serve a WSGI app (``module:callable``), or the built-in demo, over
FastCGI, SCGI or AJP13, in the thread, fork or single mode of the flup-compatible servers.

FastCGI with no ``--bind`` serves the listening socket inherited on fd 0 (mod_fcgid, lighttpd
``bin-path``, spawn-fcgi) and falls back to one CGI request when fd 0 is not a socket; SCGI and
AJP without ``--bind`` listen on flup's defaults (localhost:4000 and localhost:8009).
SIGHUP re-executes the command (a reload); SIGINT and SIGTERM stop it.
"""
import argparse
import errno
import html
import importlib
import logging
import os
import sys

import flupfast
from flupfast.limits import FORK_OVERLOAD_WAIT

# Errors that mean "this address cannot be listened on", reported without a traceback.
_LISTEN_ERRNOS = (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES, errno.ENOENT,
                  errno.EPERM)

PROTOCOLS = {'fcgi': 'FastCGI', 'scgi': 'SCGI', 'ajp': 'AJP13'}
MODES = ('thread', 'fork', 'single')


def server_module(protocol, mode):
    """The flup-compatible module serving ``protocol`` in ``mode`` (``flupfast.server.scgi_fork``)."""
    suffix = {'thread': '', 'fork': '_fork', 'single': '_single'}[mode]
    return 'flupfast.server.%s%s' % (protocol, suffix)


def demo_app(environ, start_response):
    """The demo: a hello page at /, and the WSGI environ at /environ."""
    path = environ.get('PATH_INFO', '')
    if path.rstrip('/').endswith('/environ'):
        rows = ''.join('<tr><th>%s</th><td><code>%s</code></td></tr>\n'
                       % (html.escape(key), html.escape(repr(value)))
                       for key, value in sorted(environ.items()))
        body = ('<!DOCTYPE html>\n<html><head><title>flupfast environ</title></head><body>\n'
                '<h1>WSGI environ</h1>\n<table>\n%s</table>\n</body></html>\n' % rows)
    else:
        body = ('<!DOCTYPE html>\n<html><head><title>flupfast</title></head><body>\n'
                '<h1>Hello from flupfast %s</h1>\n<p>Backend: %s. Python %s. '
                '<a href="%s/environ">See the environ</a>.</p>\n</body></html>\n'
                % (flupfast.__version__, flupfast.BACKEND, sys.version.split()[0],
                   html.escape(environ.get('SCRIPT_NAME', ''))))
    data = body.encode('utf-8')
    start_response('200 OK', [('Content-Type', 'text/html; charset=utf-8')])
    return [data]


def load_app(spec):
    """``package.module:callable`` (``:application`` when the callable is left out)."""
    module_name, _, attr = spec.partition(':')
    try:
        app = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit('flupfast: cannot import %r: %s' % (module_name, exc)) from None
    for part in (attr or 'application').split('.'):
        try:
            app = getattr(app, part)
        except AttributeError:
            raise SystemExit('flupfast: %r has no attribute %r (give the app as '
                             'module:callable)' % (module_name, part)) from None
    if not callable(app):
        raise SystemExit('flupfast: %s is not callable' % spec)
    return app


def parse_bind(value):
    """``unix:/path`` or a path with a slash -> Unix socket; ``host:port`` -> IPv4;
    ``[v6addr]:port`` -> IPv6; ``:port`` -> all IPv4 interfaces."""
    if value.startswith('unix:'):
        return value[5:]
    if '/' in value:
        return value
    if value.startswith('['):
        host, _, port = value[1:].partition(']:')
        return (host, int(port), 0, 0)
    host, _, port = value.rpartition(':')
    if not port.isdigit():
        raise argparse.ArgumentTypeError('expected host:port, [v6]:port or unix:/path, not %r'
                                         % value)
    return (host, int(port))


def build_parser():
    parser = argparse.ArgumentParser(
        prog='python -m flupfast', description=__doc__.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('app', nargs='?', help='the WSGI app as module:callable '
                        '(default: the built-in demo)')
    parser.add_argument('--protocol', choices=sorted(PROTOCOLS), default='fcgi',
                        help='what the web server speaks (default fcgi)')
    parser.add_argument('--mode', choices=MODES, default='thread',
                        help='thread pool, prefork children, or one at a time (default thread)')
    parser.add_argument('--bind', type=parse_bind, default=None,
                        help='host:port, [v6]:port or unix:/path (default: the socket on fd 0)')
    parser.add_argument('--umask', type=lambda v: int(v, 8), default=None,
                        help='umask (octal) while creating a Unix socket')
    parser.add_argument('--min-spare', type=int, help='minimum idle threads/children')
    parser.add_argument('--max-spare', type=int, help='maximum idle threads/children')
    parser.add_argument('--max-threads', type=int, help='thread mode: most threads')
    parser.add_argument('--max-children', type=int, help='fork mode: most children')
    parser.add_argument('--max-requests', type=int,
                        help='fork mode: requests a child serves before it is replaced')
    parser.add_argument('--timeout', type=int, help='fork mode: seconds a request may take')
    parser.add_argument('--overload-wait', type=float, default=None, metavar='SECONDS',
                        help='fork mode: seconds connections may wait with every child busy '
                             'before they are answered "overloaded" (default %g)'
                             % FORK_OVERLOAD_WAIT)
    parser.add_argument('--multiplexed', action='store_true',
                        help='FastCGI: serve several requests per connection at once')
    parser.add_argument('--allowed-servers', default=None,
                        help='comma-separated IP addresses of the web servers allowed to '
                        'connect over TCP (default: anybody; FastCGI also honours '
                        'FCGI_WEB_SERVER_ADDRS)')
    parser.add_argument('--ajp-packet-size', type=int, default=None,
                        help='AJP: size of the packets sent, as the web server\'s '
                        'ProxyIOBufferSize (default 8192, at most 65536)')
    parser.add_argument('--ajp-secret', default=None,
                        help='AJP: refuse requests without this secret (mod_proxy_ajp secret=)')
    parser.add_argument('--debug', action='store_true', help='show tracebacks on error pages')
    parser.add_argument('--log-level', default='INFO', help='logging level (default INFO)')
    return parser


def server_kwargs(args):
    kwargs = {'debug': args.debug}
    if args.protocol == 'fcgi':
        kwargs.update(bindAddress=args.bind, umask=args.umask, multiplexed=args.multiplexed)
    else:
        if args.bind is not None:  # else flup's default address for the protocol
            kwargs['bindAddress'] = args.bind
        if args.umask is not None and args.protocol == 'scgi':  # flup's AJP has no umask
            kwargs['umask'] = args.umask
        kwargs['loggingLevel'] = logging.getLevelName(args.log_level.upper())
    if args.allowed_servers:
        kwargs['allowedServers'] = [a.strip() for a in args.allowed_servers.split(',')]
    options = {'minSpare': args.min_spare, 'maxSpare': args.max_spare}
    if args.mode == 'thread':
        options['maxThreads'] = args.max_threads
    elif args.mode == 'fork':
        options.update(maxChildren=args.max_children, maxRequests=args.max_requests,
                       timeout=args.timeout)
    kwargs.update((key, value) for key, value in options.items() if value is not None)
    return kwargs


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.overload_wait is not None and (args.mode != 'fork' or args.overload_wait < 0):
        parser.error('--overload-wait takes seconds >= 0, with --mode fork')
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format='%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s')
    app = load_app(args.app) if args.app else demo_app
    module = importlib.import_module(server_module(args.protocol, args.mode))
    server = module.WSGIServer(app, **server_kwargs(args))
    if args.overload_wait is not None:
        server.overloadWait = args.overload_wait
    if args.protocol == 'ajp':
        if args.ajp_packet_size is not None:
            if not 8192 <= args.ajp_packet_size <= 65536:
                raise SystemExit('flupfast: --ajp-packet-size must be 8192 to 65536')
            server.packetSize = args.ajp_packet_size
        if args.ajp_secret is not None:
            server.secret = args.ajp_secret
    logger_name = getattr(server, 'LoggerName', None)
    if logger_name:
        # flup's SCGI/AJP loggers print through their own console handler; here the
        # command line's handler does, so each line appears once, in one format.
        protocol_logger = logging.getLogger(logger_name)
        for handler in list(protocol_logger.handlers):
            if getattr(handler, '_flupfast_console', False):
                protocol_logger.removeHandler(handler)
    if args.bind is not None:
        where = args.bind
    else:
        where = 'fd 0' if args.protocol == 'fcgi' else server._bindAddress
    logging.getLogger('flupfast').info(
        'flupfast %s serving %s over %s (%s mode, %s backend) on %s',
        flupfast.__version__, args.app or 'the demo app', PROTOCOLS[args.protocol], args.mode,
        flupfast.BACKEND, where)
    try:
        reload = server.run()
    except OSError as exc:
        if exc.errno not in _LISTEN_ERRNOS:
            raise
        # The library raises as flup does; on the command line a sentence says it better.
        logging.getLogger('flupfast').error('cannot listen on %s: %s', args.bind, exc.strerror)
        return 1
    if getattr(server, 'bind_error', None) is not None:
        return 1  # SCGI/AJP log the failure themselves and return False, as flup's do
    if reload:
        # SIGHUP: start afresh with the same command line (flup leaves this to the caller).
        sys.stdout.flush()
        sys.stderr.flush()
        rest = sys.argv[1:] if argv is None else list(argv)
        os.execv(sys.executable, [sys.executable, '-m', 'flupfast'] + rest)
    return 0


if __name__ == '__main__':
    sys.exit(main())
