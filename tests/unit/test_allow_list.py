"""Who may connect (serving/listen.py AllowList), once for FastCGI, SCGI and AJP13: flup's two
rules (allowedServers; FCGI_WEB_SERVER_ADDRS), the refusal logged once per address per
minute, the warning for a TCP socket beyond loopback with no allow-list, and the loopback
defaults of flup's TCP binds. Processes in every mode: tests/reliability/test_access.py.
"""
import inspect
import logging
import socket

import pytest

from flupfast import __main__ as cli
from flupfast.limits import REFUSED_PEER_LOG_INTERVAL
from flupfast.server import ajp, ajp_base, ajp_fork, ajp_single, fcgi, fcgi_fork, fcgi_single
from flupfast.server import paste_factory, scgi, scgi_base, scgi_fork, scgi_single
from flupfast.serving.listen import AllowList, is_loopback, warn_if_exposed


def hello(environ, start_response):
    start_response('200 OK', [])
    return [b'hi']


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_allowed_servers_rule():
    rule = AllowList(['127.0.0.1', '10.0.0.5'])
    assert rule.admits(('127.0.0.1', 1)) and rule.admits(('10.0.0.5', 2))
    assert not rule.admits(('10.0.0.6', 1))
    assert rule.admits('') and rule.admits('/run/web.sock')   # Unix peers: file modes decide
    assert not rule.admits(('::1', 1, 0, 0))                  # IPv6 is checked, not waved in
    assert rule.admits(('::ffff:10.0.0.5', 1, 0, 0))          # an IPv4-mapped listed peer
    assert AllowList(['::1']).admits(('::1', 1, 0, 0))
    assert AllowList(None).admits(('203.0.113.9', 1)) and not AllowList(None).restricted


def test_fcgi_web_server_addrs_rule_is_flups():
    rule = AllowList.web_server_addrs(['127.0.0.1'])
    assert rule.admits(('127.0.0.1', 1))
    assert not rule.admits('')                                # flup refuses Unix peers
    assert not rule.admits(('::ffff:127.0.0.1', 1, 0, 0))     # and every IPv6 peer
    assert AllowList.web_server_addrs(None).admits('')


def test_refusal_logged_once_per_address_per_interval(caplog):
    clock = Clock()
    rule = AllowList(['127.0.0.1'], logger=logging.getLogger('t.allow'), clock=clock,
                     reason='not in allowedServers')
    with caplog.at_level(logging.WARNING, logger='t.allow'):
        for _ in range(50):
            assert not rule.allows(('10.1.1.1', 5))
        assert not rule.allows(('10.2.2.2', 5))
        clock.now += REFUSED_PEER_LOG_INTERVAL - 1
        assert not rule.allows(('10.1.1.1', 6))
        clock.now += 1
        assert not rule.allows(('10.1.1.1', 7))
    lines = [r.getMessage() for r in caplog.records]
    assert lines.count(lines[0]) == 2 and len(lines) == 3
    assert lines[0].startswith('Server connection from 10.1.1.1 disallowed: '
                               'not in allowedServers')
    assert 'Server connection from 10.2.2.2 disallowed' in lines[1]


@pytest.mark.parametrize('server', [
    lambda: scgi_base.BaseSCGIServer(hello, allowedServers=['127.0.0.1']),
    lambda: ajp_base.BaseAJPServer(hello, allowedServers=['127.0.0.1']),
    lambda: fcgi.WSGIServer(hello, allowedServers=['127.0.0.1']),
    lambda: fcgi_fork.WSGIServer(hello, allowedServers=['127.0.0.1']),
    lambda: fcgi_single.WSGIServer(hello, allowedServers=['127.0.0.1']),
], ids=['scgi', 'ajp', 'fcgi', 'fcgi_fork', 'fcgi_single'])
def test_every_protocol_applies_allowed_servers(server, caplog):
    srv = server()
    with caplog.at_level(logging.WARNING):
        assert srv._isClientAllowed(('127.0.0.1', 1))
        assert not srv._isClientAllowed(('127.0.0.2', 1))
        assert not srv._isClientAllowed(('127.0.0.2', 2))
        assert srv._isClientAllowed('')
    assert caplog.text.count('Server connection from 127.0.0.2 disallowed') == 1
    srv._allowedServers = None  # flup's attribute, reassigned: read again
    assert srv._isClientAllowed(('127.0.0.2', 1))


