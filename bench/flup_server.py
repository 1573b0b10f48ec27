"""Run real flup 1.0.3 with the command line the benchmark gives ``python -m flupfast``:

    python bench/flup_server.py --mode thread|fork|single --bind unix:/path module:callable

Bench-only: it imports flup, which flupfast itself never does. flup's defaults are kept
(maxSpare=5, maxThreads unlimited, 8 KiB records), as a user of flup would run it.
"""
import argparse
import importlib
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="flup_server")
    parser.add_argument("--mode", choices=("thread", "fork", "single"), default="thread")
    parser.add_argument("--bind", required=True, help="unix:/path or HOST:PORT")
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
    if args.mode == "thread":
        from flup.server.fcgi import WSGIServer
    elif args.mode == "fork":
        from flup.server.fcgi_fork import WSGIServer
    else:
        from flup.server.fcgi_single import WSGIServer
    WSGIServer(app, bindAddress=bind).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
