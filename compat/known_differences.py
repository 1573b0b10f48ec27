"""Each deliberate difference from flup 1.0.3: a flup bug we do not copy, with where it lives in
flup, what flup does, what flupfast does, and why. The differential tests (compat/) take their
expected differences from here; the README's "Differences from flup" is checked against it.
"""
from collections import namedtuple

Difference = namedtuple('Difference', 'key flup_location flup_does flupfast_does why')

DIFFERENCES = [
    Difference(
        'fastcgi-path-info-decoded-script-name', 'fcgi_base.py:1204-1209',
        'cuts the raw REQUEST_URI at len(SCRIPT_NAME) even when SCRIPT_NAME is the decoded '
        'path (nginx stock fastcgi_params, mod_proxy_fcgi): /environ/caf%C3%A9/a%20b%21 '
        'gives PATH_INFO "a%20b%21" and a warning',
        'keeps flup\'s undecoded cut whenever the raw path starts with SCRIPT_NAME; otherwise, '
        'if the percent-decoded path starts with it, cuts the decoded path (PATH_INFO "")',
        'flup\'s result there is a fragment of the URI that no app can route on'),
    Difference(
        'fastcgi-get-values', 'fcgi_base.py:756',
        'answers GET_VALUES with an empty record (bytes names looked up in a str-keyed dict)',
        'answers FCGI_MAX_CONNS, FCGI_MAX_REQS and FCGI_MPXS_CONNS',
        'the spec asks for the values; web servers use them to size their pools'),
    Difference(
        'fastcgi-params-split', 'fcgi_base.py:793-807',
        'decodes each PARAMS record alone, mangling a pair that straddles two records',
        'decodes the concatenated PARAMS stream',
        'the spec says record boundaries carry no meaning'),
    Difference(
        'fastcgi-maxwrite', 'fcgi_base.py:925',
        'maxwrite = 8192 (STDOUT records of 8184 bytes, header in its own record)',
        'maxwrite = 65536 (records of 65528 bytes), headers and first body bytes in one send',
        'eight times fewer records and syscalls; a subclass may still set maxwrite = 8192'),
    Difference(
        'cgi-detection', 'fcgi_base.py:1025',
        'crashes with OSError(ENOTSOCK) on Python >= 3.8 when run as plain CGI',
        'detects CGI and serves the request; CGI stdin is binary and bounded by CONTENT_LENGTH',
        'a classic .fcgi script must also work as CGI'),
    Difference(
        'debug-page-cgitb', 'fcgi_base.py:1235',
        'debug=True imports cgitb, gone in Python 3.13: the request dies without an answer',
        'renders its own traceback page',
        'cgitb was removed from the standard library'),
    Difference(
        'readline-size', 'fcgi_base.py:175-204',
        'readline(size) may return more than size bytes; readline(-1) returns b"" and breaks '
        'the position; read(None) raises TypeError',
        'readline(size) returns at most size bytes, -1/None mean no limit, read(None) reads all',
        'io semantics that multipart parsers rely on'),
    Difference(
        'wsgi-errors-tee-bytes', 'fcgi_base.py:1088',
        'with bindAddress set, writing bytes to wsgi.errors raises TypeError',
        'accepts bytes and str',
        'bytes are valid for FCGI_STDERR'),
    Difference(
        'prefork-pool-growth', 'preforkserver.py:184',
        'compares the status byte with a str: the pool never grows past maxSpare',
        'grows to maxChildren under load',
        'maxChildren is the documented contract'),
    Difference(
        'prefork-signals', 'preforkserver.py:152-167, :195, :261-288',
        'ignores SIGTERM/SIGINT/SIGHUP while idle; SIGUSR1 crashes the parent; the 10 s '
        'SIGKILL at shutdown never fires',
        'acts on signals within a second; SIGUSR1 replaces idle children; shutdown escalates',
        'mod_fcgid stops processes with SIGTERM'),
    Difference(
        'prefork-max-requests', 'preforkserver.py:413-420',
        'counts connections against maxRequests (a kept FastCGI connection is unlimited)',
        'counts requests',
        'recycling must work behind fastcgi_keep_conn'),
]
