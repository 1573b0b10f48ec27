"""Ordinary traffic through every supported front to every protocol: what browsers, proxies
and clients send every day must reach the app, whatever strict rule or cap the server keeps.

One battery, raw HTTP on a socket (so repeated, empty and odd header names go out as written),
run through nginx (FastCGI, SCGI, uwsgi), Apache (mod_proxy_fcgi, mod_fcgid, mod_proxy_scgi,
mod_proxy_uwsgi, mod_proxy_ajp) and lighttpd (mod_fastcgi, mod_scgi): repeated and empty headers, header names
with digits, dots and underscores, ``Expect: 100-continue``, HTTP/1.0, and a request line and
header blocks at each front's default limits. docs/front-fidelity.md lists, per strict rule of
compat/known_differences.py and per cap of flupfast/limits.py, the fronts and tests behind it.
"""
import hashlib
import json
from dataclasses import dataclass, replace

import pytest

from .lighttpd import start_lighttpd
from .peers import (FLUP_SCGI_UNBOUNDED_INPUT, expected_sha256, probe, raw_http,
                    start_apache_fcgid, start_apache_proxy_ajp, start_apache_proxy_fcgi,
                    start_apache_proxy_scgi, start_apache_proxy_uwsgi, start_nginx,
                    start_nginx_scgi, start_nginx_uwsgi)

pytestmark = [pytest.mark.peer]


@dataclass(frozen=True)
class Traits:
    """What a front does with the battery's inputs (measured, see docs/front-fidelity.md).

    joins: how it passes repeated header lines (None: one pair per line, the backend keeps the
    last; else the separator it joins them with, Cookie's first); odd_names: what header names
    with a dot or an underscore become in environ (most fronts drop them);
    empty: whether an empty header reaches it; line_limit: the longest request line it
    accepts by default; field_size: the longest header line the block test sends;
    header_room: bytes of header lines it accepts by default; env_room: the
    environment it can hand the backend at all (mod_fcgid's one PARAMS record, the AJP
    packet); max_fields: header lines it accepts by default; chunked: whether it forwards a
    chunked request body (mod_proxy_scgi answers 411 itself).
    """
    joins: tuple = None
    odd_names: tuple = ()
    empty: bool = True
    line_limit: int = 8190
    field_size: int = 8190
    header_room: int = 4 * 8192
    env_room: int = 1 << 30
    max_fields: int = 100
    chunked: bool = True


# nginx: large_client_header_buffers 4 8k; Debian's 1.22.1 refuses more than 1000 header lines
# ("client sent too many header lines", measured).
# A header line of 8190 bytes does not fit a buffer beside what follows it; 8000 does.
NGINX = Traits(joins=None, line_limit=8192, field_size=8000, max_fields=1000)
# Apache: LimitRequestLine 8190, LimitRequestFields 100, LimitRequestFieldSize 8190.
APACHE = Traits(joins=(", ", ", "), line_limit=8190, header_room=100 * 8190, max_fields=100)
# mod_fcgid builds the environment into one PARAMS record ("can't build begin or env request"
# past it); mod_proxy_ajp into one packet (ProxyIOBufferSize, at most 65536).
FCGID = replace(APACHE, env_room=65535)
APACHE_SCGI = replace(APACHE, chunked=False)
# mod_proxy_uwsgi: no chunked bodies either, and the environment in one vars block (16-bit
# datasize).
APACHE_UWSGI = replace(APACHE_SCGI, env_room=65535)
# mod_proxy_ajp sends the header names as they came; flupfast's AJP13 environ builder drops
# those with anything but letters, digits and "-", as httpd's own CGI variables do (flup turned
# "-" into "_" only: known_differences 'ajp-header-name-dropped').
APACHE_AJP = replace(APACHE, env_room=65536)
# lighttpd: server.max-request-field-size 8192 for the whole request head; it joins Cookie
# lines with "; ", keeps dots and underscores ("." and "_" become "_") and drops empty headers.
LIGHTTPD = Traits(joins=("; ", ", "), empty=False, line_limit=8192, header_room=8192,
                  max_fields=1 << 16, odd_names=(("HTTP_X_DOT_NAME", "dot"), ("HTTP_X_UNDER", "under")))

# mod_proxy_ajp at its default 8 KiB packet (no ProxyIOBufferSize): the packet, not HTTP, bounds
# the request line and the headers (past it Apache answers 400 itself, "ajp_marshal_into_msgb:
# Error appending the query string", measured with an 8190-byte request line).
APACHE_AJP_8K = replace(APACHE_AJP, env_room=8192, line_limit=7600)

