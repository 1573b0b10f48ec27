"""The load drivers: what sends the requests and what counts (fcgi_load.py: the C load client
for FastCGI, SCGI and AJP13 direct; wrk.py and ab.py: HTTP load through a front; http.py:
one HTTP request, the bench's curl; strace.py: syscalls; callgrind.py: instructions). They
judge nothing: the scenarios say what is asked and what counts as a right answer."""
