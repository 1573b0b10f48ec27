"""The servers under test: how each is started (server.py: flupfast pure and compiled, and
flup 1.0.3 through flup_server.py; uwsgi.py: uWSGI; gunicorn.py; apache_hosted.py: mod_wsgi
daemon mode, CGI and mod_fcgid scripts), and their names in the report. Here only names; issue
18's servers by key, with the settings the sweep tries, are in peers.py."""

KINDS = ("flup", "pure", "compiled")
KIND_LABEL = {"flup": "flup 1.0.3", "pure": "flupfast pure", "compiled": "flupfast compiled"}


# (variant, server kind, nginx fastcgi_keep_conn)
VARIANTS = (("flup", "flup", True), ("uwsgi", "uwsgi", False), ("pure", "pure", True),
            ("compiled", "compiled", True), ("compiled_nokeep", "compiled", False))


VARIANT_LABEL = {"flup": "flup 1.0.3", "uwsgi": "uWSGI", "pure": "flupfast pure",
                 "compiled": "flupfast compiled",
                 "compiled_nokeep": "flupfast compiled, keep_conn off"}
