"""The fronts: web servers started from the bench's own configs in the run's temporary
directory, on free loopback ports, in the foreground, stopped by PID (front.py: the process
control they share; nginx.py; apache.py; lighttpd lands beside them). Here: which front serves
which protocol and mode in the "behind real fronts" part."""


GROUPS = (
    # key, protocol, mode, front
    ("fcgi-thread", "fcgi", "thread", "nginx"),
    ("fcgi-fork", "fcgi", "fork", "nginx"),
    ("scgi-thread", "scgi", "thread", "nginx"),
    ("scgi-fork", "scgi", "fork", "nginx"),
    ("ajp-thread", "ajp", "thread", "apache"),
    ("ajp-fork", "ajp", "fork", "apache"),
    ("uwsgi-thread", "uwsgi", "thread", "nginx"),
    ("uwsgi-fork", "uwsgi", "fork", "nginx"),
)


GROUP_LABEL = {
    "fcgi-thread": "FastCGI, thread mode, nginx", "fcgi-fork": "FastCGI, fork mode, nginx",
    "scgi-thread": "SCGI, thread mode, nginx", "scgi-fork": "SCGI, fork mode, nginx",
    "ajp-thread": "AJP13, thread mode, Apache", "ajp-fork": "AJP13, fork mode, Apache",
    "uwsgi-thread": "uwsgi, thread mode, nginx", "uwsgi-fork": "uwsgi, fork mode, nginx",
}