# front id -> (starter, Traits)
FRONTS = {
    "nginx-fcgi": (lambda s: start_nginx(s, name="ordinary-nginx-fcgi"), NGINX),
    "nginx-scgi": (lambda s: start_nginx_scgi(s, name="ordinary-nginx-scgi"), NGINX),
    "apache-proxy-fcgi": (lambda s: start_apache_proxy_fcgi(s, name="ordinary-apache-fcgi"),
                          APACHE),
    "apache-fcgid": (lambda s: start_apache_fcgid(s, name="ordinary-apache-fcgid"), FCGID),
    "apache-scgi": (lambda s: start_apache_proxy_scgi(s, name="ordinary-apache-scgi"),
                    APACHE_SCGI),
    "nginx-uwsgi": (lambda s: start_nginx_uwsgi(s, name="ordinary-nginx-uwsgi"), NGINX),
    "apache-uwsgi": (lambda s: start_apache_proxy_uwsgi(s, name="ordinary-apache-uwsgi"),
                     APACHE_UWSGI),
    # ProxyIOBufferSize 65536 (the README's setting): at the default 8 KiB packet Apache itself
    # cannot marshal a request line or header block near its HTTP limits.
    "apache-ajp": (lambda s: start_apache_proxy_ajp(s, io_buffer=65536,
                                                    name="ordinary-apache-ajp"), APACHE_AJP),
    "apache-ajp-8k": (lambda s: start_apache_proxy_ajp(s, name="ordinary-apache-ajp-8k"),
                      APACHE_AJP_8K),
    "lighttpd-fcgi": (lambda s: start_lighttpd(s, protocol="fcgi",
                                               name="ordinary-lighttpd-fcgi"), LIGHTTPD),
    "lighttpd-scgi": (lambda s: start_lighttpd(s, protocol="scgi",
                                               name="ordinary-lighttpd-scgi"), LIGHTTPD),
}


@pytest.fixture(scope="module", params=sorted(FRONTS))
def front(request, server):
    starter, traits = FRONTS[request.param]
    front = starter(server)
    front.traits = traits
    yield front
    front.stop()


@pytest.fixture(autouse=True)
def _known_flup_bugs(request, server, front):
    """With FLUPFAST_PEER_SERVERS=flup: flup 1.0.3's known failures in the battery, not run
    when they would wait for the front's timeout."""
    if not server.is_flup:
        return
    name = request.node.originalname
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    sends_body = name in ("test_expect_100_continue", "test_content_length_with_leading_zeros",
                          "test_chunked_body") or params.get("method") == "POST"
    if front.protocol == "scgi" and sends_body:
        pytest.xfail("flup 1.0.3: " + FLUP_SCGI_UNBOUNDED_INPUT)
    if front.protocol == "ajp" and (name == "test_chunked_body" or params.get("method") == "PATCH"):
        pytest.xfail("flup 1.0.3: AJP13 chunked bodies and stored methods (ajp-chunked-body, "
                     "ajp-secret-stored-method)")


def send(front, head, body=b"", expect_continue=False):
    return raw_http(front.host, front.port, head, body, expect_continue)


def environ(front, head, **kw):
    resp, body, _ = send(front, head, **kw)
    assert resp.status == 200, (resp.status, body[:500], front.describe()[-4000:])
    return json.loads(body)


def request_line(front, target, version="HTTP/1.1"):
    return "GET %s %s" % (front.url(target), version)


BASE = ["Host: localhost", "Connection: close"]


@pytest.mark.smoke
def test_repeated_headers(front):
    """Two Cookie and two X-Forwarded-For lines (every site behind a proxy gets them)."""
    env = environ(front, [request_line(front, "/environ")] + BASE + [
        "Cookie: a=1", "X-Forwarded-For: 10.0.0.1", "Cookie: b=2",
        "X-Forwarded-For: 10.0.0.2"])
    joins = front.traits.joins
    if joins is None:  # one pair per line: the last wins, as in flup
        expected = ("b=2", "10.0.0.2")
    else:
        expected = ("a=1%sb=2" % joins[0], "10.0.0.1%s10.0.0.2" % joins[1])
    assert (env.get("HTTP_COOKIE"), env.get("HTTP_X_FORWARDED_FOR")) == expected
    front.assert_alive()