@pytest.mark.parametrize('make', [
    lambda **kw: scgi_fork.WSGIServer(hello, **kw),
    lambda **kw: ajp_fork.WSGIServer(hello, **kw),
    lambda **kw: fcgi_fork.WSGIServer(hello, **kw),
], ids=['scgi', 'ajp', 'fcgi'])
def test_a_fork_child_skips_the_check_only_when_it_admits_everybody(make):
    """A prefork child asks nothing per connection only when the stock check has no list;
    a list, FCGI_WEB_SERVER_ADDRS, or an override (class or instance) is asked."""
    assert make()._admitsEveryPeer()
    assert not make(allowedServers=['127.0.0.1'])._admitsEveryPeer()
    srv = make()
    srv._isClientAllowed = lambda addr: False
    assert not srv._admitsEveryPeer()
    srv = make()

    class Picky(type(srv)):
        def _isClientAllowed(self, addr):
            return False
    assert not Picky(hello)._admitsEveryPeer()
    srv._allowedServers = ['127.0.0.1']  # flup's attribute, reassigned before the fork
    assert not srv._admitsEveryPeer()
    if hasattr(srv, '_web_server_addrs'):
        srv = make()
        srv._web_server_addrs = ['127.0.0.1']
        assert not srv._admitsEveryPeer()


def test_fastcgi_applies_both_of_its_lists(monkeypatch):
    srv = fcgi.WSGIServer(hello, allowedServers=['127.0.0.1', '127.0.0.3'])
    srv._web_server_addrs = ['127.0.0.1', '127.0.0.2']  # what run() reads from the variable
    assert srv._isClientAllowed(('127.0.0.1', 1))
    assert not srv._isClientAllowed(('127.0.0.2', 1))
    assert not srv._isClientAllowed(('127.0.0.3', 1))
    assert not srv._isClientAllowed('')  # FCGI_WEB_SERVER_ADDRS refuses Unix peers


def test_command_line_passes_allowed_servers_to_every_protocol():
    for protocol in ('fcgi', 'scgi', 'ajp'):
        args = cli.build_parser().parse_args(['--protocol', protocol,
                                              '--allowed-servers', '127.0.0.1, 10.0.0.1'])
        assert cli.server_kwargs(args)['allowedServers'] == ['127.0.0.1', '10.0.0.1']


@pytest.mark.parametrize('host, expected', [
    ('127.0.0.1', True), ('127.1.2.3', True), ('::1', True), ('::ffff:127.0.0.1', True),
    ('0.0.0.0', False), ('::', False), ('10.0.0.1', False), ('fe80::1%lo', False)])
def test_is_loopback(host, expected):
    assert is_loopback(host) is expected


def test_warning_for_a_socket_beyond_loopback_without_allow_list(caplog):
    logger = logging.getLogger('t.exposed')
    with socket.socket() as anywhere, socket.socket() as loop, socket.socket(socket.AF_UNIX) \
            as unix, caplog.at_level(logging.WARNING, logger='t.exposed'):
        anywhere.bind(('0.0.0.0', 0))
        loop.bind(('127.0.0.1', 0))
        assert warn_if_exposed(anywhere, logger, AllowList(None), None)
        assert not warn_if_exposed(anywhere, logger, AllowList(['127.0.0.1']))
        assert not warn_if_exposed(loop, logger, AllowList(None))
        assert not warn_if_exposed(unix, logger)
    [record] = caplog.records
    assert 'beyond loopback, with no allow-list' in record.getMessage()
    assert 'anybody who can reach it can run requests' in record.getMessage()


def default(func, name):
    return inspect.signature(func).parameters[name].default


@pytest.mark.parametrize('cls', [scgi.WSGIServer, scgi_fork.WSGIServer, scgi_single.WSGIServer,
                                 scgi_base.BaseSCGIServer, ajp.WSGIServer, ajp_fork.WSGIServer,
                                 ajp_single.WSGIServer, ajp_base.BaseAJPServer])
def test_tcp_binds_default_to_loopback_as_flups(cls):
    host = default(cls.__init__, 'bindAddress')[0]
    assert host == 'localhost' and all(
        is_loopback(info[4][0]) for info in socket.getaddrinfo(host, 0, socket.AF_INET))


def test_paste_and_fastcgi_defaults_are_loopback_or_inherited():
    for runner in (paste_factory.run_scgi_thread, paste_factory.run_scgi_fork,
                   paste_factory.run_ajp_thread, paste_factory.run_ajp_fork,
                   paste_factory.run_uwsgi_thread, paste_factory.run_uwsgi_fork):
        assert default(runner, 'host') == 'localhost'
    for cls in (fcgi.WSGIServer, fcgi_fork.WSGIServer, fcgi_single.WSGIServer):
        assert default(cls.__init__, 'bindAddress') is None  # the web server's socket, fd 0
    assert cli.build_parser().parse_args([]).bind is None
