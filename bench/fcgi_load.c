/* fcgi_load: a small FastCGI load generator for flupfast's benchmarks.
 *
 * It sends one prebuilt request (BEGIN_REQUEST, PARAMS, STDIN records, read from a file) over
 * N concurrent connections to a Unix or TCP socket, reads each answer until END_REQUEST,
 * and prints one JSON object: requests, errors, throughput, latency percentiles.
 * One thread, epoll, non-blocking sockets; no allocation on the hot path.
 *
 * It is compiled by bench/run.py at bench time (cc -O2); no binary is committed.
 *
 *   fcgi_load [-P fcgi|scgi|uwsgi|ajp] (-u PATH | -t HOST:PORT) -r REQUEST_FILE [-c CONNS] [-k]
 *             (-d SECONDS [-w WARMUP] | -n COUNT) [-T DEADLINE] [-o FILE [-O SIZE_HINT]]
 *
 *   -P   the protocol (default fcgi):
 *        fcgi  the request file is BEGIN_REQUEST, PARAMS, STDIN records; the answer ends at
 *              END_REQUEST.
 *        scgi  the request file is the netstring header block and the body, sent as is; one
 *              request per connection, the answer ends at EOF (-k is ignored). "bad_status" if
 *              it does not begin with "Status: 200".
 *        uwsgi the request file is the 4-byte packet header, the vars block and the body, sent
 *              as is; as scgi, but the answer begins with an HTTP/1.x status line ("bad_status"
 *              unless it is 20x).
 *        ajp   the request file is AJP13 packets (0x12 0x34 LEN): FORWARD_REQUEST, then the
 *              body packets. FORWARD_REQUEST and the first body packet are sent at once (as
 *              mod_proxy_ajp and mod_jk do), every further body packet only when the
 *              container asks with GET_BODY_CHUNK (an empty packet once the body is all
 *              sent). The answer ends at END_RESPONSE; connections are persistent (-k is
 *              implied) unless END_RESPONSE says reuse=0. "bad_status" if SEND_HEADERS'
 *              status is not 200 or a request ends without SEND_HEADERS.
 *        With -o, scgi and ajp save every byte received for the last request (ajp: the
 *        container's packets, headers included), fcgi the STDOUT payload.
 *
 *   -k   set FCGI_KEEP_CONN in BEGIN_REQUEST and reuse each connection; without -k the flag
 *        is cleared and every request opens a new connection (flup's default).
 *   -d   run for SECONDS after a WARMUP (requests finishing in the warmup are not counted).
 *   -n   stop after COUNT requests (transfer benchmarks use -n 1 -c 1).
 *   -T   hard deadline in seconds from the start (default 60): on expiry the JSON says
 *        "timed_out": true and counts what completed.
 *   -o   (with -c 1) keep the STDOUT payload of the last request in memory and write it to
 *        FILE after the clock stops; -O preallocates that many bytes.
 *
 * A response counts as an error if the connection ends (EOF, reset) before END_REQUEST or
 * END_REQUEST carries a protocol status other than FCGI_REQUEST_COMPLETE; it counts as
 * "bad_status" if its STDOUT does not begin with "Status: 200" (the CGI header block).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* FastCGI 1.0 spec section 8 */
#define FCGI_HEADER_LEN 8
#define FCGI_BEGIN_REQUEST 1
#define FCGI_END_REQUEST 3
#define FCGI_STDOUT 6
#define FCGI_STDERR 7
#define FCGI_KEEP_CONN 1

/* AJP13 (ajpv13a): container -> web server packet types */
#define AJP_SEND_BODY_CHUNK 3
#define AJP_SEND_HEADERS 4
#define AJP_END_RESPONSE 5
#define AJP_GET_BODY_CHUNK 6

enum { P_FCGI, P_SCGI, P_AJP, P_UWSGI };
/* uwsgi answers as SCGI does (one request per connection, to EOF), in HTTP/1.x */
#define UNTIL_EOF(p) ((p) == P_SCGI || (p) == P_UWSGI)

#define MAX_CONNS 1024
#define RECV_SIZE (256 * 1024)
#define RETRY_DELAY 0.002 /* seconds before a slot reconnects after an error */

enum { S_IDLE, S_CONNECTING, S_ACTIVE, S_WAIT };

