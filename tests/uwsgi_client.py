"""A minimal uwsgi client for tests: the request scgi_client builds (less SCGI=1) as a uwsgi
packet, and the HTTP response parsed from a socket read to EOF."""
from flupfast.protocols.uwsgi import encode_request
from tests.scgi_client import read_all, request_pairs

__all__ = ['request_bytes', 'parse_response', 'read_all']


def request_bytes(uri='/', method='GET', body=b'', protocol='HTTP/1.1', **kw):
    """A uwsgi request (``scgi_client.request_pairs``' arguments); ``protocol`` is the
    SERVER_PROTOCOL sent, None for none."""
    pairs = [(name, value) for name, value in request_pairs(uri, method, body, **kw)
             if name not in ('SCGI', 'SERVER_PROTOCOL')]
    if protocol is not None:
        pairs.append(('SERVER_PROTOCOL', protocol))
    return encode_request(pairs, body)


def parse_response(raw, version=b'HTTP/1.1'):
    """(status bytes, [(name, value)], body) of an HTTP response starting ``version``."""
    head, sep, body = raw.partition(b'\r\n\r\n')
    assert sep, 'no end of headers in %r' % raw[:200]
    lines = head.split(b'\r\n')
    first, _, status = lines[0].partition(b' ')
    assert first == version, lines[0]
    return status, [tuple(line.split(b': ', 1)) for line in lines[1:]], body
