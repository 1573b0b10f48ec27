"""A minimal SCGI client for tests: request bytes as nginx's scgi_params sends them, and the
CGI-style response parsed from a socket read to EOF."""
from flupfast.protocols.scgi import encode_request


def request_pairs(uri='/', method='GET', body=b'', script_name='', path_info=None,
                  extra=(), content_length=None):
    """The variables of a request for ``uri`` (path?query), CONTENT_LENGTH and SCGI first.
    Without ``path_info`` none is sent (nginx's stock scgi_params sends none)."""
    pairs = [('CONTENT_LENGTH', str(len(body) if content_length is None else content_length)),
             ('SCGI', '1'), ('REQUEST_METHOD', method), ('REQUEST_URI', uri),
             ('QUERY_STRING', uri.partition('?')[2]), ('SCRIPT_NAME', script_name),
             ('SERVER_NAME', 'localhost'), ('SERVER_PORT', '80'),
             ('SERVER_PROTOCOL', 'HTTP/1.1'), ('REMOTE_ADDR', '127.0.0.1')]
    if path_info is not None:
        pairs.append(('PATH_INFO', path_info))
    return pairs + list(extra)


def request_bytes(uri='/', method='GET', body=b'', **kw):
    """An SCGI request (``request_pairs``' arguments) and its body."""
    return encode_request(request_pairs(uri, method, body, **kw), body)


def read_all(sock):
    parts = []
    while True:
        data = sock.recv(1 << 20)
        if not data:
            return b''.join(parts)
        parts.append(data)


def parse_response(raw):
    """(status bytes, [(name, value)], body) of a CGI-style response."""
    head, sep, body = raw.partition(b'\r\n\r\n')
    assert sep, 'no end of headers in %r' % raw[:200]
    lines = head.split(b'\r\n')
    headers = [tuple(line.split(b': ', 1)) for line in lines]
    assert headers[0][0] == b'Status', headers
    return headers[0][1], headers[1:], body
