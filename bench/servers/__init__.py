"""The servers under test: how each is started (server.py: flupfast pure and compiled, and
flup 1.0.3 through flup_server.py; uwsgi.py: uWSGI), and their names in the report. Here
only names; gunicorn and mod_wsgi (issue 18) land beside uwsgi.py."""

KINDS = ("flup", "pure", "compiled")
KIND_LABEL = {"flup": "flup 1.0.3", "pure": "flupfast pure", "compiled": "flupfast compiled"}


# (variant, server kind, nginx fastcgi_keep_conn)
VARIANTS = (("flup", "flup", True), ("uwsgi", "uwsgi", False), ("pure", "pure", True),
            ("compiled", "compiled", True), ("compiled_nokeep", "compiled", False))


VARIANT_LABEL = {"flup": "flup 1.0.3", "uwsgi": "uWSGI", "pure": "flupfast pure",
                 "compiled": "flupfast compiled",
                 "compiled_nokeep": "flupfast compiled, keep_conn off"}
