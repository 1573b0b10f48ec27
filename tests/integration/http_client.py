"""The client side of the peer tests: a keep-alive HTTP/1.1 client that sends paths as raw
bytes, its Response, and raw exchanges (hand-written HTTP heads, raw SCGI requests) that
http.client cannot express.
"""
import errno
import hashlib
import http.client
import select
import socket
import threading
from dataclasses import dataclass
from typing import List, Tuple

from tests.integration.processes import IO_TIMEOUT

# --------------------------------------------------------------------------------------------
# HTTP client

class RawPathHTTPConnection(http.client.HTTPConnection):
    """http.client, but the request line is sent as latin-1, so a str path holding
    ``'caf\\xc3\\xa9'`` goes out as the raw UTF-8 bytes of ``café``."""

    def _encode_request(self, request):
        return request.encode("latin-1")


@dataclass
class Response:
    status: int
    reason: str
    headers: dict       # lower-case names
    body: bytes
    raw_headers: List[Tuple[str, str]]

    def json(self):
        import json
        return json.loads(self.body.decode("ascii"))


class HTTPClient:
    """One HTTP/1.1 connection to a front, kept alive between requests."""

    def __init__(self, host, port, timeout=IO_TIMEOUT):
        self.conn = RawPathHTTPConnection(host, port, timeout=timeout)

    def close(self):
        self.conn.close()

    def request(self, method, path, body=None, headers=None, sink=None):
        """Send a request; the body may be bytes or an iterator of bytes (chunked when no
        Content-Length header is given). ``sink(piece)`` receives the response body
        instead of it being collected."""
        headers = dict(headers or {})
        headers.setdefault("Host", "localhost")
        self.conn.request(method, path, body=body, headers=headers)
        resp = self.conn.getresponse()
        raw = resp.getheaders()
        if sink is None:
            data = resp.read()
        else:
            data = b""
            while True:
                piece = resp.read(1 << 20)
                if not piece:
                    break
                sink(piece)
        return Response(resp.status, resp.reason, {k.lower(): v for k, v in raw}, data, raw)

    def download(self, method, path, **kw):
        """Stream the body into sha256; returns (response without body, length, hexdigest)."""
        h = hashlib.sha256()
        count = [0]

        def sink(piece):
            h.update(piece)
            count[0] += len(piece)
        resp = self.request(method, path, sink=sink, **kw)
        return resp, count[0], h.hexdigest()


def is_connection_error(exc):
    return isinstance(exc, (http.client.HTTPException, ConnectionError)) or (
        isinstance(exc, OSError) and exc.errno in (errno.ECONNRESET, errno.EPIPE))


def scgi_request(headers, body=b""):
    """A raw SCGI request: the netstring of NUL-separated pairs (CONTENT_LENGTH first, SCGI=1
    added), then the body."""
    pairs = [("CONTENT_LENGTH", str(len(body))), ("SCGI", "1")] + [
        (k, v) for k, v in headers if k not in ("CONTENT_LENGTH", "SCGI")]
    block = b"".join(k.encode("latin-1") + b"\0" + v.encode("latin-1") + b"\0"
                     for k, v in pairs)
    return b"%d:%s," % (len(block), block) + body


def raw_exchange(address, data, source=None, timeout=10.0):
    """Connect to ``address`` (from ``source`` host if given), send ``data``, read until the
    server closes; returns the bytes read (b"" when closed without an answer)."""
    with socket.create_connection(address, timeout=timeout,
                                  source_address=(source, 0) if source else None) as s:
        try:
            s.sendall(data)
        except OSError as exc:
            if not is_connection_error(exc):
                raise
            return b""
        chunks = []
        while True:
            try:
                piece = s.recv(65536)
            except ConnectionResetError:
                break
            if not piece:
                break
            chunks.append(piece)
        return b"".join(chunks)


def raw_http(host, port, head, body=b"", expect_continue=False):
    """Send ``head`` (the request line and header lines, without the blank line: repeated,
    empty or odd names go out as written) and ``body`` on a fresh connection; returns
    (response, body bytes, whether a 100 Continue came before the body was sent)."""
    data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
    with socket.create_connection((host, port), timeout=IO_TIMEOUT) as sock:
        sock.sendall(data)
        got_continue = False
        if expect_continue:
            # Wait for the interim answer as curl does (it sends the body after 1 s anyway).
            if select.select([sock], [], [], 5.0)[0]:
                got_continue = sock.recv(64, socket.MSG_PEEK).startswith(b"HTTP/1.1 100")
        sock.sendall(body)
        resp = http.client.HTTPResponse(sock, method=head[0].split(" ", 1)[0])
        resp.begin()  # skips a 100 Continue
        return resp, resp.read(), got_continue


def request_while_sending(host, port, method, path, chunks, length, timeout=IO_TIMEOUT):
    """One request on a fresh connection whose body (``chunks``, ``length`` bytes in all) is
    sent by a thread while this one reads the answer, as browsers and curl do: an answer
    before the whole body is read cannot then wait on the client's own send. Returns
    (response, body bytes); the connection closes after the answer, which ends the send."""
    sock = socket.create_connection((host, port), timeout=timeout)
    head = ("%s %s HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n"
            "Connection: close\r\n\r\n" % (method, path, length)).encode("latin-1")

    def send():
        try:
            sock.sendall(head)
            for chunk in chunks:
                sock.sendall(chunk)
        except OSError:
            pass  # answered and closed before the body was all sent
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        resp = http.client.HTTPResponse(sock, method=method)
        resp.begin()
        body = resp.read()
    finally:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sender.join(timeout)
        sock.close()
    return resp, body