def test_empty_header(front):
    env = environ(front, [request_line(front, "/environ")] + BASE + [
        "X-Empty:", "Referer: ", "X-After: yes"])
    assert env["HTTP_X_AFTER"] == "yes"
    if front.traits.empty:
        assert (env["HTTP_X_EMPTY"], env["HTTP_REFERER"]) == ("", "")
    else:
        assert "HTTP_X_EMPTY" not in env and "HTTP_REFERER" not in env


def test_header_names_with_digits_dots_underscores(front):
    """Digits pass everywhere; nginx (ignore_invalid_headers, no underscores_in_headers) and
    Apache drop names with a dot or an underscore, lighttpd passes them as HTTP_X_..."""
    env = environ(front, [request_line(front, "/environ")] + BASE + [
        "X-B3-TraceId: 463ac35c9f6413ad", "X-1: one", "Sec-CH-UA-Platform: \"Linux\"",
        "X-Dot.Name: dot", "X_Under: under"])
    assert (env["HTTP_X_B3_TRACEID"], env["HTTP_X_1"]) == ("463ac35c9f6413ad", "one")
    assert env["HTTP_SEC_CH_UA_PLATFORM"] == '"Linux"'
    odd = {k: v for k, v in env.items() if k.startswith(("HTTP_X_DOT", "HTTP_X_UNDER"))}
    assert odd == dict(front.traits.odd_names)


def test_expect_100_continue(front):
    """curl's default for bodies over 1 KiB: the body follows the front's 100 Continue."""
    size = 300 * 1024 + 7
    resp, body, got_continue = send(front, [
        "POST %s HTTP/1.1" % front.url("/upload?mode=read")] + BASE + [
        "Content-Type: application/octet-stream", "Content-Length: %d" % size,
        "Expect: 100-continue"], body=probe.pattern_bytes(size), expect_continue=True)
    assert resp.status == 200, body[:500]
    assert got_continue
    got = json.loads(body)
    assert (got["length"], got["sha256"]) == (size, expected_sha256(size))


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_http_1_0(front, method):
    """An HTTP/1.0 client without Host (health checks, old tools, ab)."""
    body = b"k=v" if method == "POST" else b""
    head = ["%s %s HTTP/1.0" % (method, front.url("/environ?x=1"))]
    if body:
        head += ["Content-Type: application/x-www-form-urlencoded", "Content-Length: 3"]
    env = environ(front, head, body=body)
    assert (env["SERVER_PROTOCOL"], env["REQUEST_METHOD"]) == ("HTTP/1.0", method)
    assert env["QUERY_STRING"] == "x=1"


def long_target(front):
    """A request target filling the front's default request line limit (nginx's 8 KiB header
    buffer, Apache's LimitRequestLine 8190, lighttpd's 8 KiB request header), mostly query: a
    path Apache can still map onto the file system for mod_fcgid (segments under NAME_MAX, the
    whole under PATH_MAX)."""
    room = front.traits.line_limit - len("GET  HTTP/1.1\r\n") - len(front.url("/environ/?"))
    room -= 64 if front.traits is LIGHTTPD else 0  # lighttpd counts the headers in it too
    path = "/".join(["p" * 199] * 10)
    return path, "q=" + "x" * (room - len(path) - 2)


def test_long_request_line(front):
    path, query = long_target(front)
    env = environ(front, [request_line(front, "/environ/%s?%s" % (path, query))] + BASE)
    assert env["QUERY_STRING"] == query
    assert env["REQUEST_URI"].endswith(path + ("?" + query if front.uri_has_query else ""))


