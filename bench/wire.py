"""The request bytes the load client replays, and the AJP13 answers it saves, decoded: FastCGI
(as nginx's fastcgi_params), SCGI (as nginx's scgi_params) and AJP13 (as mod_proxy_ajp), with
bodies of the bench's pattern bytes. Pure functions of their arguments: no socket, no process."""
import struct

from bench import apps


# -- the body: pattern bytes, framed ------------------------------------------------------------


def _write_body(out, size, frame=None, chunk=65536):
    """Write ``size`` pattern bytes, ``chunk`` at a time, each through ``frame``."""
    block = apps.BLOCK * 2
    sent = 0
    while sent < size:
        n = min(chunk, size - sent)
        off = sent % len(apps.BLOCK)
        piece = block[off:off + n]
        out.write(frame(piece) if frame else piece)
        sent += n


# -- FastCGI (FastCGI 1.0 spec sections 3.3-3.4, 5.1) ------------------------------------------


def _record(rtype, rid, content=b""):
    pad = -len(content) & 7
    return struct.pack("!BBHHBx", 1, rtype, rid, len(content), pad) + bytes(content) + bytes(pad)


def _pair(name, value):
    name, value = name.encode("latin-1"), value.encode("latin-1")
    enc = lambda n: bytes((n,)) if n < 128 else struct.pack("!L", n | 0x80000000)  # noqa: E731
    return enc(len(name)) + enc(len(value)) + name + value


def write_fcgi_request(path, uri, body_size=0, stdin_record=65536 - 8):
    """Write one request's records to ``path``: BEGIN_REQUEST (responder; fcgi_load sets or
    clears KEEP_CONN), PARAMS as nginx's fastcgi_params would send them, and a body of
    ``body_size`` pattern bytes in STDIN records of ``stdin_record`` bytes (64 KiB records
    with their 8-byte header), then the empty STDIN record."""
    path_part, _, query = uri.partition("?")
    params = {
        "QUERY_STRING": query, "REQUEST_METHOD": "POST" if body_size else "GET",
        "CONTENT_TYPE": "application/octet-stream" if body_size else "",
        "CONTENT_LENGTH": str(body_size) if body_size else "",
        "SCRIPT_NAME": "", "PATH_INFO": path_part, "REQUEST_URI": uri,
        "DOCUMENT_URI": path_part, "DOCUMENT_ROOT": "/var/www", "SERVER_PROTOCOL": "HTTP/1.1",
        "REQUEST_SCHEME": "http", "GATEWAY_INTERFACE": "CGI/1.1", "SERVER_SOFTWARE": "nginx",
        "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "50000", "SERVER_ADDR": "127.0.0.1",
        "SERVER_PORT": "80", "SERVER_NAME": "localhost", "HTTP_HOST": "localhost",
        "HTTP_USER_AGENT": "fcgi_load", "HTTP_ACCEPT": "*/*",
    }
    pairs = b"".join(_pair(k, v) for k, v in params.items())
    with open(path, "wb") as out:
        out.write(_record(1, 1, struct.pack("!HB5x", 1, 0)))
        out.write(_record(4, 1, pairs) + _record(4, 1))
        _write_body(out, body_size, lambda d: _record(5, 1, d), chunk=stdin_record)
        out.write(_record(5, 1))
    return path


# -- SCGI --------------------------------------------------------------------------------------


def _params(uri, body_size):
    """The CGI variables nginx's scgi_params sends (no PATH_INFO: the apps fall back to
    REQUEST_URI), CONTENT_LENGTH first as SCGI requires."""
    path_part, _, query = uri.partition("?")
    return [
        ("CONTENT_LENGTH", str(body_size)), ("SCGI", "1"),
        ("REQUEST_METHOD", "POST" if body_size else "GET"), ("REQUEST_URI", uri),
        ("QUERY_STRING", query), ("CONTENT_TYPE", "application/octet-stream" if body_size
                                  else ""),
        ("DOCUMENT_URI", path_part), ("DOCUMENT_ROOT", "/var/www"),
        ("SERVER_PROTOCOL", "HTTP/1.1"), ("REQUEST_SCHEME", "http"),
        ("REMOTE_ADDR", "127.0.0.1"), ("REMOTE_PORT", "50000"), ("SERVER_PORT", "80"),
        ("SERVER_NAME", "localhost"), ("HTTP_HOST", "localhost"),
        ("HTTP_USER_AGENT", "fcgi_load"), ("HTTP_ACCEPT", "*/*"),
    ]


def write_scgi_request(path, uri, body_size=0):
    block = b"".join(k.encode("latin-1") + b"\0" + v.encode("latin-1") + b"\0"
                     for k, v in _params(uri, body_size))
    with open(path, "wb") as out:
        out.write(b"%d:" % len(block) + block + b",")
        _write_body(out, body_size)
    return path


