"""Run real flup 1.0.3 with the command line of ``python -m flupfast``, so the peer fixtures
can start either server by swapping the command.

Test-only: it imports flup (a test dependency) and must never be imported by the package.

    python flup_launcher.py [--protocol fcgi|scgi|ajp] --mode thread|fork|single
                            --bind HOST:PORT|unix:/path [--allowed-servers A,B]
                            [--package flup|flupfast] [--kwargs JSON] [module:callable]

``--package flupfast`` runs flupfast through the very same lines (``flupfast.server.<module>``
in place of ``flup.server.<module>``), so the differential tests (compat/) compare the two
libraries, not two command lines; ``--kwargs`` adds keyword arguments for ``WSGIServer`` (a JSON
object). What ``run()`` returns is reported on stderr as ``flup_launcher: run() returned X``
(only the parent of a prefork server gets there).

No ``--bind``: FastCGI serves on the listening socket inherited as fd 0 (mod_fcgid style); SCGI
and AJP use flup's default addresses. No app: a built-in hello app. flup has no SCGI or AJP
single mode, and its AJP server binds IPv4 only. ``--allowed-servers`` (SCGI/AJP) becomes
flup's ``allowedServers`` list; without it flup's front-end classes accept anybody (None).
"""
import argparse
import importlib
import json
import sys


def demo_app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"Hello from flup 1.0.3\n"]


def parse_bind(value):
    """``unix:/path`` -> str (flup's Unix socket form); ``HOST:PORT`` -> (host, port)."""
    if value is None:
        return None
    if value.startswith("unix:"):
        return value[len("unix:"):]
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError("--bind must be HOST:PORT or unix:/path, not %r" % value)
    host = host.strip("[]")
    if ":" in host:  # IPv6: flup picks AF_INET6 from a tuple longer than 2
        return (host, int(port), 0, 0)
    return (host or "127.0.0.1", int(port))


def load_app(spec):
    if not spec:
        return demo_app
    module_name, _, attr = spec.partition(":")
    obj = importlib.import_module(module_name)
    for part in (attr or "application").split("."):
        obj = getattr(obj, part)
    return obj


MODULES = {
    ("fcgi", "thread"): "flup.server.fcgi",
    ("fcgi", "fork"): "flup.server.fcgi_fork",
    ("fcgi", "single"): "flup.server.fcgi_single",
    ("scgi", "thread"): "flup.server.scgi",
    ("scgi", "fork"): "flup.server.scgi_fork",
    ("ajp", "thread"): "flup.server.ajp",
    ("ajp", "fork"): "flup.server.ajp_fork",
}


def server_class(mode, protocol="fcgi", package="flup"):
    if package == "flupfast":  # flupfast also has scgi_single and ajp_single
        from flupfast.__main__ import server_module
        return importlib.import_module(server_module(protocol, mode)).WSGIServer
    try:
        module = MODULES[protocol, mode]
    except KeyError:
        raise SystemExit("flup 1.0.3 has no %s server in %s mode" % (protocol, mode)) from None
    return importlib.import_module(module).WSGIServer


def main(argv=None):
    parser = argparse.ArgumentParser(prog="flup_launcher", description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", choices=("fcgi", "scgi", "ajp"), default="fcgi")
    parser.add_argument("--mode", choices=("thread", "fork", "single"), default="thread")
    parser.add_argument("--bind", default=None, help="HOST:PORT or unix:/path; default fd 0")
    parser.add_argument("--umask", type=lambda s: int(s, 8), default=None,
                        help="umask while creating a Unix socket (octal)")
    parser.add_argument("--allowed-servers", default=None,
                        help="SCGI/AJP: comma-separated IPv4 addresses allowed to connect")
    parser.add_argument("--package", choices=("flup", "flupfast"), default="flup",
                        help="the library whose WSGIServer runs (default flup)")
    parser.add_argument("--kwargs", type=json.loads, default={},
                        help="more WSGIServer keyword arguments, as a JSON object")
    parser.add_argument("app", nargs="?", default=None, help="module:callable")
    args = parser.parse_args(argv)

    app = load_app(args.app)
    cls = server_class(args.mode, args.protocol, args.package)
    kwargs = {}
    if args.bind is not None or args.protocol == "fcgi":  # else flup's SCGI/AJP default
        kwargs["bindAddress"] = parse_bind(args.bind)
    if args.umask is not None and args.protocol != "ajp":  # flup's AJP has no umask
        kwargs["umask"] = args.umask
    if args.allowed_servers and args.protocol != "fcgi":
        kwargs["allowedServers"] = [a.strip() for a in args.allowed_servers.split(",")]
    kwargs.update(args.kwargs)
    server = cls(app, **kwargs)
    # flup's run() returns True on SIGHUP (reload); a launcher reports it and exits.
    ret = server.run()
    print("flup_launcher: run() returned %r" % (ret,), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
