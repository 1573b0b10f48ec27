"""Run real flup 1.0.3 with the command line the benchmark gives ``python -m flupfast``:

    python bench/servers/flup_server.py [--protocol fcgi|scgi|ajp] --mode thread|fork|single
                                        --bind unix:/path|HOST:PORT [--log-level INFO]
                                        module:callable

Bench-only: it imports flup, which flupfast itself never does. flup's defaults are kept
(maxSpare=5, maxThreads unlimited, 8 KiB records and packets), as a user of flup would run it.
``--log-level`` is flup's ``loggingLevel`` for SCGI and AJP (flup's default is INFO: one line
per request on stderr); FastCGI has no such option.
"""
import argparse
import importlib
import logging
import sys

MODULES = {
    ("fcgi", "thread"): "flup.server.fcgi", ("fcgi", "fork"): "flup.server.fcgi_fork",
    ("fcgi", "single"): "flup.server.fcgi_single",
    ("scgi", "thread"): "flup.server.scgi", ("scgi", "fork"): "flup.server.scgi_fork",
    ("ajp", "thread"): "flup.server.ajp", ("ajp", "fork"): "flup.server.ajp_fork",
}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="flup_server")
    parser.add_argument("--protocol", choices=("fcgi", "scgi", "ajp"), default="fcgi")
    parser.add_argument("--mode", choices=("thread", "fork", "single"), default="thread")
    parser.add_argument("--bind", required=True, help="unix:/path or HOST:PORT")
    parser.add_argument("--log-level", default="INFO", help="SCGI/AJP loggingLevel")
    parser.add_argument("app", help="module:callable")
    args = parser.parse_args(argv)

    module_name, _, attr = args.app.partition(":")
    app = importlib.import_module(module_name)
    for part in (attr or "application").split("."):
        app = getattr(app, part)
    if args.bind.startswith("unix:"):
        bind = args.bind[5:]
    else:
        host, _, port = args.bind.rpartition(":")
        bind = (host, int(port))
    name = MODULES.get((args.protocol, args.mode))
    if name is None:
        parser.error("flup 1.0.3 has no %s server in %s mode" % (args.protocol, args.mode))
    server_class = importlib.import_module(name).WSGIServer
    kwargs = {"bindAddress": bind}
    if args.protocol != "fcgi":
        kwargs["loggingLevel"] = logging.getLevelName(args.log_level.upper())
    server_class(app, **kwargs).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
