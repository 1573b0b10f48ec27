"""Every size limit and time bound of flupfast, each with the reason for its value.

Codecs, streams and connections import their caps from here so that one place documents them.
"""

# FastCGI PARAMS: the largest environment a front builds at its default limits is Apache's,
# 822 KB (100 header fields of 8190 bytes after an 8190-byte request line, mod_proxy_fcgi and
# mod_proxy_scgi); nginx's 4 x 8 KiB header buffers make 43 KB, lighttpd's 8 KiB head 8.5 KB,
# mod_fcgid's single PARAMS record < 64 KiB (docs/front-fidelity.md). 1 MiB holds all of them
# while stopping a peer from making us buffer without end.
MAX_PARAMS_BYTES = 1 << 20

# Name-value pairs per request: real requests make 20-60; at their defaults nginx 1.22 sends at
# most about 1020 (1000 header lines, one pair each, and its params), lighttpd under 2000 (its
# 8 KiB request head), Apache about 130 (100 fields).
MAX_PARAMS_PAIRS = 4096

# SCGI header netstring: the same room as FastCGI's PARAMS (Apache mod_proxy_scgi's largest,
# 822 KB, fits). A longer length prefix than this cap's digits is rejected before the block is
# buffered.
MAX_SCGI_HEADER_BYTES = MAX_PARAMS_BYTES

# uwsgi vars block: its 16-bit datasize field cannot say more than 65,535 bytes (nginx refuses
# to build a larger one, uWSGI's own buffer-size defaults to 4 KiB); the cap only states it.
MAX_UWSGI_VARS_BYTES = 0xFFFF

# PARAMS one FastCGI connection may hold at once, summed over the requests begun on it, as a
# multiple of the per-request cap: room for a few multiplexed requests with huge headers, while
# MAX_OPEN_REQUESTS streams of MAX_PARAMS_BYTES each (1 GiB) cannot be held by one connection.
PENDING_PARAMS_REQUESTS = 4

# Requests one FastCGI connection may have begun and not yet finished sending PARAMS for:
# front ends use one at a time; a multiplexing peer rarely more than a handful.
MAX_OPEN_REQUESTS = 1024

# A FastCGI record's content length is 16 bits (spec 3.3).
MAX_RECORD_CONTENT = 0xFFFF

# Default STDOUT/STDERR record size including the 8-byte header. flup uses 8192 for old
# mod_fastcgi buffers; nginx and Apache take full records, and 64 KiB records cut the
# syscalls and headers of a large response eightfold. A subclass may set ``maxwrite`` lower.
DEFAULT_MAXWRITE = 65536

# recv_into buffer per connection: large enough to take several 64 KiB records per syscall.
RECV_BUFFER_SIZE = 256 * 1024

# Multiplexed FastCGI reads ahead of the app; a request body beyond this many bytes moves from
# memory to an anonymous temporary file so memory stays flat for a 1 GB upload.
SPOOL_MEMORY_LIMIT = 1 << 20

# Responses from a list/tuple result are coalesced into one send up to this many bytes; the data
# is already in memory, so holding it back delays nothing the app could observe.
COALESCE_LIMIT = 256 * 1024

# Lingering close: after the last response on a non-kept connection, read and discard what the
# peer still sends (unread body) for at most this long, so it sees FIN and not RST (uwsgi#614).
LINGER_SECONDS = 5.0

# Before a reset that marks a response cut short, wait at most this long for what was sent
# (the traceback on FastCGI STDERR last) to leave our send queue: a reset discards the rest.
RESET_DRAIN_SECONDS = 1.0

# At most this many iovecs per sendmsg() call (Linux IOV_MAX is 1024).
MAX_IOVECS = 1024

# AJP13 packet size cap: mod_proxy_ajp's ProxyIOBufferSize and Tomcat's packetSize can raise the
# 8 KiB default up to 64 KiB (AJP_MAX_BUFFER_SZ), so a packet may be 65536 bytes with its header.
AJP_MAX_PACKET = 65536

