"""The nine front ends assembled by server/_front.py: what each passes to its protocol base and
its mode, and the connection settings object their run() builds once and hands to every
connection (the connection reads none of the server's attributes itself)."""
import socket

import pytest

from flupfast.ajp_connection import AJPConfig
from flupfast.fastcgi_connection import FastCGIConfig
from flupfast.server import (ajp, ajp_fork, ajp_single, fcgi, fcgi_fork, fcgi_single, scgi,
                             scgi_fork, scgi_single)
from flupfast.server.preforkserver import PreforkServer
from flupfast.server.threadedserver import ThreadedServer


def app(environ, start_response):
    start_response('200 OK', [])
    return [b'']


FRONTS = [fcgi, fcgi_fork, fcgi_single, scgi, scgi_fork, scgi_single, ajp, ajp_fork, ajp_single]


def build(module, **kw):
    if issubclass(module.WSGIServer, ThreadedServer):
        kw.setdefault('maxThreads', 2)
        kw.setdefault('minSpare', 1)
        kw.setdefault('maxSpare', 1)
    server = module.WSGIServer(app, bindAddress=('127.0.0.1', 0), **kw)
    return server


def job_args_at_run(server):
    """The job arguments the mode has while run() serves (the loop itself stubbed out)."""
    seen = []

    def front(mode_run):
        seen.append(server._jobArgs)
        return False
    server._run_front = front
    try:
        assert server.run() is False
    finally:
        if isinstance(server, ThreadedServer):
            server._threadPool.shutdown(1)
    return seen[0]


@pytest.mark.parametrize('module', FRONTS, ids=lambda m: m.__name__.rpartition('.')[2])
def test_flags_fixed_by_the_mode(module):
    server = build(module)
    if issubclass(module.WSGIServer, PreforkServer):
        assert (server.multithreaded, server.multiprocess) == (False, True)
    elif issubclass(module.WSGIServer, ThreadedServer):
        assert (server.multithreaded, server.multiprocess) == (True, False)
        server._threadPool.shutdown(1)
    else:
        assert (server.multithreaded, server.multiprocess) == (False, False)
    assert server._jobClass is server._connectionClass


@pytest.mark.parametrize('module', [fcgi_fork, scgi_fork, ajp_fork],
                         ids=['fcgi_fork', 'scgi_fork', 'ajp_fork'])
def test_prefork_timeout_reaches_the_connections(module):
    server = build(module, timeout=7, multithreaded=True, jobClass=object)
    assert server._jobArgs[:2] == (server, 7)
    assert server._jobClass is server._connectionClass  # flup drops jobClass here


@pytest.mark.parametrize('module', [fcgi, fcgi_fork, fcgi_single],
                         ids=['fcgi', 'fcgi_fork', 'fcgi_single'])
def test_fastcgi_allowed_servers_from_kw(module):
    server = build(module, allowedServers=['10.0.0.1'])
    assert server._allowedServers == ['10.0.0.1']
    if module is fcgi:
        server._threadPool.shutdown(1)


@pytest.mark.parametrize('module', [fcgi, fcgi_fork, fcgi_single],
                         ids=['fcgi', 'fcgi_fork', 'fcgi_single'])
@pytest.mark.parametrize('multiplexed', [False, True])
def test_fastcgi_settings_read_at_run(module, multiplexed):
    server = build(module, multiplexed=multiplexed)
    server.maxwrite = 4096 + 8  # set between construction and run(), as a site may
    args = job_args_at_run(server)
    server_arg, _, config = args
    assert server_arg is server
    assert isinstance(config, FastCGIConfig)
    assert (config.max_content, config.multiplexed) == (4096, multiplexed)
    assert config.capability is server.capability
    # A connection takes its settings from the object, not from the server.
    server.maxwrite = 65536
    ours, theirs = socket.socketpair()
    with ours, theirs:
        conn = server._connectionClass(theirs, None, *args)
        assert (conn.max_content, conn.multiplexed, conn.can_park) == \
            (4096, multiplexed, not multiplexed)


@pytest.mark.parametrize('module', [ajp, ajp_fork, ajp_single],
                         ids=['ajp', 'ajp_fork', 'ajp_single'])
def test_ajp_packet_size_read_at_run(module):
    server = build(module)
    server.packetSize = 65536
    args = job_args_at_run(server)
    config = args[2]
    assert isinstance(config, AJPConfig)
    assert (config.packet_size, config.body_chunk) == (65536, 65528)
    server.packetSize = 8192
    ours, theirs = socket.socketpair()
    with ours, theirs:
        conn = server._connectionClass(theirs, '', *args)
        assert (conn.packet_size, conn.body_chunk) == (65536, 65528)


@pytest.mark.parametrize('module', [scgi, scgi_fork, scgi_single],
                         ids=['scgi', 'scgi_fork', 'scgi_single'])
def test_scgi_has_no_settings_object(module):
    server = build(module)
    assert job_args_at_run(server) == (server, None)


def test_run_twice_builds_the_settings_again():
    """``while server.run():`` (a reload) reads the attributes again, not appended twice."""
    server = build(ajp_single)
    server.packetSize = 16384
    assert job_args_at_run(server)[2].packet_size == 16384
    server.packetSize = 32768
    args = job_args_at_run(server)
    assert len(args) == 3 and args[2].packet_size == 32768