struct conn {
    int fd;
    int state;
    size_t wpos;           /* request bytes written */
    size_t wlimit;         /* request bytes that may be written now (ajp: packets asked for) */
    size_t next_pkt;       /* ajp: index in pkt_end of the next body packet to release */
    int empties_owed;      /* ajp: empty body packets asked for beyond the body */
    int got_headers;       /* ajp: SEND_HEADERS seen */
    long rbytes;           /* scgi: bytes received for this request */
    unsigned char hdr[8];  /* record header being collected */
    int hlen;
    int rtype;
    uint32_t content_left, pad_left;
    unsigned char endbuf[8];
    int endlen;
    char stbuf[12];        /* first STDOUT bytes, to check the status line */
    int stlen;
    double t_start;        /* request start (connect, or first write when kept) */
    double retry_at;
    long served;           /* requests completed inside the measured window */
    int keep_open;         /* the connection has served a request and is reused */
    uint32_t events;       /* the epoll mask registered */
};

static struct conn conns[MAX_CONNS];
static unsigned char *req_buf;
static size_t req_len;
static int epfd;
static int use_unix = 1;
static struct sockaddr_un un_addr;
static struct sockaddr_storage tcp_addr;
static socklen_t tcp_addr_len;
static int keep_conn = 0;
static int proto = P_FCGI;
static size_t *pkt_end;    /* ajp: end offset of each packet of the request file */
static size_t npkt = 0;
static int nconns = 1;
static double duration = 0, warmup = 0, deadline_s = 60;
static long count_limit = 0;
static const char *save_path = NULL;
static size_t save_hint = 0;

/* results */
static long completed = 0;     /* in window */
static long completed_all = 0; /* including warmup */
static long started = 0;
static long errors = 0, bad_status = 0, connects = 0, connect_retries = 0;
static long req_failures = 0;  /* requests begun that ended without END_REQUEST */
static unsigned long long bytes_stdout = 0, bytes_stderr = 0, bytes_sent = 0;
static char first_error[256] = "";
static char first_bad[64] = "";
static uint32_t *lat_us;
static size_t lat_n = 0, lat_cap = 0;
static unsigned char *save_buf;
static size_t save_len = 0, save_cap = 0;
static double t0, t_window_start, t_last_done;
static int in_window = 0;
static int timed_out = 0;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *msg) {
    fprintf(stderr, "fcgi_load: %s: %s\n", msg, strerror(errno));
    exit(2);
}

static void note_error(const char *what, int err) {
    errors++;
    if (!first_error[0])
        snprintf(first_error, sizeof first_error, "%s%s%s", what, err ? ": " : "",
                 err ? strerror(err) : "");
}

static void ep_set(struct conn *c, uint32_t events, int op) {
    struct epoll_event ev;
    ev.events = events;
    ev.data.u32 = (uint32_t)(c - conns);
    if (op == EPOLL_CTL_MOD && c->events == events) return;
    if (epoll_ctl(epfd, op, c->fd, &ev) < 0) die("epoll_ctl");
    c->events = events;
}

static void close_conn(struct conn *c) {
    if (c->fd >= 0) {
        close(c->fd); /* also removes it from the epoll set */
        c->fd = -1;
    }
    c->state = S_IDLE;
    c->keep_open = 0;
}

static int may_start(void) {
    if (count_limit > 0) return started < count_limit;
    return 1;
}

static void reset_parse(struct conn *c) {
    c->hlen = 0;
    c->got_headers = 0;
    c->rbytes = 0;
    c->empties_owed = 0;
    c->content_left = c->pad_left = 0;
    c->endlen = 0;
    c->stlen = 0;
    save_len = 0;
}

static int write_some(struct conn *c);

static void start_request(struct conn *c) {
    c->wpos = 0;
    if (proto == P_AJP) {
        /* FORWARD_REQUEST and the first body packet (if any); the rest on GET_BODY_CHUNK */
        c->next_pkt = npkt > 1 ? 2 : 1;
        c->wlimit = pkt_end[c->next_pkt - 1];
    } else {
        c->wlimit = req_len;
    }
    reset_parse(c);
    started++;
    if (write_some(c) < 0) return;
    ep_set(c, c->wpos < c->wlimit ? (EPOLLIN | EPOLLOUT) : EPOLLIN, EPOLL_CTL_MOD);
}

