"""``python -m flupfast``: serve a WSGI app (``module:callable``), or the built-in demo, over
FastCGI, SCGI, uwsgi or AJP13, in the thread, fork or single mode of the flup-compatible
servers.

Every mistake on the command line is one line on stderr and exit status 2; a failure to start
(an address that cannot be listened on, an app that does not import) one line and status 1.

A socket passed by systemd (LISTEN_FDS) is served as it is. Otherwise FastCGI with no
``--bind`` serves the listening socket inherited on fd 0 (mod_fcgid, lighttpd ``bin-path``,
spawn-fcgi) and falls back to one CGI request when fd 0 is not a socket; SCGI, uwsgi and AJP
without ``--bind`` listen on flup's defaults (localhost:4000, uwsgi as SCGI, and
localhost:8009). SIGHUP reloads: the
requests in flight end, the app is checked to import, and the command is executed afresh in
the same process (same PID) on the same listening socket; SIGINT and SIGTERM stop it.
"""
import argparse
import importlib
import inspect
import logging
import os
import signal
import socket
import sys
import time

import flupfast
from flupfast import ops
from flupfast.cli_apps import StartError, app_load_problem, demo_app, load_app
from flupfast.limits import FORK_OVERLOAD_WAIT
from flupfast.serving import handover, systemd
from flupfast.serving.listen import resolve_owner, socket_in_use
from flupfast.serving.signals import ReloadRequests

PROTOCOLS = {'fcgi': 'FastCGI', 'scgi': 'SCGI', 'uwsgi': 'uwsgi', 'ajp': 'AJP13'}
MODES = ('thread', 'fork', 'single')
LOG_LEVELS = ('DEBUG', 'INFO', 'WARNING', 'ERROR', 'CRITICAL')

DESCRIPTION = ('Serve a WSGI app (module:callable), or the built-in demo, over FastCGI, SCGI, '
               'uwsgi or AJP13, in the thread, fork or single mode of the flup-compatible servers.')
EPILOG = """\
FastCGI with no --bind serves the listening socket inherited on fd 0 (mod_fcgid, lighttpd
bin-path, spawn-fcgi); SCGI, uwsgi and AJP13 with no --bind listen on flup's defaults
(localhost:4000 for SCGI and uwsgi, localhost:8009). SIGHUP reloads (the command is run again), SIGINT and
SIGTERM stop, SIGUSR1 replaces fork mode's children."""

# Options that only one mode or protocol reads: given elsewhere they would be ignored in
# silence, so they are refused. (option, attribute, modes or None, protocols or None)
_RESTRICTED_OPTIONS = (
    ('--max-threads', 'max_threads', ('thread',), None),
    ('--max-children', 'max_children', ('fork',), None),
    ('--max-requests', 'max_requests', ('fork',), None),
    ('--max-requests-jitter', 'max_requests_jitter', ('fork',), None),
    ('--max-memory', 'max_memory', ('fork',), None),
    ('--timeout', 'timeout', ('fork',), None),
    ('--overload-wait', 'overload_wait', ('fork',), None),
    ('--min-spare', 'min_spare', ('thread', 'fork'), None),
    ('--max-spare', 'max_spare', ('thread', 'fork'), None),
    ('--multiplexed', 'multiplexed', None, ('fcgi',)),
    ('--umask', 'umask', None, ('fcgi', 'scgi', 'uwsgi')),
    ('--ajp-packet-size', 'ajp_packet_size', None, ('ajp',)),
    ('--ajp-secret', 'ajp_secret', None, ('ajp',)),
)