# The packet size a web server uses unless configured otherwise (AJP_MSG_BUFFER_SZ, Tomcat's
# packetSize default); it refuses larger container packets, so responses are framed to it.
AJP_DEFAULT_PACKET = 8192

# Body bytes per SEND_BODY_CHUNK in a default 8 KiB packet: the packet less its 4-byte header,
# the type byte, the 2-byte chunk length and the trailing NUL (flup's Request._maxWrite).
AJP_DEFAULT_MAX_DATA = AJP_DEFAULT_PACKET - 8

# AJP13 request body asked for ahead of the app's reads (ajp_connection._BodySource): further
# GET_BODY_CHUNKs go out, once the pushed first chunk has shown the web server's packet size,
# while the answers they may bring, a packet's worth each, add up to at most this many bytes:
# sixteen of mod_proxy_ajp's default 8 KiB packets (8186 data bytes each), two 64 KiB ones,
# topped up half at a time. A 100 MiB upload through Apache at 8 KiB packets took medians of
# 0.27-0.58 s, against 0.64-0.69 s with 32 KiB ahead (0.43 s at 64 KiB, 1.2 s at 16 KiB;
# bench/README.md, "AJP13 upload, 128 KiB asked ahead"). The answers in flight must never
# block the web server while the app, done reading, sends a large response (both sides would
# wait sending). On Linux they fit: a loopback or LAN TCP connection's receive window plus the
# web server's send buffer, which the kernel grows (tcp_wmem), and a Unix socket's default
# 208 KiB (net.core.wmem_default); tests/integration/test_apache_ajp.py answers 4 MiB after
# reading 10,000 bytes of a 4 MiB upload with the asks in flight. Elsewhere the margins are
# the platform's (macOS buffers 8 KiB on a Unix socket).
AJP_BODY_AHEAD = 131072

# Thread mode: connections accepted while every worker thread is busy wait in the pool's queue,
# at most this many; each is answered when a thread frees up. Beyond it a connection gets the
# protocol's "overloaded" answer at once (FastCGI END_REQUEST FCGI_OVERLOADED, SCGI/AJP 503):
# a web server that retries elsewhere does better with a prompt refusal than with a long wait,
# and flup's silent close (a 502 "incomplete headers") tells nobody anything. 64 covers a burst
# from nginx's or Apache's usual worker counts without letting the wait grow without end.
MAX_QUEUED_CONNECTIONS = 64

# The overloaded answer runs in the accept loop's thread (no worker is free): reading the request
# head, sending the refusal and the lingering close together take at most this long, so a slow
# peer can delay accepting by no more than this.
OVERLOAD_ANSWER_SECONDS = 1.0

# Fork mode: with every child busy (maxChildren reached) connections wait in the kernel's listen
# queue, whose length cannot be read for Unix sockets, so the bound is a time. Once connections
# have been waiting this long with no child free, the parent answers the waiting ones
# "overloaded" (as thread mode does beyond MAX_QUEUED_CONNECTIONS). Many times a usual
# request's duration, so a burst the children work through is served; far below the web
# servers' 60 s read timeouts (nginx fastcgi_read_timeout, Apache ProxyTimeout), so the refusal
# reaches somebody still waiting, instead of a 504 and a request then run for nobody.
FORK_OVERLOAD_WAIT = 5.0

# Fork mode: the parent must never wait on a peer, so each "overloaded" answer runs in a
# short-lived thread, at most this many at once. Each lasts at most OVERLOAD_ANSWER_SECONDS:
# 16 refuse hundreds of prompt peers a second, and a flood of slow ones adds no more threads.
MAX_OVERLOAD_ANSWERS = 16

# The command line's reload first imports the app in a fresh interpreter, so new code that does
# not load is refused while the old code serves on (connections wait in the listen queue
# meanwhile). An app whose import takes longer than this is refused as if it had failed.
RELOAD_CHECK_TIMEOUT = 60.0