/* Open a new connection for slot c and start its request. */
static void open_conn(struct conn *c) {
    int fd = socket(use_unix ? AF_UNIX : tcp_addr.ss_family,
                    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket");
    if (!use_unix) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    c->fd = fd;
    c->t_start = now();
    int rc = use_unix ? connect(fd, (struct sockaddr *)&un_addr, sizeof un_addr)
                      : connect(fd, (struct sockaddr *)&tcp_addr, tcp_addr_len);
    if (rc < 0 && errno == EINPROGRESS) {
        c->state = S_CONNECTING;
        ep_set(c, EPOLLOUT, EPOLL_CTL_ADD);
        return;
    }
    if (rc < 0) {
        int err = errno;
        close(fd);
        c->fd = -1;
        c->state = S_WAIT;
        c->retry_at = now() + RETRY_DELAY;
        if (err == EAGAIN) { /* Unix socket backlog full: try again soon */
            connect_retries++;
        } else {
            note_error("connect", err);
        }
        return;
    }
    connects++;
    c->state = S_ACTIVE;
    ep_set(c, EPOLLIN, EPOLL_CTL_ADD);
    start_request(c);
}

static void fail_conn(struct conn *c, const char *what, int err) {
    note_error(what, err);
    if (c->state == S_ACTIVE) req_failures++;
    close_conn(c);
    c->state = S_WAIT;
    c->retry_at = now() + RETRY_DELAY;
}

/* Returns -1 if the connection failed (and was closed). */
static int write_some(struct conn *c) {
    static const unsigned char empty_pkt[4] = {0x12, 0x34, 0, 0};
    while (c->wpos < c->wlimit) {
        ssize_t n = send(c->fd, req_buf + c->wpos, c->wlimit - c->wpos, MSG_NOSIGNAL);
        if (n > 0) {
            c->wpos += (size_t)n;
            bytes_sent += (unsigned long long)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return 0;
        fail_conn(c, "send", errno);
        return -1;
    }
    while (c->empties_owed) {
        /* 4 bytes after everything else we sent was taken: the socket has room */
        ssize_t n = send(c->fd, empty_pkt, 4, MSG_NOSIGNAL);
        if (n == 4) {
            c->empties_owed--;
            bytes_sent += 4;
            continue;
        }
        fail_conn(c, "send (empty body packet)", n < 0 ? errno : 0);
        return -1;
    }
    return 0;
}

static void save_append(const unsigned char *p, size_t n) {
    if (save_len + n > save_cap) {
        size_t cap = save_cap ? save_cap : (1 << 20);
        while (cap < save_len + n) cap *= 2;
        save_buf = realloc(save_buf, cap);
        if (!save_buf) die("realloc");
        save_cap = cap;
    }
    memcpy(save_buf + save_len, p, n);
    save_len += n;
}

static void note_bad(const char *text, int len) {
    bad_status++;
    if (!first_bad[0]) {
        int i;
        for (i = 0; i < len && i < (int)sizeof first_bad - 1; i++)
            first_bad[i] = (text[i] >= 32 && text[i] < 127) ? text[i] : '?';
        first_bad[i] = 0;
    }
}

static void request_done(struct conn *c) {
    double t = now();
    int ok = 1;
    if (proto == P_FCGI && (c->endlen < 8 || c->endbuf[4] != 0)) {
        note_error("END_REQUEST with protocol status != REQUEST_COMPLETE", 0);
        ok = 0;
    } else if (proto == P_AJP) {
        if (!c->got_headers) note_bad("END_RESPONSE without SEND_HEADERS", 33);
        else if (c->stlen < 3) note_bad(c->stbuf, c->stlen);
    } else if (proto == P_UWSGI) {
        if (c->stlen < 11 || memcmp(c->stbuf, "HTTP/1.", 7) != 0 ||
            memcmp(c->stbuf + 8, " 20", 3) != 0)
            note_bad(c->stbuf, c->stlen);
    } else if (c->stlen < 11 || memcmp(c->stbuf, "Status: 200", 11) != 0) {
        note_bad(c->stbuf, c->stlen);
    }
    completed_all++;
    if (in_window && ok) {
        completed++;
        c->served++;
        t_last_done = t;
        if (lat_n == lat_cap) {
            lat_cap = lat_cap ? lat_cap * 2 : 65536;
            lat_us = realloc(lat_us, lat_cap * sizeof *lat_us);
            if (!lat_us) die("realloc");
        }
        double us = (t - c->t_start) * 1e6;
        lat_us[lat_n++] = us > 4e9 ? 4000000000u : (uint32_t)us;
    }
}

/* SCGI: the answer is every byte until EOF. */
static void parse_scgi(struct conn *c, const unsigned char *p, size_t n) {
    bytes_stdout += n;
    if (c->stlen < 11) {
        size_t k = 11 - (size_t)c->stlen;
        if (k > n) k = n;
        memcpy(c->stbuf + c->stlen, p, k);
        c->stlen += (int)k;
    }
    c->rbytes += (long)n;
    if (save_path) save_append(p, n);
}

/* AJP13: packets 'A' 'B' LEN16 PAYLOAD; returns 1 when END_RESPONSE completed the request
 * (*reuse: its reuse flag), -1 on a protocol error. hdr[0..3] collects the header, endbuf the
 * first 3 payload bytes (type and status, or type and reuse). */
static int parse_ajp(struct conn *c, const unsigned char *p, size_t n, size_t *used,
                     int *reuse) {
    size_t i = 0;
    while (i < n) {
        if (c->hlen < 4) {
            size_t take = 4 - (size_t)c->hlen;
            if (take > n - i) take = n - i;
            memcpy(c->hdr + c->hlen, p + i, take);
            c->hlen += (int)take;
            i += take;
            if (c->hlen < 4) break;
            if (c->hdr[0] != 'A' || c->hdr[1] != 'B') {
                *used = i;
                return -1;
            }
            c->content_left = ((uint32_t)c->hdr[2] << 8) | c->hdr[3];
            c->endlen = 0;
            if (c->content_left == 0) {
                *used = i;
                return -1;
            }
        } else {
            size_t take = c->content_left;
            if (take > n - i) take = n - i;
            if (c->endlen < 3) {
                size_t k = 3 - (size_t)c->endlen;
                if (k > take) k = take;
                memcpy(c->endbuf + c->endlen, p + i, k);
                c->endlen += (int)k;
            }
            c->content_left -= (uint32_t)take;
            i += take;
        }
        if (c->hlen == 4 && !c->content_left) {
            uint32_t plen = ((uint32_t)c->hdr[2] << 8) | c->hdr[3];
            int type = c->endbuf[0];
            c->hlen = 0;
            if (type == AJP_SEND_BODY_CHUNK) {
                /* type 1, length 2, data, NUL */
                if (plen >= 4) bytes_stdout += plen - 4;
            } else if (type == AJP_SEND_HEADERS) {
                c->got_headers = 1;
                if (c->endlen >= 3 && c->endbuf[1] == 0 && c->endbuf[2] == 200) {
                    c->stlen = 3;
                } else {
                    char text[32];
                    int len = snprintf(text, sizeof text, "AJP status %d",
                                       c->endlen >= 3 ? (c->endbuf[1] << 8) | c->endbuf[2]
                                                      : -1);
                    c->stlen = 0;
                    note_bad(text, len);
                }
            } else if (type == AJP_GET_BODY_CHUNK) {
                if (c->next_pkt < npkt) {
                    c->wlimit = pkt_end[c->next_pkt++];
                } else {
                    c->empties_owed++;
                }
                if (write_some(c) < 0) return -2;
                ep_set(c, (c->wpos < c->wlimit || c->empties_owed) ? (EPOLLIN | EPOLLOUT)
                                                                   : EPOLLIN, EPOLL_CTL_MOD);
            } else if (type == AJP_END_RESPONSE) {
                *reuse = c->endlen >= 2 ? c->endbuf[1] : 0;
                *used = i;
                return 1;
            }
        }
    }
    *used = i;
    return 0;
}

/* Parse received bytes; returns 1 when END_REQUEST completed the request. */
static int parse(struct conn *c, const unsigned char *p, size_t n, size_t *used) {
    size_t i = 0;
    while (i < n) {
        if (c->hlen < FCGI_HEADER_LEN) {
            size_t take = FCGI_HEADER_LEN - c->hlen;
            if (take > n - i) take = n - i;
            memcpy(c->hdr + c->hlen, p + i, take);
            c->hlen += (int)take;
            i += take;
            if (c->hlen < FCGI_HEADER_LEN) break;
            c->rtype = c->hdr[1];
            c->content_left = ((uint32_t)c->hdr[4] << 8) | c->hdr[5];
            c->pad_left = c->hdr[6];
        } else if (c->content_left) {
            size_t take = c->content_left;
            if (take > n - i) take = n - i;
            if (c->rtype == FCGI_STDOUT) {
                bytes_stdout += take;
                if (c->stlen < 11) {
                    size_t k = 11 - (size_t)c->stlen;
                    if (k > take) k = take;
                    memcpy(c->stbuf + c->stlen, p + i, k);
                    c->stlen += (int)k;
                }
                if (save_path) save_append(p + i, take);
            } else if (c->rtype == FCGI_STDERR) {
                bytes_stderr += take;
            } else if (c->rtype == FCGI_END_REQUEST) {
                size_t k = take;
                if (c->endlen + k > 8) k = 8 - (size_t)c->endlen;
                memcpy(c->endbuf + c->endlen, p + i, k);
                c->endlen += (int)k;
            }
            c->content_left -= (uint32_t)take;
            i += take;
        } else {
            size_t take = c->pad_left;
            if (take > n - i) take = n - i;
            c->pad_left -= (uint32_t)take;
            i += take;
        }
        if (c->hlen == FCGI_HEADER_LEN && !c->content_left && !c->pad_left) {
            int type = c->rtype;
            c->hlen = 0;
            if (type == FCGI_END_REQUEST) {
                *used = i;
                return 1;
            }
        }
    }
    *used = i;
    return 0;
}

static unsigned char rbuf[RECV_SIZE];

static void next_request(struct conn *c, int reuse) {
    if (reuse && may_start()) {
        c->keep_open = 1;
        c->t_start = now();
        start_request(c);
    } else {
        close_conn(c);
        if (may_start()) open_conn(c);
    }
}

static void on_readable(struct conn *c) {
    for (;;) {
        ssize_t n = recv(c->fd, rbuf, sizeof rbuf, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) return;
            fail_conn(c, "recv", errno);
            return;
        }
        if (n == 0) {
            if (UNTIL_EOF(proto) && c->rbytes > 0) { /* the end of an SCGI/uwsgi answer */
                request_done(c);
                next_request(c, 0);
                return;
            }
            fail_conn(c, proto == P_AJP ? "EOF before END_RESPONSE"
                         : UNTIL_EOF(proto) ? "EOF before any answer" : "EOF before END_REQUEST",
                      0);
            return;
        }
        size_t used;
        if (UNTIL_EOF(proto)) {
            parse_scgi(c, rbuf, (size_t)n);
        } else if (proto == P_AJP) {
            int reuse = 0;
            int rc = parse_ajp(c, rbuf, (size_t)n, &used, &reuse);
            if (rc == -2) return; /* failed and closed while answering GET_BODY_CHUNK */
            if (save_path) save_append(rbuf, used);
            if (rc < 0) {
                fail_conn(c, "AJP protocol error (bad packet header)", 0);
                return;
            }
            if (rc == 1) {
                if (used < (size_t)n) {
                    fail_conn(c, "bytes after END_RESPONSE", 0);
                    return;
                }
                request_done(c);
                next_request(c, reuse);
                return;
            }
        } else if (parse(c, rbuf, (size_t)n, &used)) {
            request_done(c);
            next_request(c, keep_conn);
            return;
        }
        if ((size_t)n < sizeof rbuf) return; /* probably drained; epoll tells us if not */
    }
}

static void on_event(struct conn *c, uint32_t ev) {
    if (c->state == S_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            fail_conn(c, "connect", err);
            return;
        }
        connects++;
        c->state = S_ACTIVE;
        start_request(c);
        return;
    }
    if (c->state != S_ACTIVE) return;
    if (ev & EPOLLOUT) {
        if (write_some(c) < 0) return;
        if (c->fd >= 0 && c->wpos >= c->wlimit && !c->empties_owed)
            ep_set(c, EPOLLIN, EPOLL_CTL_MOD);
    }
    if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(c);
}

