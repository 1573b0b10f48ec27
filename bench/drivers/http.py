"""One HTTP/1.0 request from Python, timed from connect to the last byte: the bench's curl
(checks through a front, and the transfers whose body one sendall sends)."""
import re
import socket
import time


def http_request(port, method, uri, body=None, timeout=30.0, headers=()):
    """One HTTP/1.0 request (no chunked answer) -> (status, head text, body, seconds from
    connect to the last byte). ``body`` is sent with one sendall. Raises socket.timeout when
    ``timeout`` (in all) passes."""
    end = time.monotonic() + timeout
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = ["%s %s HTTP/1.0" % (method, uri), "Host: localhost"]
        head += ["%s: %s" % kv for kv in headers]
        if body is not None:
            head += ["Content-Type: application/octet-stream", "Content-Length: %d" % len(body)]
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        if body is not None:
            s.settimeout(max(0.1, end - time.monotonic()))
            s.sendall(body)
        chunks = []
        while True:
            s.settimeout(max(0.1, end - time.monotonic()))
            data = s.recv(1 << 20)
            if not data:
                break
            chunks.append(data)
    seconds = time.perf_counter() - t0
    data = b"".join(chunks)
    head, _, rest = data.partition(b"\r\n\r\n")
    text = head.decode("latin-1")
    m = re.match(r"HTTP/1\.\d (\d+)", text)
    return (int(m.group(1)) if m else 0), text, rest, seconds