# A peer outside the allow-list is logged once per address per this many seconds (per process):
# enough to diagnose a misconfigured web server, too few lines for a stranger retrying in a
# loop to fill the disk.
REFUSED_PEER_LOG_INTERVAL = 60

# Refused addresses remembered for that; past this many the memory is emptied (a flood from
# many addresses then logs again, at most this many lines per interval).
REFUSED_PEERS_REMEMBERED = 1024

# Pause after accept() fails for lack of fds/memory (the single and threaded accept loop, and a
# prefork child): the socket stays readable, so retrying at once would spin at 100% CPU; a
# short pause lets running jobs release resources.
ACCEPT_BACKOFF = 0.1

# -- the modes' own time bounds (shutdown and pool upkeep), not bounds against a peer -----------

# Thread mode: on shutdown, in-flight jobs get this long to finish before run()'s caller carries
# on; their threads are daemons, so a connection kept alive by the web server cannot block the
# exit (flup waits forever).
THREAD_JOB_GRACE = 5.0

# ThreadPool.shutdown()'s default wait for busy workers: long enough for an in-flight request to
# finish, short enough that a kept-alive connection cannot hold the process forever.
THREAD_POOL_SHUTDOWN_GRACE = 5.0

# Thread mode, leader/follower: idle workers waiting on the listening socket at once; the others
# wait on the pool's condition until a worker coming back from a request frees a place. Two:
# one takes the next connection while another's request runs. More only wake cold threads per
# connection that then queue for the GIL: behind nginx, a new connection per request, 16
# clients, 2 cores, 8 waiting made 2.0-3.0 context switches per request and 3,900-6,200 req/s,
# 2 made 0.4-0.5 and 7,400-9,500 (bench/profile-new-connection.md section 7).
MAX_WAITING_LEADERS = 2

# Fork mode shutdown (INT, TERM, HUP), in stages: busy children first get FORK_DRAIN_GRACE to
# finish their request in peace (they exit when it ends, finding the parent gone; flup sends
# SIGINT at once, failing every request in flight; a child holding a persistent connection
# stays busy until the web server closes it, so the drain is bounded as the thread mode's) ...
FORK_DRAIN_GRACE = 5.0
# ... then SIGINT (KeyboardInterrupt in the job) and this long (flup's 10 s alarm, which never
# fired: ``prefork-signals``) before SIGTERM ...
FORK_INTERRUPT_GRACE = 10.0
# ... and SIGTERM this long before SIGKILL (a child may have its own SIGTERM handler) ...
FORK_TERM_GRACE = 2.0
# ... and after SIGKILL at most this long for the kernel to let us reap the last children.
FORK_KILL_WAIT = 5.0

# Idle children above max_spare are retired once the excess has lasted this long (Apache's
# prefork also trims its idle children once a second). Under steady load the idle count swings
# past max_spare between requests; retiring at once and forking again a moment later churned
# the pool (26 children forked in 7 s under a 16-connection hello load, 5 at its end), each fork
# and cold start paid by the requests behind it.
FORK_RETIRE_DELAY = 1.0
# ... and then one at a time, this far apart (PHP-FPM's dynamic pool also ends one idle child
# per round). A child's exit runs the interpreter's teardown, which writes to every object it
# inherited and so copies its pages: twelve children retired at once after a burst (a
# 16-connection load, then a 100 MiB upload behind nginx) took a quarter of a CPU-second in half
# a second, the pool's memory rose 45-114 MiB for that moment, and the upload beside them took
# 0.196 s instead of 0.11 s.
FORK_RETIRE_SPACING = 0.1

# Pause after fork() fails for lack of resources before the parent tries again.
FORK_SPAWN_BACKOFF = 1.0

# The slow log and the request timeout (flupfast.ops) look at the requests in flight four times
# per their bound, and at least this often: a request is reported or ended at most this late,
# while a process with long bounds wakes once a second, not more.
REQUEST_WATCH_INTERVAL = 1.0
