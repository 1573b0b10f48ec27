"""Each deliberate difference from flup 1.0.3: a flup bug we do not copy, with where it lives in
flup, what flup does, what flupfast does, and why. The differential tests (compat/) take their
expected differences from here; docs/differences.md is rendered from it.
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
        'fastcgi-strict-records', 'fcgi_base.py:381-407, :468-500, :793-807',
        'ignores the version byte of a record, and decodes a name-value pair whose length runs '
        'past its PARAMS record into a short value: both requests are served (the second with '
        'default params and "missing FastCGI param" warnings)',
        'closes the connection with a log line naming the fault ("unsupported FastCGI version '
        '2", "name-value pair runs past the end of PARAMS"). Checked against nginx 1.22, '
        'Apache mod_proxy_fcgi and mod_fcgid and lighttpd mod_fastcgi, none of which sends '
        'either (docs/front-fidelity.md, tests/integration/test_ordinary_traffic.py)',
        'a lenient parser hides broken peers and misreads the rest of the stream'),
    Difference(
        'fastcgi-nagle', 'fcgi_base.py:520-536',
        'sends each record as header, content and padding in three send() calls, without '
        'TCP_NODELAY: about 40 ms per response on a kept TCP connection (Nagle and delayed ACK)',
        'TCP_NODELAY on TCP peers; a response\'s records, END_REQUEST included, in one sendmsg',
        'nginx fastcgi_keep_conn and Apache enablereuse=on are the fast configurations'),
    Difference(
        'fastcgi-multiplexed-input', 'fcgi_base.py:250-274, :904-909',
        'multiplexed=True reads every STDIN record into memory as it arrives, however slowly '
        'the app reads, then shrinks the buffer by copying it (quadratic)',
        'holds a multiplexed body in memory up to 1 MiB, then in an anonymous temporary file',
        'memory stays flat for a large upload'),
    Difference(
        'fastcgi-multiplexed-overloaded', 'fcgi_base.py:891-895',
        'when a thread for a multiplexed request cannot start, raises NameError (thread.error)',
        'answers END_REQUEST(FCGI_OVERLOADED) and logs it, as flup means to',
        'what flup means to do'),
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
        'linear-streams', 'fcgi_base.py:136-141, :175-204, :291-302; ajp_base.py:583-594',
        'joins its input buffer on every record while readline() looks for a newline, and '
        'slices a large response by copying the rest each time: both quadratic (3 s for a '
        '20 MB line, 22 s for a 40 MB response)',
        'reads and frames through memoryviews: linear',
        'multipart parsers call readline() on binary file parts'),
    Difference(
        'wsgi-errors-tee-bytes', 'fcgi_base.py:1088',
        'with bindAddress set, writing bytes to wsgi.errors raises TypeError',
        'accepts bytes and str',
        'bytes are valid for FCGI_STDERR'),
    Difference(
        'start-response-checks', 'fcgi_base.py:1111-1164 (and scgi_base, ajp_base)',
        'checks status and headers with assert statements, which python -O removes',
        'raises the same AssertionErrors with the same messages, also under -O',
        'an app must not emit a malformed response because the interpreter runs optimised'),
    Difference(
        'prefork-pool-growth', 'preforkserver.py:184',
        'compares the status byte with a str: the pool never grows past maxSpare',
        'grows to maxChildren under load; idle children above maxSpare are retired once the '
        'excess has lasted FORK_RETIRE_DELAY (1 s), as Apache\'s prefork trims once a second, '
        'then one at a time, FORK_RETIRE_SPACING (0.1 s) apart',
        'maxChildren is the documented contract; retiring at the first excess and forking '
        'again a moment later churns the pool under steady load, and a dozen children exiting '
        'at once (each exit copies the pages it inherited) spike the CPU and memory beside '
        'the requests still running'),
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
    Difference(
        'prefork-sock-timeout', 'preforkserver.py:133',
        'passes sockTimeout to setblocking() on the listening socket: any non-zero value just '
        'makes it blocking',
        'uses it as the timeout of each accepted socket (0: blocking), as documented',
        'what the docstring says'),
    Difference(
        'scgi-bounded-input', 'scgi_base.py:265-269',
        'hands the app the socket file: read(), readline() or iteration past the body waits '
        'until the web server gives up; an empty body is a text StringIO (read() returns "")',
        'wsgi.input ends at CONTENT_LENGTH (bytes, the same stream as FastCGI\'s); a body '
        'shorter than CONTENT_LENGTH raises ClientDisconnected in the app and logs one warning',
        'a readline loop whose last line has no newline must end; WSGI input is bytes'),
    Difference(
        'scgi-lingering-close', 'scgi_base.py:242, :285-286',
        'closes the socket with request body bytes still unread; the kernel then sends a '
        'reset, which can destroy the response before the web server has read it',
        'half-closes, discards what the web server still sends for a bounded time, then '
        'closes, so the response always arrives',
        'an app may answer without reading the body (a 413, a redirect, an auth failure)'),
    Difference(
        'scgi-netstring-strict', 'scgi_base.py:84-117, :252-262',
        'reads the length one recv(1) per digit and accepts leading zeros, signs and spaces '
        '(int()); accepts any header order, any SCGI value and a repeated CONTENT_LENGTH '
        '(the last one counts)',
        'parses from its receive buffer; rejects leading zeros, non-digits, lengths past the '
        '1 MiB cap, a non-first or missing CONTENT_LENGTH, one above 2**63 - 1 or a repeat '
        'that contradicts the first, and an SCGI version other than 1, each with a log line '
        'naming the fault. As in flup, a repeated name keeps its last value (nginx before 1.23 '
        'sends one pair per header line: two Cookie lines) and a missing SCGI header is '
        'accepted (nginx sends SCGI=1 only through the stock scgi_params). Checked against '
        'nginx 1.22, Apache mod_proxy_scgi and lighttpd mod_scgi: docs/front-fidelity.md, '
        'tests/integration/test_ordinary_traffic.py',
        'the SCGI protocol requires the rest and no supported front sends it; a lenient '
        'parser hides broken peers, and a second length is a smuggling risk'),
    Difference(
        'scgi-path-info-decoded-script-name', 'scgi_base.py:538-546',
        'behind Apache mod_proxy_scgi (SCRIPT_NAME = decoded path, no PATH_INFO) cuts the raw '
        'REQUEST_URI at len(SCRIPT_NAME): /environ/a%2Fb/c%20d gives PATH_INFO "0d"',
        'the same rule as FastCGI: flup\'s raw cut when the raw path starts with SCRIPT_NAME, '
        'else the decoded path is cut (PATH_INFO "")',
        'flup\'s result there is a fragment of the URI that no app can route on'),
    Difference(
        'scgi-allowed-servers-ipv6', 'scgi_base.py:389-391',
        'admits every peer whose address is not a 2-tuple, so any IPv6 client passes '
        'allowedServers',
        'checks IPv6 addresses against allowedServers too (Unix-socket peers are admitted)',
        'an allow-list that IPv6 bypasses is no allow-list'),
    Difference(
        'scgi-ajp-bind-failure', 'scgi.py:172, scgi_fork.py:171, ajp.py:181',
        'logs a bind failure with e[1], which raises TypeError on Python 3',
        'logs "Failed to bind socket (<reason>), exiting" and run() returns False',
        'what flup means to do'),
    Difference(
        'scgi-file-wrapper', 'scgi_base.py:396-409',
        'offers no wsgi.file_wrapper',
        'offers wsgi.file_wrapper; over SCGI and uwsgi a file as open(path, "rb") gives it, '
        'on a regular file, is sent from its position with os.sendfile (anything else is '
        'iterated)',
        'PEP 3333 optional extension; large static files without passing through Python'),
    Difference(
        'ajp-500-status', 'ajp_base.py:971-990',
        'sends the 500 page with status 200 (reason "Internal Server Error")',
        'sends it with status 500',
        'a proxy, a cache or a monitor must see the failure'),
    Difference(
        'ajp-chunked-body', 'ajp_base.py:436-455, :644-668',
        'ignores a body without Content-Length (chunked): its packets are then read as new '
        'requests and the connection dies with a protocol error',
        'pulls a chunked body with GET_BODY_CHUNK until the empty chunk',
        'mod_proxy_ajp sends chunked uploads only when asked'),
    Difference(
        'ajp-header-name-dropped', 'ajp_base.py:525',
        'maps every request header name a front passes as a string into environ, so a '
        'client\'s "Content_Length: 5" becomes CONTENT_LENGTH and sets the body\'s length '
        '(a GET then waits for a body the front never sends)',
        'drops a header whose name holds anything but letters, digits and "-", as httpd '
        'drops it from its own CGI variables; the body\'s framing comes from the real '
        'Content-Length and Transfer-Encoding alone',
        'a client must not choose the framing, nor pass "X_Forwarded-For" as X-Forwarded-For'),
    Difference(
        'ajp-secret-stored-method', 'ajp_base.py:706-729',
        'closes the connection on attribute 0x0C (secret, sent by mod_proxy_ajp secret=) and '
        'on method 0xFF with attribute 0x0D (stored method: PATCH and other verbs)',
        'accepts both; the secret is checked when BaseAJPServer.secret is set (403 else) and '
        'never put in environ; PATCH and friends reach the app',
        'Apache and mod_jk send these; Tomcat requires secrets by default'),
    Difference(
        'ajp-upload-speed', 'ajp_base.py:309-314, :349-356',
        'two send() calls per packet and no TCP_NODELAY: about 44 ms per body chunk behind '
        'Apache (0.3 MiB/s); asks GET_BODY_CHUNK for min(remaining, 0xFFFF) bytes, more '
        'than one packet carries',
        'TCP_NODELAY, one send per batch of packets, GET_BODY_CHUNK for at most 65530 bytes, '
        'several kept in flight ahead of the app\'s reads for a body with Content-Length '
        '(four at 8 KiB packets, never more than the body still to come; answers an app left '
        'unread are read off before the next request)',
        'a 100 MiB upload took minutes'),
    Difference(
        'ajp-response-framing', 'ajp_base.py:575-594, :551-573',
        'slices the body into 8184-byte packets by copying the rest each time (quadratic); '
        'SEND_HEADERS, each body packet and END_RESPONSE are separate sends',
        'frames the body as views of the app\'s bytes (packetSize 8192 by default, settable to '
        '65536), gathered with the headers into one sendmsg',
        'a 100 MiB response took minutes'),
    Difference(
        'ajp-repeated-headers', 'ajp_base.py:536-544',
        'keeps the last of repeated request headers',
        'joins them with ", " (a repeated Content-Length is rejected)',
        'RFC 9110 5.3; the last value alone loses data'),
    Difference(
        'ajp-null-strings', 'ajp_base.py:164-174',
        'decodes a null string (length 0xFFFF) as "", so a header or attribute sent as null '
        'appears in environ with an empty value',
        'leaves such a header or attribute out of environ; the five fixed request fields '
        '(protocol, URI, remote address and host, server name) stay "" as in flup',
        'null means "not sent" in AJP13; an empty REMOTE_USER is not an absent one'),
    Difference(
        'ajp-strict-packets', 'ajp_base.py:170-215, :670-730',
        'accepts a Content-Length int() accepts ("+5", " 5", "1_0"), skips string NULs '
        'unchecked and ignores bytes after the attribute list',
        'rejects each with an AJPError naming the fault and closes the connection. Checked '
        'against Apache mod_proxy_ajp (8 KiB and 64 KiB packets), which answers such a '
        'Content-Length 400 itself and passes leading zeros, which are accepted '
        '(docs/front-fidelity.md, tests/integration/test_ordinary_traffic.py)',
        'a lenient parser hides broken peers and invites request smuggling'),
    Difference(
        'ajp-method-baseline-control', 'ajp_base.py:56',
        'method code 26 becomes BASELINE_CONTROL',
        'BASELINE-CONTROL, the HTTP verb (methodTable itself is unchanged)',
        'no client sends the underscore spelling'),
    Difference(
        'ajp-ipv6-unix', 'ajp_base.py:823-829',
        'binds IPv4 only',
        'also binds IPv6 (a 4-tuple) and Unix sockets (a str)',
        'additive'),
    Difference(
        'threaded-stop-kept-connection', 'fcgi.py:146-149, scgi.py:191-195, threadpool.py:106-117',
        'on SIGTERM/SIGINT/SIGHUP, run() joins every worker thread, so a FastCGI KEEP_CONN '
        'connection or an SCGI connection still open keeps the process alive until the web '
        'server closes it',
        'ends idle connections\' waits and returns within a second',
        'mod_fcgid and service managers expect SIGTERM to stop the process'),
    Difference(
        'unix-bind-not-a-socket', 'fcgi_base.py:1040-1068, scgi_base.py:356-383',
        'unlinks whatever is at a Unix bindAddress before binding, a regular file included',
        'unlinks a socket left there, and refuses anything else with FileExistsError ("it '
        'exists and is not a socket"); the command line also refuses a socket another '
        'server listens on',
        'a mistyped path must not delete a file, nor a second server take a running one\'s '
        'path'),
    Difference(
        'reload-keeps-listening-socket', 'fcgi_base.py:1070-1072, scgi_base.py:385-387, ajp_base.py:831-833',
        'run() closes its listening socket before returning True after SIGHUP, and the next '
        'run() binds again (a Unix socket path unlinked and made anew): connections arriving '
        'in between are refused, and the web server\'s idle kept connections are closed',
        'keeps the bound socket open across the return, and the next run() on the same '
        'bindAddress serves it (connections wait in its backlog, the path is never unlinked); '
        'the threaded mode also keeps the idle kept connections for that run(). A stop still '
        'closes at once',
        'flup\'s own loop, while server.run(): reload, must not refuse requests'),
    Difference(
        'threadpool-job-exceptions', 'threadpool.py:134-139',
        'swallows any exception a job raises, silently',
        'logs it with its traceback and keeps the worker',
        'a FastCGI connection that dies of an unexpected error should leave a trace'),
    Difference(
        'single-mode-stop-idle', 'singleserver.py:88-93',
        'a SIGTERM while a persistent connection (AJP, FastCGI KEEP_CONN) is open waits '
        'until the web server closes it',
        'ends the idle connection\'s wait and stops within a second',
        'mod_fcgid and service managers expect SIGTERM to stop the process'),
    # -- flup's cgi, paste_factory and clients, and the protocol helpers -----------------------
    Difference(
        'cgi-server-bytes', 'cgi.py:21,40-45',
        'writes the status, headers and body as str to sys.stdout: a bytes body raises '
        'TypeError on Python 3; wsgi.input is text-mode sys.stdin, not bounded',
        'writes bytes to sys.stdout.buffer (str values encoded latin-1 as the other servers); '
        'wsgi.input is binary stdin ending at CONTENT_LENGTH',
        'PEP 3333 bodies are bytes; a CGI app must be able to answer at all'),
    Difference(
        'cgi-server-errors', 'cgi.py:62-71',
        'an exception from the app leaves run(): a traceback, exit status 1 and the web '
        'server\'s own error ("End of script output before headers"); no Content-Length',
        'prints the traceback to stderr, sends flup\'s 500 page when nothing was sent yet (the '
        'FastCGI CGI fallback\'s behaviour) and returns; a one-item result gets a '
        'Content-Length, as on every other flup server',
        'one error policy and one Content-Length rule for every gateway'),
    Difference(
        'cgi-environ-latin1', 'cgi.py:17; fcgi_base.py:617',
        'the CGI environ is dict(os.environ): values decoded by the locale, so a UTF-8 '
        'PATH_INFO reaches the app as text ("caf\u00e9")',
        'each byte of the environment becomes one latin-1 character ("caf\u00c3\u00a9"), as '
        'PEP 3333 asks and as the same request over FastCGI arrives',
        'an app must see the same environ whichever gateway runs it'),
    Difference(
        'paste-factory-py3', 'paste_factory.py:7,19,91,94,127,130',
        'every runner raises NameError (unicode); socket= with host= and host= without port= '
        'are assert statements (silent under -O)',
        'the runners work; those two cases raise ValueError; each runner returns what run() '
        'returns (True after SIGHUP)',
        'the Paste entry points must work on Python 3'),
    Difference(
        'flup-clients', 'client/fcgi_app.py:337,356,390; client/scgi_app.py:109,140',
        'FCGIApp and SCGIApp raise AttributeError (types.StringTypes) on every call; FCGIApp '
        'uses an unimported sys for FCGI_STDERR; both read the whole response into memory and '
        'drop a character of each header line that ends in a bare LF; FCGIApp(command=...) '
        'raises NotImplementedError at the first request; an empty FCGI_DATA is sent',
        'both work and stream the response body; CRLF and LF heads parse; a truncated or '
        'malformed answer, or an END_REQUEST refusing the request, raises BackendError (a '
        'ProtocolError); wsgi.input shorter than CONTENT_LENGTH raises OSError instead of '
        'hanging the backend; command= raises NotImplementedError in the constructor; no '
        'FCGI_DATA is sent (the responder role has none). Header names stay lower-cased as '
        'flup\'s',
        'flup\'s clients cannot run on Python 3; a proxy must not hold a large body in memory'),
    Difference(
        'connection-internals', 'fcgi_base.py:118-340,541-905; scgi_base.py:159-290; '
        'ajp_base.py:316-770',
        'each protocol module has its own Request/Connection/InputStream/OutputStream machinery '
        'whose record-by-record methods (Connection.process_input, writeRecord, _do_*, '
        'processInput, writePacket, Request.timeout_handler, ajp Request.set*/addHeader/'
        'addAttribute) a subclass may override; Request(conn, inputStreamClass, timeout) '
        'builds its streams from inputStreamClass',
        'the classes exist with flup\'s constructor signatures and the server still builds '
        'requests from server.request_class / requestClass, but one connection driver '
        '(flupfast/connection.py) does the work: those methods do not exist and overriding them '
        'changes nothing; inputStreamClass is ignored. fcgi_base.InputStream, '
        'MultiplexedInputStream, OutputStream, Record and ajp_base.Packet work as flup\'s for '
        'code that builds them (over flupfast\'s codecs and streams); ajp_base.InputStream is '
        'flupfast\'s pull-based stream',
        'flup copies that machinery three times; one driver is where the speed comes from'),
    Difference(
        'flup-adapters-strict', 'ajp_base.py:170-215,237-314; fcgi_base.py:429-536',
        'decodeString/decodeRequestHeader/decodeAttribute skip the byte where a NUL belongs '
        'unchecked and return short strings past the end of the data; Packet.read accepts any '
        '16-bit length; Record.write sends contentLength as given even when contentData is '
        'shorter, with self.version',
        'a missing NUL or a string running past the data raises ProtocolError; Packet.read '
        'refuses packets over 65536 bytes with their header (the codec\'s AJP_MAX_PACKET); '
        'Record.write sends contentData[:contentLength] with its real length, as version 1',
        'the helpers are the codec\'s checks under flup\'s names'),
    # Reliability (docs/reliability.md): overload, shutdown and timeouts.
    Difference(
        'threadpool-start-capped', 'threadpool.py:51-58',
        'starts maxSpare threads at once, even when maxThreads is smaller',
        'starts min(maxSpare, maxThreads) threads: maxThreads is never exceeded',
        'maxThreads is the bound an operator sets to protect the machine'),
    Difference(
        'threaded-pool-full', 'threadedserver.py:97-103',
        'closes every connection accepted while maxThreads threads are busy: the web server '
        'shows a 502 ("incomplete headers", "upstream prematurely closed")',
        'queues it until a thread is free (at most MAX_QUEUED_CONNECTIONS = 64, and an idle '
        'persistent connection is closed to free its thread); beyond that answers at once with '
        'FastCGI END_REQUEST FCGI_OVERLOADED after a 503 page on STDOUT, or an SCGI/AJP 503, '
        'and logs it',
        'a burst must be served, and a refusal must say so'),
    Difference(
        'threaded-stop-idle-connection', 'threadedserver.py:114-120, threadpool.py:67-76',
        'on SIGTERM waits, without end, for every connection the web server keeps open '
        '(Apache\'s AJP pool, nginx\'s FastCGI keepalive)',
        'closes persistent connections idle between requests at once (also those whose '
        'request is still running, when it ends) and waits at most 5 s for running requests',
        'service managers expect SIGTERM to stop the process promptly'),
    Difference(
        'prefork-pool-full', 'preforkserver.py:210-223',
        'with all maxChildren children busy leaves connections in the listen queue without '
        'bound: the web server times out (504) or, once the queue is full, cannot connect '
        '(502), and nothing is logged',
        'answers the connections still waiting after FORK_OVERLOAD_WAIT (5 s; overloadWait, '
        'None: never) with FastCGI END_REQUEST FCGI_OVERLOADED after a 503 page on STDOUT, or '
        'an SCGI/AJP 503, from the parent, and logs it; a job class without refuse_overloaded '
        'is closed',
        'a refusal must say so, while somebody still waits for it'),
    Difference(
        'prefork-kept-connection-released', 'preforkserver.py:416-417, ajp_base.py:496-499',
        'a child serves its AJP13 connection until the web server closes it, always answering '
        'END_RESPONSE reuse=1: once every child holds one of Apache\'s pooled connections, '
        'a connection beyond them waits for Apache\'s timeout',
        'a child that ends a request while no child is idle, the pool has maxChildren and a '
        'connection waits answers END_RESPONSE reuse=0 (Apache closes that connection) and '
        'takes the waiting one',
        'a kept connection must not starve a waiting one; the reuse flag lets it go without '
        'racing the web server\'s next request on it'),
    Difference(
        'prefork-shutdown-drain', 'preforkserver.py:240-260',
        'on SIGTERM, SIGINT or SIGHUP sends SIGINT to busy children at once: every request in '
        'flight fails',
        'lets busy children finish for FORK_DRAIN_GRACE (5 s) before SIGINT, then escalates',
        'a restart or a deploy must not fail the requests it finds in flight'),
    Difference(
        'request-timeout-watchdog', 'fcgi_base.py:561-591, scgi_base.py:217-291, '
        'ajp_base.py:615-730',
        'implements timeout= with signal.alarm and a SIGALRM handler: main thread only '
        '(silently nothing in multiplexed request threads), replaces the app\'s SIGALRM '
        'handler and cancels its alarm; a float timeout raises TypeError',
        'a watchdog thread reports "Timeout Exceeded" with the request thread\'s stack and '
        'raises TimeoutException in that thread; a blocking call in the main thread is '
        'interrupted with SIGRTMIN+3; the app\'s SIGALRM handler and alarm are left alone',
        'an app\'s own alarms and threads must survive the server\'s timeouts'),
    # Aborted requests and failed responses (docs/reliability.md).
    Difference(
        'fastcgi-abort-request', 'fcgi_base.py:778-786, :251-275',
        'only marks the request aborted: an app reading wsgi.input waits for STDIN that never '
        'comes, and END_REQUEST goes out only when the web server closes the connection (a '
        'request that declared 1 MiB, sent 64 KiB, then ABORT_REQUEST: no answer in 3 s)',
        'the pending wsgi.input read raises ClientDisconnected, END_REQUEST(REQUEST_COMPLETE) '
        'follows at once (a few ms in every mode), nothing of the aborted request\'s output is '
        'sent, and a KEEP_CONN connection serves the next request; a request aborted before '
        'its PARAMS end is answered without running the app. Aborted after its body, the app '
        'runs to completion as in flup (it cannot be interrupted safely)',
        'spec 5.4: the application answers END_REQUEST as soon as possible'),
    Difference(
        'truncated-response-signalled', 'fcgi_base.py:577-598, ajp_base.py:488-499, '
        'scgi_base.py:185-189',
        'when the app fails after its response began, logs the traceback and ends the request '
        'normally (FastCGI END_REQUEST, AJP END_RESPONSE, SCGI close): nginx, Apache and '
        'lighttpd give the browser 200, the partial body and a final chunk, a truncated '
        'download that looks whole',
        'logs the traceback as flup does, then ends the connection so the front sees a failed '
        'backend: FastCGI sends no END_REQUEST and resets a TCP connection (on a Unix socket: '
        'closes, after an invalid record header when the web server did not ask for '
        'KEEP_CONN; a multiplexed connection answers END_REQUEST with appStatus 1 instead); '
        'AJP closes without END_RESPONSE; SCGI resets a TCP connection (over a Unix socket SCGI '
        'has no way to say it). curl through nginx, mod_proxy_fcgi, mod_proxy_ajp and nginx '
        'scgi_pass then fails (exit 18; Apache leaves a kept-alive client waiting for '
        'KeepAliveTimeout first; lighttpd only with server.stream-response-body 1 or 2: by '
        'default it buffers and sends the part with a Content-Length), mod_fcgid and '
        'mod_proxy_scgi answer 500 when they had not sent the head yet; the fronts serve the '
        'next request',
        'a cut-off download must not pass for a complete one'),
    Difference(
        'fastcgi-refused-peer-logged', 'fcgi.py:98-102, fcgi_fork.py:124-128, fcgi_single.py:103',
        'closes a connection from a peer outside FCGI_WEB_SERVER_ADDRS without a word',
        'also logs a warning naming the peer',
        'a refused web server must be diagnosable'),
    Difference(
        'response-head-checked', 'fcgi_base.py:1137-1168, scgi_base.py:454-486, '
        'ajp_base.py:895-927',
        'sends whatever status and headers the app gives: CR or LF in a value (an app that '
        'copies the query into Location) adds headers of the client\'s choosing to the '
        'response (response splitting), and NUL, other control characters and names that '
        'are not tokens go out too',
        'start_response raises ResponseHeadError (an AssertionError naming the header, never '
        'its value) for a control character other than HTAB in a name, value or reason, a name '
        'that is not an RFC 9110 token, a status that is not 3 digits, a space and a reason: '
        'the request ends as for any app exception (logged, 500 page). HTAB and latin-1 '
        'obs-text (0x80-0xFF) in values are sent, as flup sends them',
        'RFC 9110 5.5 and PEP 3333 forbid control characters in headers; one app bug must not '
        'let a client set cookies or headers in other users\' responses'),
    Difference(
        'allowed-servers-everywhere', 'fcgi.py:98-109, scgi_base.py:389-391, ajp_base.py:835-840',
        'FastCGI has no allowedServers (only FCGI_WEB_SERVER_ADDRS); SCGI and AJP log every '
        'refused connection',
        'allowedServers (keyword and --allowed-servers) also for FastCGI, where '
        'FCGI_WEB_SERVER_ADDRS still applies; a refusal is logged once per address per minute '
        'per process; a TCP socket beyond loopback with no allow-list logs one warning',
        'one allow-list for every protocol; a stranger retrying in a loop must not fill the log'),
]
