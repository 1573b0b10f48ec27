"""A minimal SCGI client for tests: request bytes as nginx's scgi_params sends them, and the
CGI-style response parsed from a socket read to EOF."""
from flupfast.protocols.scgi import encode_request


def request_bytes(uri='/', method='GET', body=b'', script_name='', path_info=None,
                  extra=(), content_length=None):
    """An SCGI request for ``uri`` (path?query). Without ``path_info`` none is sent (nginx's
    stock scgi_params sends none)."""
    path, _, query = uri.partition('?')
    pairs = [('CONTENT_LENGTH', str(len(body) if content_length is None else content_length)),
             ('SCGI', '1'), ('REQUEST_METHOD', method), ('REQUEST_URI', uri),
             ('QUERY_STRING', query), ('SCRIPT_NAME', script_name),
             ('SERVER_NAME', 'localhost'), ('SERVER_PORT', '80'),
             ('SERVER_PROTOCOL', 'HTTP/1.1'), ('REMOTE_ADDR', '127.0.0.1')]
    if path_info is not None:
        pairs.append(('PATH_INFO', path_info))
    pairs += list(extra)
    return encode_request(pairs, body)


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