class UsageError(Exception):
    """A mistake on the command line: one line, exit status 2."""


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints its usage block before each error; here the error is one line that
    points to --help."""

    def error(self, message):
        raise UsageError('%s (see --help)' % message)


def server_module(protocol, mode):
    """The flup-compatible module serving ``protocol`` in ``mode`` (``flupfast.server.scgi_fork``)."""
    suffix = {'thread': '', 'fork': '_fork', 'single': '_single'}[mode]
    return 'flupfast.server.%s%s' % (protocol, suffix)


def parse_bind(value):
    """``unix:/path`` or a path with a slash -> Unix socket; ``host:port`` -> IPv4;
    ``[v6addr]:port`` -> IPv6; ``:port`` -> all IPv4 interfaces."""
    if value.startswith('unix:'):
        if not value[5:]:
            raise argparse.ArgumentTypeError('unix: needs a path (unix:/run/app.sock)')
        return value[5:]
    if '/' in value:
        return value
    if value.startswith('['):
        host, sep, port = value[1:].partition(']:')
        if not sep or not host:
            raise argparse.ArgumentTypeError('expected [v6addr]:port, not %r' % value)
        return (host, _port(port, value), 0, 0)
    host, sep, port = value.rpartition(':')
    if not sep:
        raise argparse.ArgumentTypeError('expected host:port, [v6]:port or unix:/path, not %r'
                                         % value)
    return (host, _port(port, value))


def _port(text, value):
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError('the port in %r must be a number from 0 to 65535'
                                         % value)
    return int(text)


def _octal(maximum, what):
    """A parser of octal numbers up to ``maximum``; ``what`` names them in the error."""
    def parse(value):
        try:
            number = int(value, 8)
        except ValueError:
            number = -1
        if not 0 <= number <= maximum:
            raise argparse.ArgumentTypeError('expected %s, not %r' % (what, value))
        return number
    return parse


parse_umask = _octal(0o777, 'an octal umask such as 007 or 0117')
parse_mode = _octal(0o7777, 'octal permissions such as 660')


def parse_owner(value):
    """``user``, ``user:group`` or ``:group``, checked against this machine's users."""
    try:
        return resolve_owner(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError('%s (give USER[:GROUP] of this machine)' % exc) from None


def parse_log_level(value):
    """A logging level name, in any case."""
    level = value.upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError('expected one of %s, not %r'
                                         % (', '.join(name.lower() for name in LOG_LEVELS), value))
    return level


def _number(kind, minimum, what):
    def parse(value):
        try:
            number = kind(value)
        except ValueError:
            number = None
        if number is None or number < minimum:
            raise argparse.ArgumentTypeError('expected %s, not %r' % (what, value))
        return number
    parse.__name__ = what  # argparse names the type in some of its own messages
    return parse


_count = _number(int, 1, 'a whole number >= 1')
_seconds = _number(float, 0, 'seconds >= 0')
_positive_seconds = _number(float, 0.001, 'seconds > 0')


def build_parser():
    parser = _OneLineParser(
        prog='python -m flupfast', description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--version', action='version',
                        version='flupfast %s (%s backend, Python %s)'
                        % (flupfast.__version__, flupfast.BACKEND, sys.version.split()[0]))
    parser.add_argument('app', nargs='?', help='the WSGI app as module:callable '
                        '(default: the built-in demo)')
    parser.add_argument('--protocol', choices=sorted(PROTOCOLS), default='fcgi',
                        help='what the web server speaks (default fcgi)')
    parser.add_argument('--mode', choices=MODES, default='thread',
                        help='thread pool, prefork children, or one at a time (default thread)')
    parser.add_argument('--bind', type=parse_bind, default=None,
                        help='host:port, [v6]:port or unix:/path (default: the socket on fd 0)')
    parser.add_argument('--umask', type=parse_umask, default=None,
                        help='FastCGI/SCGI/uwsgi: umask (octal) while creating a Unix socket')
    parser.add_argument('--socket-owner', metavar='USER[:GROUP]', type=parse_owner, default=None,
                        help='owner of the Unix socket, e.g. root:www-data: the web server\'s '
                        'user or group must be able to open it')
    parser.add_argument('--socket-mode', metavar='MODE', type=parse_mode, default=None,
                        help='permissions of the Unix socket (octal, e.g. 660)')
    parser.add_argument('--min-spare', type=_count, help='minimum idle threads/children')
    parser.add_argument('--max-spare', type=_count, help='maximum idle threads/children')
    parser.add_argument('--max-threads', type=_count, help='thread mode: most threads')
    parser.add_argument('--max-children', type=_count, help='fork mode: most children')
    parser.add_argument('--max-requests', type=_count,
                        help='fork mode: requests a child serves before it is replaced')
    parser.add_argument('--max-requests-jitter', type=_count, metavar='N',
                        help='fork mode: each child serves --max-requests plus a random 0 to N '
                        'requests, so children do not all restart at once')
    parser.add_argument('--max-memory', type=_count, metavar='MB',
                        help='fork mode: replace a child after its request once its resident '
                        'memory passes MB megabytes')
    parser.add_argument('--timeout', type=_count, help='fork mode: seconds a request may take')
    parser.add_argument('--overload-wait', type=_seconds, default=None, metavar='SECONDS',
                        help='fork mode: seconds connections may wait with every child busy '
                             'before they are answered "overloaded" (default %g)'
                             % FORK_OVERLOAD_WAIT)
    parser.add_argument('--multiplexed', action='store_true',
                        help='FastCGI: serve several requests per connection at once')
    parser.add_argument('--allowed-servers', default=None,
                        help='comma-separated IP addresses of the web servers allowed to '
                        'connect over TCP (default: anybody; FastCGI also honours '
                        'FCGI_WEB_SERVER_ADDRS)')
    parser.add_argument('--ajp-packet-size', type=_number(int, 8192, 'bytes from 8192 to 65536'),
                        default=None,
                        help='AJP: size of the packets sent, as the web server\'s '
                        'ProxyIOBufferSize (default 8192, at most 65536)')
    parser.add_argument('--ajp-secret', default=None,
                        help='AJP: refuse requests without this secret (mod_proxy_ajp secret=)')
    parser.add_argument('--ping-path', metavar='PATH', default=None,
                        help='answer PATH (e.g. /ping) without the app, for health checks '
                        '(PHP-FPM\'s ping.path)')
    parser.add_argument('--ping-response', metavar='TEXT', default='pong',
                        help='the body of the ping answer (default pong)')
    parser.add_argument('--status-path', metavar='PATH', default=None,
                        help='answer PHP-FPM\'s status page on PATH (e.g. /fpm-status; '
                        '?json, ?xml, ?html, ?full) without the app (pm.status_path)')
    parser.add_argument('--access-log', metavar='FILE', default=None,
                        help='one line per request to FILE (- for stderr); a rotated file is '
                        'opened anew within a second')
    parser.add_argument('--access-log-format', metavar='FORMAT', default=ops.DEFAULT_FORMAT,
                        help='gunicorn\'s access_log_format atoms (default: the combined '
                        'format)')
    parser.add_argument('--slow-log', metavar='SECONDS', type=_positive_seconds, default=None,
                        help='log the Python stack of a request still running after SECONDS '
                        '(PHP-FPM\'s request_slowlog_timeout)')
    parser.add_argument('--request-timeout', metavar='SECONDS', type=_positive_seconds,
                        default=None,
                        help='end a request still running after SECONDS, its stack logged: '
                        'fork mode ends the child (the web server answers 502), the other '
                        'modes raise in the request (PHP-FPM\'s request_terminate_timeout)')
    parser.add_argument('--no-proctitle', action='store_true',
                        help='leave the process titles alone (by default, with the setproctitle '
                        'package installed, ps shows "flupfast: master [APP]" and each fork-mode '
                        'child as "flupfast: worker N [APP] idle" or "busy METHOD URI")')
    parser.add_argument('--debug', action='store_true', help='show tracebacks on error pages')
    parser.add_argument('--log-level', type=parse_log_level, default='INFO',
                        help='debug, info, warning, error or critical (default info)')
    return parser


def server_kwargs(args):
    kwargs = {'debug': args.debug}
    if args.request_timeout is not None:
        kwargs['requestTimeout'] = args.request_timeout
    if args.protocol == 'fcgi':
        kwargs.update(bindAddress=args.bind, umask=args.umask, multiplexed=args.multiplexed)
    else:
        if args.bind is not None:  # else flup's default address for the protocol
            kwargs['bindAddress'] = args.bind
        if args.umask is not None and args.protocol != 'ajp':  # flup's AJP has no umask
            kwargs['umask'] = args.umask
        kwargs['loggingLevel'] = logging.getLevelName(args.log_level.upper())
    if args.status_path is not None:
        kwargs['statusPath'] = args.status_path
    if args.allowed_servers:
        kwargs['allowedServers'] = [a.strip() for a in args.allowed_servers.split(',')]
    options = {'minSpare': args.min_spare, 'maxSpare': args.max_spare}
    if args.mode == 'thread':
        options['maxThreads'] = args.max_threads
    elif args.mode == 'fork':
        options.update(maxChildren=args.max_children, maxRequests=args.max_requests,
                       timeout=args.timeout, maxRequestsJitter=args.max_requests_jitter,
                       maxMemory=args.max_memory)
    kwargs.update((key, value) for key, value in options.items() if value is not None)
    return kwargs


def check_usage(args):
    """Refuse what would be ignored in silence or fail later with a traceback."""
    for option, attr, modes, protocols in _RESTRICTED_OPTIONS:
        value = getattr(args, attr)
        if value is None or value is False:
            continue
        if modes is not None and args.mode not in modes:
            raise UsageError('%s applies to --mode %s only' % (option, ' or '.join(modes)))
        if protocols is not None and args.protocol not in protocols:
            raise UsageError('%s applies to --protocol %s only' % (option, ' or '.join(protocols)))
    if args.mode == 'fork':
        _check_spares(args)
    if args.max_requests_jitter and not args.max_requests:
        raise UsageError('--max-requests-jitter adds to --max-requests: give both')
    if args.ajp_packet_size is not None and args.ajp_packet_size > 65536:
        raise UsageError('--ajp-packet-size must be 8192 to 65536, not %d' % args.ajp_packet_size)
    for option, path in (('--ping-path', args.ping_path), ('--status-path', args.status_path)):
        if path is not None and not path.startswith('/'):
            raise UsageError('%s takes a path such as /ping, not %r' % (option, path))
    for option in ('socket_owner', 'socket_mode'):
        if getattr(args, option) is not None and not isinstance(args.bind, str):
            raise UsageError('--%s applies to a Unix socket (--bind unix:/path) only'
                             % option.replace('_', '-'))
    if args.protocol == 'fcgi' and args.bind is None and _stdin_is_terminal() and \
            not systemd.sockets_passed():
        raise UsageError('nothing to serve: FastCGI without --bind serves the socket a web server '
                         'passes on fd 0, and fd 0 is a terminal; give --bind 127.0.0.1:9000 or '
                         '--bind unix:/run/app.sock')


def _check_spares(args):
    """--min-spare above --max-spare (either given or flup's default) is refused here: the
    server's constructor would raise it as flup's ValueError, with a traceback."""
    from flupfast.server.preforkserver import PreforkServer
    defaults = inspect.signature(PreforkServer.__init__).parameters
    low = args.min_spare if args.min_spare is not None else defaults['minSpare'].default
    high = args.max_spare if args.max_spare is not None else defaults['maxSpare'].default
    if low > high:
        raise UsageError('--min-spare (%d) is above --max-spare (%d%s): idle children are '
                         'kept between the two' % (low, high, '' if args.max_spare is not None
                                                   else ', the default'))


def _stdin_is_terminal():
    try:
        return os.isatty(0)
    except OSError:
        return False


def describe_address(address):
    """An address as the user writes it on the command line."""
    if isinstance(address, tuple):
        host, port = address[0], address[1]
        return '[%s]:%d' % (host, port) if ':' in host else '%s:%d' % (host, port)
    return 'unix:%s' % os.fspath(address)


class ListeningSocket:
    """The command line's hold on the server's listening socket, through flup's documented
    override points ``_setupSocket``/``_cleanupSocket`` (wrapped on this instance only):

    - a socket passed in (systemd's LISTEN_FDS, or the previous image after a reload) is used
      instead of binding; otherwise the server binds, and a failure is one StartError line,
      the same for every protocol;
    - "serving ... on ADDR" is logged, and READY=1 sent to systemd, once it listens;
    - it is not closed when run() ends for a reload, so the reload hands it over open (fd 3,
      as systemd passes it): connections arriving meanwhile wait in its backlog, and a Unix
      socket's path is never unlinked; a stop closes it at once, as flup does.
    """

    def __init__(self, server, what):
        self.what = what
        self.sock = None
        self._on_fd0 = False
        self.attach(server)

    def attach(self, server):
        """Serve ``server`` from this socket (bound or passed at its first run())."""
        self.server = server
        self._setup = server._setupSocket
        server._setupSocket = self.setup
        server._cleanupSocket = self.cleanup

    def cleanup(self, sock):
        """When the server stops, close at once: new connections are refused (a front fails
        over to another backend) while the requests in flight finish. When it reloads, keep
        the socket for the next run or image."""
        if not getattr(self.server, '_hupReceived', False):
            self.close()

    def setup(self):
        if self.sock is not None:
            return self.sock  # run() again after a refused reload
        log = logging.getLogger('flupfast')
        sock = systemd.listen_socket(take=True)
        if sock is not None:
            where = '%s (passed on fd %d)' % (describe_address(sock.getsockname()),
                                              systemd.LISTEN_FDS_START)
        else:
            sock = self._bind()
            if getattr(self.server, '_bindAddress', None) is None:
                self._on_fd0 = True
                where = 'the socket on fd 0'
            else:
                where = describe_address(sock.getsockname())
        self.sock = sock
        # The previous image's idle kept connections, for the mode to take up (thread mode).
        kept = handover.inherited_connections()
        if kept:
            handover.keep_connections(sock.getsockname(), kept)
            where += ', with %d kept connection(s) handed over' % len(kept)
        log.info('flupfast %s serving %s on %s', flupfast.__version__, self.what, where)
        systemd.notify('READY=1', 'STATUS=serving on %s' % where, 'MAINPID=%d' % os.getpid())
        return sock

    def _bind(self):
        address = getattr(self.server, '_bindAddress', None)
        if isinstance(address, (str, os.PathLike)) and socket_in_use(address):
            # flup would take the path over, and the server there would serve on, unreached.
            raise StartError('cannot listen on %s: another server is listening there (stop '
                             'it first, or give another path)' % describe_address(address))
        try:
            return self._setup()
        except OSError as exc:
            address = getattr(self.server, '_bindAddress', None)
            reason = exc.strerror or str(exc)
            if isinstance(exc, socket.gaierror):
                reason = 'unknown host (%s)' % reason
            raise StartError('cannot listen on %s: %s' % (
                describe_address(address) if address is not None else 'fd 0', reason)) from None

    def hand_over(self, environ):
        """The environ for the next image; the socket survives the exec as fd 3 (the one
        inherited on fd 0, mod_fcgid's, by itself), and the idle kept connections the threaded
        mode kept on fds from 4 (serving/handover.py)."""
        environ = handover.pass_connections(
            handover.take_connections(self.sock.getsockname()), environ)
        if self._on_fd0:
            return environ
        return systemd.hand_over(self.sock, environ)

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def main(argv=None):
    if '' not in sys.path and os.getcwd() not in sys.path and \
            not getattr(sys.flags, 'safe_path', False):
        # The console script: `python -m flupfast` serves module:callable from the current
        # directory, and the `flupfast` command is the same command (unless Python was told
        # not to: -P, PYTHONSAFEPATH).
        sys.path.insert(0, os.getcwd())
    try:
        return _main(argv)
    except UsageError as exc:
        print('python -m flupfast: error: %s' % exc, file=sys.stderr)
        return 2
    except StartError as exc:
        print('flupfast: %s' % exc, file=sys.stderr)
        return 1


def _main(argv):
    reload_requests = ReloadRequests()
    reload_requests.watch()
    args = build_parser().parse_args(argv)
    check_usage(args)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format='%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s')
    reload_requests.mark()  # a SIGHUP from here on may have come after the code was read
    app = load_app(args.app) if args.app else demo_app
    try:
        app = ops.install(app, ping_path=args.ping_path, ping_response=args.ping_response,
                          access_log=args.access_log, access_log_format=args.access_log_format,
                          slow_log=args.slow_log)
    except OSError as exc:
        raise StartError('cannot open the access log %s: %s' % (args.access_log,
                                                               exc.strerror)) from None
    if not args.no_proctitle:
        ops.proctitle.enable(args.app or 'demo')
    server = build_server(args, app)
    listening = ListeningSocket(server, '%s over %s (%s mode, %s backend)' % (
        args.app or 'the demo app', PROTOCOLS[args.protocol], args.mode, flupfast.BACKEND))
    log = logging.getLogger('flupfast')
    while run_watched(server, reload_requests):
        # SIGHUP: the requests in flight have ended; start afresh with the same command line
        # and the same socket (flup leaves reloading to the caller). New code that does not
        # load is refused, and the code already loaded serves on, from a new server object
        # (a stopped one does not run again) on the same socket. A SIGHUP outside run() is
        # recorded, not fatal (ReloadRequests). A stop signal that came during the reload's
        # drain (systemctl reload, then stop) ends it here: flup's run() says True whenever
        # a SIGHUP came.
        if reload_requests.stop_seen:
            log.info('stopping: a stop signal came during the reload')
            break
        reload_requests.mark()
        problem = app_load_problem(args.app)
        while problem is not None and reload_requests.take():
            problem = app_load_problem(args.app)  # fixed while it was checked: look again
        if problem is None:
            systemd.notify('RELOADING=1', 'STATUS=reloading',
                           'MONOTONIC_USEC=%d' % (time.monotonic_ns() // 1000))
            log.info('reloading: %s', ' '.join(['python -m flupfast'] + sys.argv[1:]))
            ops.flush()
            sys.stdout.flush()
            sys.stderr.flush()
            rest = sys.argv[1:] if argv is None else list(argv)
            reload_requests.reload_image(sys.executable, [sys.executable, '-m', 'flupfast'] + rest,
                                         listening.hand_over(os.environ))
        log.error('reload refused, serving on with the code already loaded: %s', problem)
        systemd.notify('READY=1', 'STATUS=reload refused: %s' % problem)
        server = build_server(args, app)
        listening.attach(server)
    systemd.notify('STOPPING=1')
    listening.close()
    return 0


def run_watched(server, reload_requests):
    """``server.run()`` with the command line's two questions answered through flup's
    hooks: whether a stop signal came while it ran (``reload_requests.stop_seen``), and a
    SIGHUP recorded before it installed its handlers (during start-up, or while a refused
    reload was checked), which is taken as if it came now."""
    int_handler, install = server._intHandler, server._installSignalHandlers

    def on_stop(signum, frame):
        reload_requests.stop_seen = True
        int_handler(signum, frame)

    def install_and_catch_up():
        install()
        if reload_requests.take():
            server._hupHandler(signal.SIGHUP, None)
    server._intHandler, server._installSignalHandlers = on_stop, install_and_catch_up
    return server.run()


def build_server(args, app):
    """The flup-compatible server the command line asks for, configured."""
    module = importlib.import_module(server_module(args.protocol, args.mode))
    server = module.WSGIServer(app, **server_kwargs(args))
    if args.overload_wait is not None:
        server.overloadWait = args.overload_wait
    server.socketOwner = args.socket_owner
    server.socketMode = args.socket_mode
    if args.protocol == 'ajp':
        if args.ajp_packet_size is not None:
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
    return server


if __name__ == '__main__':
    sys.exit(main())
