"""How a flup front end (``scgi.WSGIServer``, ``ajp_fork.WSGIServer``, ...) is assembled from
a protocol base and a mode, once: the body of its ``__init__`` and its ``run``.

Each front end module keeps only flup's signature (compat/ checks it against flup's), its
docstrings (the shared ones come from its protocol base) and a line naming its parts.
"""

__all__ = ['assemble', 'front_run']


def assemble(server, protocol_base, mode_server, args):
    """A front end's ``__init__``: ``args`` is its ``locals()``, flup's keywords by name.

    ``protocol_base.__init__`` gets them, with the flags the mode fixes
    (``mode_server._frontFlags``: prefork is multiprocess, single and prefork are not
    multithreaded) and the protocol's keywords flup's signatures lack, taken from ``**kw``
    (``protocol_base._frontKeywordsInKw``); the rest of ``**kw`` goes to the mode, which
    serves ``server._connectionClass(sock, addr, server, timeout)``. ``timeout`` (the prefork
    front ends') bounds each request.
    """
    args = dict(args)
    del args['self']
    kw = args.pop('kw')
    timeout = args.pop('timeout', None)
    for name in protocol_base._frontKeywordsInKw:
        if name in kw:
            args[name] = kw.pop(name)
    args.update(mode_server._frontFlags)
    protocol_base.__init__(server, **args)
    server._startMode(mode_server, server._connectionClass, (server, timeout), kw)


def front_run(mode_server, doc):
    """A front end's ``run()`` over ``mode_server``'s loop, with its docstring ``doc``."""
    def run(self):
        return self._runServer(mode_server)
    run.__doc__ = doc
    return run