static double percentile(double q) {
    if (!lat_n) return 0;
    size_t k = (size_t)(q * (double)(lat_n - 1) + 0.5);
    return lat_us[k] / 1000.0;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 32) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

static void usage(void) {
    fprintf(stderr, "usage: fcgi_load [-P fcgi|scgi|uwsgi|ajp] (-u PATH | -t HOST:PORT) -r REQUEST_FILE [-c CONNS] [-k] "
                    "(-d SECONDS [-w WARMUP] | -n COUNT) [-T DEADLINE] [-o FILE [-O SIZE]]\n");
    exit(2);
}

static void load_request(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) die(path);
    struct stat st;
    if (fstat(fd, &st) < 0) die("fstat");
    req_len = (size_t)st.st_size;
    req_buf = malloc(req_len ? req_len : 1);
    if (!req_buf) die("malloc");
    size_t got = 0;
    while (got < req_len) {
        ssize_t n = read(fd, req_buf + got, req_len - got);
        if (n <= 0) die("read request file");
        got += (size_t)n;
    }
    close(fd);
    if (UNTIL_EOF(proto)) return;
    if (proto == P_AJP) {
        /* the packets' ends; at least FORWARD_REQUEST */
        size_t off = 0, cap = 16;
        pkt_end = malloc(cap * sizeof *pkt_end);
        while (off < req_len) {
            if (req_len - off < 4 || req_buf[off] != 0x12 || req_buf[off + 1] != 0x34) break;
            off += 4 + (((size_t)req_buf[off + 2] << 8) | req_buf[off + 3]);
            if (off > req_len) break;
            if (npkt == cap) pkt_end = realloc(pkt_end, (cap *= 2) * sizeof *pkt_end);
            if (!pkt_end) die("realloc");
            pkt_end[npkt++] = off;
        }
        if (off != req_len || npkt == 0 || req_buf[4] != 2) {
            fprintf(stderr, "fcgi_load: the request file must be AJP packets, starting with "
                            "FORWARD_REQUEST\n");
            exit(2);
        }
        keep_conn = 1;
        return;
    }
    /* Spec 5.1: FCGI_BeginRequestBody {roleB1, roleB0, flags, ...} follows the header. */
    if (req_len < 16 || req_buf[1] != FCGI_BEGIN_REQUEST) {
        fprintf(stderr, "fcgi_load: the request file must start with BEGIN_REQUEST\n");
        exit(2);
    }
    if (keep_conn) req_buf[10] |= FCGI_KEEP_CONN;
    else req_buf[10] &= (unsigned char)~FCGI_KEEP_CONN;
}