def write_uwsgi_request(path, uri, body_size=0):
    """The uwsgi packet nginx's uwsgi_pass sends: modifier1 0, the vars block's size
    (little-endian), modifier2 0, each var as two little-endian 16-bit-prefixed strings, then
    the body; the same variables as SCGI's."""
    block = b"".join(struct.pack("<H", len(k)) + k + struct.pack("<H", len(v)) + v
                     for k, v in ((k.encode("latin-1"), v.encode("latin-1"))
                                  for k, v in _params(uri, body_size) if k != "SCGI"))
    with open(path, "wb") as out:
        out.write(struct.pack("<BHB", 0, len(block), 0) + block)
        _write_body(out, body_size)
    return path


# -- AJP13 (ajpv13a.html; httpd's ajp_header.c) -------------------------------------------------


# AJP13 (ajpv13a.html; httpd's ajp_header.c)
AJP_METHODS = {"GET": 2, "POST": 4}


AJP_REQ_HEADERS = {"accept": 0x01, "content-type": 0x07, "content-length": 0x08,
                   "host": 0x0B, "user-agent": 0x0E}


AJP_RESP_HEADERS = {1: "Content-Type", 2: "Content-Language", 3: "Content-Length", 4: "Date",
                    5: "Last-Modified", 6: "Location", 7: "Set-Cookie", 8: "Set-Cookie2",
                    9: "Servlet-Engine", 10: "Status", 11: "WWW-Authenticate"}


def _ajp_string(value):
    data = value.encode("latin-1")
    return struct.pack(">H", len(data)) + data + b"\0"


def _ajp_packet(payload):
    return b"\x12\x34" + struct.pack(">H", len(payload)) + payload


def ajp_forward_request(uri, body_size=0):
    """FORWARD_REQUEST as mod_proxy_ajp sends it for ``uri``."""
    path_part, _, query = uri.partition("?")
    headers = [("host", "localhost"), ("user-agent", "fcgi_load"), ("accept", "*/*")]
    if body_size:
        headers += [("content-type", "application/octet-stream"),
                    ("content-length", str(body_size))]
    out = [bytes((0x02, AJP_METHODS["POST" if body_size else "GET"])),
           _ajp_string("HTTP/1.1"), _ajp_string(path_part), _ajp_string("127.0.0.1"),
           _ajp_string("127.0.0.1"), _ajp_string("localhost"), struct.pack(">H", 80), b"\0",
           struct.pack(">H", len(headers))]
    for name, value in headers:
        out.append(bytes((0xA0, AJP_REQ_HEADERS[name])) + _ajp_string(value))
    if query:
        out.append(b"\x05" + _ajp_string(query))
    out.append(b"\xff")
    return _ajp_packet(b"".join(out))


def write_ajp_request(path, uri, body_size=0, packet_size=8192):
    """FORWARD_REQUEST, then the body in packets of ``packet_size`` bytes (header 4, length 2,
    data: 8186 data bytes in 8 KiB packets, as mod_proxy_ajp sends them)."""
    with open(path, "wb") as out:
        out.write(ajp_forward_request(uri, body_size))
        _write_body(out, body_size, lambda d: _ajp_packet(struct.pack(">H", len(d)) + d),
                    chunk=packet_size - 6)
    return path


def decode_ajp_answer(data):
    """The container's packets -> (CGI-style head text, body bytes)."""
    head, body, pos = [], [], 0
    while pos + 4 <= len(data):
        if data[pos:pos + 2] != b"AB":
            raise ValueError("bad AJP packet header at %d" % pos)
        (length,) = struct.unpack_from(">H", data, pos + 2)
        payload = data[pos + 4:pos + 4 + length]
        pos += 4 + length
        kind = payload[0]
        if kind == 3:
            (n,) = struct.unpack_from(">H", payload, 1)
            body.append(payload[3:3 + n])
        elif kind == 4:
            status, = struct.unpack_from(">H", payload, 1)
            i = 3
            (n,) = struct.unpack_from(">H", payload, i)
            msg = payload[i + 2:i + 2 + n].decode("latin-1")
            i += 2 + n + 1
            head.append("Status: %d %s" % (status, msg))
            (count,) = struct.unpack_from(">H", payload, i)
            i += 2
            for _ in range(count):
                if payload[i] == 0xA0:
                    name = AJP_RESP_HEADERS.get(payload[i + 1], "?")
                    i += 2
                else:
                    (n,) = struct.unpack_from(">H", payload, i)
                    name = payload[i + 2:i + 2 + n].decode("latin-1")
                    i += 2 + n + 1
                (n,) = struct.unpack_from(">H", payload, i)
                head.append("%s: %s" % (name, payload[i + 2:i + 2 + n].decode("latin-1")))
                i += 2 + n + 1
        elif kind == 5:
            break
    return "\r\n".join(head), b"".join(body)