def test_header_block_at_the_front_limit(front):
    """The largest request head the front accepts by default, so the largest environment it
    makes: Apache's 100 fields of 8190 bytes after a request line of 8190 (about 850 KB of
    environment, under MAX_PARAMS_BYTES and MAX_SCGI_HEADER_BYTES), nginx's four 8 KiB
    buffers, lighttpd's 8 KiB; mod_fcgid and mod_proxy_ajp as much as their one record or
    packet holds."""
    traits = front.traits
    reserve = min(12000, traits.env_room // 8)  # the rest of the environment, the framing
    field = min(traits.field_size, traits.header_room - 300, traits.env_room - reserve)
    count = max(1, min(traits.max_fields - len(BASE),
                       (traits.header_room - traits.line_limit - 200) // (field + 2),
                       (traits.env_room - reserve) // (field + 4)))
    target = "/environ"
    if traits.header_room > 2 * traits.line_limit and traits.env_room > 1 << 20:
        target = "/environ/%s?%s" % long_target(front)
    else:
        count = max(1, min(count, (traits.header_room - 300) // (field + 2)))
    value = "v" * (field - len("X-Big-000: "))
    headers = ["X-Big-%03d: %s" % (i, value) for i in range(count)]
    env = environ(front, [request_line(front, target)] + BASE + headers)
    got = {k: v for k, v in env.items() if k.startswith("HTTP_X_BIG_")}
    assert len(got) == count and set(got.values()) == {value}


def test_many_short_headers(front):
    """The most header lines a front passes by default, each its own pair before nginx 1.23:
    nginx's 1000 lines (under the pair cap, MAX_PARAMS_PAIRS), Apache's LimitRequestFields
    100, lighttpd's 8 KiB of short lines; one line more gets the front's own 400."""
    count = front.traits.max_fields - len(BASE)
    if front.traits is LIGHTTPD:
        count = min(count, (front.traits.header_room - 200) // len("M:\r\n"))
    headers = ["M:"] * (count - 1) + ["M: %04d" % (count - 1)]
    resp, body, _ = send(front, [request_line(front, "/environ")] + BASE + headers)
    assert resp.status == 200, (resp.status, body[:300], front.describe()[-3000:])
    env = json.loads(body)
    last = "%04d" % (count - 1)
    assert env["HTTP_M"] == last if front.traits.joins is None else \
        env["HTTP_M"].endswith(last)
    if front.traits is not LIGHTTPD:  # one line more: the front's own refusal, not ours
        resp, body, _ = send(front, [request_line(front, "/environ")] + BASE + headers + ["M:"])
        assert resp.status == 400, (resp.status, body[:300])


@pytest.mark.parametrize("method", ["OPTIONS", "PUT", "DELETE", "PATCH", "PROPFIND"])
def test_methods(front, method):
    """REST and WebDAV verbs (AJP13 codes them, PATCH as a stored method)."""
    env = environ(front, ["%s %s HTTP/1.1" % (method, front.url("/environ"))] + BASE + [
        "Content-Length: 0"])
    assert env["REQUEST_METHOD"] == method


def test_content_length_with_leading_zeros(front):
    """``Content-Length: 0005`` is valid HTTP (1*DIGIT); fronts that pass the header's text
    on (Apache's CONTENT_LENGTH, AJP's Content-Length) must not have it refused."""
    resp, body, _ = send(front, ["POST %s HTTP/1.1" % front.url("/upload?mode=read")] + BASE + [
        "Content-Type: application/octet-stream", "Content-Length: 0005"], body=b"hello")
    assert resp.status == 200, (resp.status, body[:300], front.describe()[-3000:])
    got = json.loads(body)
    assert (got["length"], got["sha256"]) == (5, hashlib.sha256(b"hello").hexdigest())
    # nginx's stock fastcgi_params, mod_proxy_fcgi and mod_proxy_ajp pass the text as sent.
    assert got["content_length"] in ("5", "0005")


@pytest.mark.parametrize("value", ["+5", " 5 5", "5_0", "-5"])
def test_malformed_content_length_stops_at_the_front(front, value):
    """What ajp-strict-packets and scgi-netstring-strict refuse in a length never reaches the
    backend: every front answers 400 itself, and the backend serves on."""
    resp, body, _ = send(front, ["POST %s HTTP/1.1" % front.url("/upload?mode=read")] + BASE + [
        "Content-Length: %s" % value], body=b"hello")
    assert resp.status == 400, (resp.status, body[:300])
    assert send(front, [request_line(front, "/")] + BASE)[1] == probe.HELLO


def test_chunked_body(front):
    """curl -T or a streaming client: a chunked body with Expect: 100-continue."""
    size = 70000
    data = probe.pattern_bytes(size)
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(data[i:i + 8192]), data[i:i + 8192])
                      for i in range(0, size, 8192)) + b"0\r\n\r\n"
    resp, body, _ = send(front, ["POST %s HTTP/1.1" % front.url("/upload?mode=read")] + BASE + [
        "Content-Type: application/octet-stream", "Transfer-Encoding: chunked",
        "Expect: 100-continue"], body=chunks, expect_continue=True)
    if not front.traits.chunked:
        assert resp.status == 411, (resp.status, body[:300])
        return
    assert resp.status == 200, (resp.status, body[:300], front.describe()[-3000:])
    got = json.loads(body)
    assert (got["length"], got["sha256"]) == (size, expected_sha256(size))


def test_still_serving(front):
    resp, body, _ = send(front, [request_line(front, "/")] + BASE)
    assert (resp.status, body) == (200, probe.HELLO)
    front.assert_alive()