static void set_tcp(const char *spec) {
    char host[256];
    const char *colon = strrchr(spec, ':');
    if (!colon || (size_t)(colon - spec) >= sizeof host) usage();
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = 0;
    char *h = host;
    if (h[0] == '[') {
        h++;
        h[strlen(h) - 1] = 0;
    }
    struct addrinfo hints = {0}, *res;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(h, colon + 1, &hints, &res) != 0 || !res) {
        fprintf(stderr, "fcgi_load: cannot resolve %s\n", spec);
        exit(2);
    }
    memcpy(&tcp_addr, res->ai_addr, res->ai_addrlen);
    tcp_addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    use_unix = 0;
}

int main(int argc, char **argv) {
    const char *req_path = NULL, *unix_path = NULL, *tcp_spec = NULL;
    int opt;
    while ((opt = getopt(argc, argv, "P:u:t:r:c:kd:w:n:T:o:O:")) != -1) {
        switch (opt) {
        case 'P':
            if (!strcmp(optarg, "fcgi")) proto = P_FCGI;
            else if (!strcmp(optarg, "scgi")) proto = P_SCGI;
            else if (!strcmp(optarg, "uwsgi")) proto = P_UWSGI;
            else if (!strcmp(optarg, "ajp")) proto = P_AJP;
            else usage();
            break;
        case 'u': unix_path = optarg; break;
        case 't': tcp_spec = optarg; break;
        case 'r': req_path = optarg; break;
        case 'c': nconns = atoi(optarg); break;
        case 'k': keep_conn = 1; break;
        case 'd': duration = atof(optarg); break;
        case 'w': warmup = atof(optarg); break;
        case 'n': count_limit = atol(optarg); break;
        case 'T': deadline_s = atof(optarg); break;
        case 'o': save_path = optarg; break;
        case 'O': save_hint = (size_t)atoll(optarg); break;
        default: usage();
        }
    }
    if (!req_path || (!unix_path == !tcp_spec) || nconns < 1 || nconns > MAX_CONNS ||
        (duration <= 0 && count_limit <= 0) || (save_path && nconns != 1))
        usage();
    if (unix_path) {
        if (strlen(unix_path) >= sizeof un_addr.sun_path) usage();
        un_addr.sun_family = AF_UNIX;
        strcpy(un_addr.sun_path, unix_path);
    } else {
        set_tcp(tcp_spec);
    }
    if (UNTIL_EOF(proto)) keep_conn = 0;
    load_request(req_path);
    if (save_path && save_hint) {
        save_buf = malloc(save_hint);
        if (!save_buf) die("malloc");
        memset(save_buf, 0, save_hint); /* fault the pages in before the clock starts */
        save_cap = save_hint;
    }
    signal(SIGPIPE, SIG_IGN);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) die("epoll_create1");

    t0 = now();
    double t_deadline = t0 + deadline_s;
    double t_end = duration > 0 ? t0 + warmup + duration : 0;
    t_window_start = t0 + (duration > 0 ? warmup : 0);
    in_window = !(duration > 0 && warmup > 0);
    t_last_done = t0;

    for (int i = 0; i < nconns; i++) {
        conns[i].fd = -1;
        conns[i].state = S_IDLE;
    }
    for (int i = 0; i < nconns && may_start(); i++) open_conn(&conns[i]);

    struct epoll_event events[MAX_CONNS];
    for (;;) {
        double t = now();
        if (!in_window && t >= t_window_start) in_window = 1;
        if (t_end && t >= t_end) break;
        if (count_limit > 0 && completed_all >= count_limit) break;
        if (t >= t_deadline) {
            timed_out = 1;
            break;
        }
        int waiting = 0;
        for (int i = 0; i < nconns; i++) {
            if (conns[i].state == S_WAIT) {
                if (t >= conns[i].retry_at && may_start()) open_conn(&conns[i]);
                else waiting = 1;
            }
        }
        int timeout_ms = waiting ? 1 : 50;
        int n = epoll_wait(epfd, events, nconns, timeout_ms);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int k = 0; k < n; k++) on_event(&conns[events[k].data.u32], events[k].events);
        if (count_limit > 0) {
            /* A failed request counts as done (one attempt each); a server that refuses
             * connections must not make us retry forever. */
            if (completed_all + req_failures >= count_limit) break;
            if (errors >= count_limit * 4 + 16) break;
        }
    }
    double t_stop = now();
    int stalled = 0, inflight = 0;
    for (int i = 0; i < nconns; i++) {
        if (conns[i].served == 0) stalled++;
        if (conns[i].state == S_ACTIVE || conns[i].state == S_CONNECTING) inflight++;
        close_conn(&conns[i]);
    }
    double seconds = duration > 0 ? t_stop - t_window_start : t_last_done - t0;
    if (seconds <= 0) seconds = 1e-9;
    if (save_path) {
        FILE *f = fopen(save_path, "wb");
        if (!f || fwrite(save_buf, 1, save_len, f) != save_len || fclose(f) != 0)
            die("write the saved STDOUT");
    }
    qsort(lat_us, lat_n, sizeof *lat_us, cmp_u32);
    double sum = 0;
    for (size_t i = 0; i < lat_n; i++) sum += lat_us[i];
    printf("{\"requests\": %ld, \"errors\": %ld, \"bad_status\": %ld, \"seconds\": %.6f, "
           "\"rps\": %.1f, \"connections\": %d, \"keep_conn\": %s, \"connects\": %ld, "
           "\"connect_retries\": %ld, \"stalled_connections\": %d, \"inflight_at_end\": %d, "
           "\"timed_out\": %s, \"bytes_sent\": %llu, \"bytes_stdout\": %llu, "
           "\"bytes_stderr\": %llu, \"request_bytes\": %zu, ",
           completed, errors, bad_status, seconds, completed / seconds, nconns,
           keep_conn ? "true" : "false", connects, connect_retries, stalled, inflight,
           timed_out ? "true" : "false", bytes_sent, bytes_stdout, bytes_stderr, req_len);
    printf("\"latency_ms\": {\"mean\": %.3f, \"p50\": %.3f, \"p90\": %.3f, \"p99\": %.3f, "
           "\"p999\": %.3f, \"max\": %.3f}, ",
           lat_n ? sum / lat_n / 1000.0 : 0.0, percentile(0.5), percentile(0.9),
           percentile(0.99), percentile(0.999), lat_n ? lat_us[lat_n - 1] / 1000.0 : 0.0);
    printf("\"first_error\": ");
    json_string(first_error);
    printf(", \"first_bad_status\": ");
    json_string(first_bad);
    printf("}\n");
    return 0;
}
