"""flup's ``paste_factory``: the Paste Deploy ``server_runner`` functions (``[server:main]``
``use = egg:flupfast#fcgi_thread`` ...) with flup's names, arguments and defaults.

Only argument parsing (ini values are strings); the servers are flupfast.server's front ends.
flup's runners all raise NameError on Python 3 (``unicode``, paste_factory.py:7,19). The uwsgi
runners (``egg:flupfast#uwsgi``, ``uwsgi_thread``, ``uwsgi_fork``) are not in flup.
"""
from importlib import import_module

from flupfast.server import NoDefault

_TRUE = ('true', 'yes', 'on', 'y', 't', '1')
_FALSE = ('false', 'no', 'off', 'n', 'f', '0')


def asbool(obj):
    """An ini value as a bool: true/yes/on/y/t/1 or false/no/off/n/f/0, any case; other
    strings raise ValueError; non-strings go through ``bool``."""
    if isinstance(obj, str):
        obj = obj.strip().lower()
        if obj in _TRUE:
            return True
        if obj in _FALSE:
            return False
        raise ValueError('String is not true/false: %r' % obj)
    return bool(obj)


def aslist(obj, sep=None, strip=True):
    """An ini value as a list: a string split on ``sep`` (whitespace by default), a list or
    tuple as is, None as [], anything else as a one-item list."""
    if isinstance(obj, str):
        lst = obj.split(sep)
        if strip:
            lst = [v.strip() for v in lst]
        return lst
    if isinstance(obj, (list, tuple)):
        return obj
    if obj is None:
        return []
    return [obj]


def _debug(debug, global_conf):
    if debug is NoDefault:
        debug = global_conf.get('debug', False)
    return asbool(debug)


def _int_args(**values):
    """The pool arguments that were given, as ints (ini values are strings)."""
    return {name: int(value) for name, value in values.items() if value is not None}


def _fcgi_address(host, port, socket):
    """flup's rule: ``socket`` (a Unix path) excludes host and port; ``host`` needs ``port``;
    neither means the socket inherited on fd 0 (mod_fcgid, spawn-fcgi)."""
    if socket:
        if host is not None or port is not None:
            raise ValueError('give socket or host and port, not both')
        return socket
    if host:
        if port is None:
            raise ValueError('host %r given without a port' % (host,))
        return (host, int(port))
    return None


def _socket_runners(module, protocol, port, script_name):
    """The thread and fork runners for a server taking SCGI's keywords (SCGI, AJP13, uwsgi):
    ``scriptName``, ``host``, ``port``, ``allowedServers`` (space-separated), ``debug`` and the
    pool's; flup's signatures for AJP and SCGI, with ``script_name`` and ``port`` as defaults."""
    def serve(mode, wsgi_app, global_conf, scriptName, host, port, allowedServers, debug,
              **pool):
        server = import_module('flupfast.server.' + module + mode).WSGIServer
        return server(wsgi_app, scriptName=scriptName, bindAddress=(host, int(port)),
                      allowedServers=aslist(allowedServers), debug=_debug(debug, global_conf),
                      **_int_args(**pool)).run()

    def thread(wsgi_app, global_conf, scriptName=script_name, host='localhost', port=port,
               allowedServers='127.0.0.1', debug=NoDefault, minSpare=None, maxSpare=None,
               maxThreads=None):
        return serve('', wsgi_app, global_conf, scriptName, host, port, allowedServers, debug,
                     minSpare=minSpare, maxSpare=maxSpare, maxThreads=maxThreads)

    def fork(wsgi_app, global_conf, scriptName=script_name, host='localhost', port=port,
             allowedServers='127.0.0.1', debug=NoDefault, minSpare=None, maxSpare=None,
             maxChildren=None, maxRequests=None):
        return serve('_fork', wsgi_app, global_conf, scriptName, host, port, allowedServers,
                     debug, minSpare=minSpare, maxSpare=maxSpare, maxChildren=maxChildren,
                     maxRequests=maxRequests)

    for runner, mode, pool, entry in ((thread, 'thread', 'a thread pool', module),
                                      (fork, 'fork', 'prefork children', module + '_fork')):
        runner.__name__ = runner.__qualname__ = 'run_%s_%s' % (module, mode)
        runner.__doc__ = 'Serve ``wsgi_app`` over %s with %s (``egg:flupfast#%s``).' % (
            protocol, pool, entry)
    return thread, fork


def run_fcgi_thread(wsgi_app, global_conf, host=None, port=None, socket=None, umask=None,
                    multiplexed=False, debug=NoDefault, minSpare=None, maxSpare=None,
                    maxThreads=None):
    """Serve ``wsgi_app`` over FastCGI with a thread pool (``egg:flupfast#fcgi``)."""
    from flupfast.server.fcgi import WSGIServer
    return WSGIServer(wsgi_app, bindAddress=_fcgi_address(host, port, socket),
                      umask=None if umask is None else int(umask),
                      multiplexed=asbool(multiplexed), debug=_debug(debug, global_conf),
                      **_int_args(minSpare=minSpare, maxSpare=maxSpare,
                                  maxThreads=maxThreads)).run()


def run_fcgi_fork(wsgi_app, global_conf, host=None, port=None, socket=None, umask=None,
                  multiplexed=False, debug=NoDefault, minSpare=None, maxSpare=None,
                  maxChildren=None, maxRequests=None):
    """Serve ``wsgi_app`` over FastCGI with prefork children (``egg:flupfast#fcgi_fork``)."""
    from flupfast.server.fcgi_fork import WSGIServer
    return WSGIServer(wsgi_app, bindAddress=_fcgi_address(host, port, socket),
                      umask=None if umask is None else int(umask),
                      multiplexed=asbool(multiplexed), debug=_debug(debug, global_conf),
                      **_int_args(minSpare=minSpare, maxSpare=maxSpare,
                                  maxChildren=maxChildren, maxRequests=maxRequests)).run()


# flup's AJP and SCGI runners, and the uwsgi ones (not in flup) with SCGI's keywords and
# defaults, as the uwsgi servers take them.
run_ajp_thread, run_ajp_fork = _socket_runners('ajp', 'AJP13', '8009', '')
run_scgi_thread, run_scgi_fork = _socket_runners('scgi', 'SCGI', '4000', NoDefault)
run_uwsgi_thread, run_uwsgi_fork = _socket_runners('uwsgi', 'uwsgi', '4000', NoDefault)
