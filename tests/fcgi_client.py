"""A small FastCGI client for tests and benchmarks: builds the records a web server sends and
reads the answer back into stdout, stderr and the END_REQUEST status.
"""
import socket
import struct
import weakref

from flupfast.protocols import fastcgi as f

DEFAULT_PARAMS = {
    'REQUEST_METHOD': 'GET', 'SERVER_NAME': 'localhost', 'SERVER_PORT': '80',
    'SERVER_PROTOCOL': 'HTTP/1.1', 'SCRIPT_NAME': '', 'REMOTE_ADDR': '127.0.0.1',
}


def request_bytes(uri='/', params=None, body=b'', request_id=1, keep_conn=False,
                  role=f.FCGI_RESPONDER, method=None, stdin_record=65528, split=False):
    """The records of one request; with ``split``, (BEGIN+PARAMS, STDIN records) apart."""
    env = dict(DEFAULT_PARAMS)
    path, _, query = uri.partition('?')
    env.update(REQUEST_URI=uri, QUERY_STRING=query, DOCUMENT_URI=path)
    if method:
        env['REQUEST_METHOD'] = method
    if body:
        env.setdefault('REQUEST_METHOD', 'POST')
        env['CONTENT_LENGTH'] = str(len(body))
    env.update(params or {})
    out = [f.encode_begin_request(request_id, role, f.FCGI_KEEP_CONN if keep_conn else 0),
           f.encode_stream(f.FCGI_PARAMS, request_id, f.encode_params(env.items()))]
    view = memoryview(body)
    for i in range(0, len(view), stdin_record):
        out.append(f.encode_record(f.FCGI_STDIN, request_id, view[i:i + stdin_record]))
    out.append(f.encode_record(f.FCGI_STDIN, request_id))
    if split:
        return out[0] + out[1], b''.join(out[2:])
    return b''.join(out)


class Response:
    def __init__(self):
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.end = None        # (app_status, protocol_status)
        self.records = []      # record types in order
        self.other = []        # management answers

    @property
    def head(self):
        return bytes(self.stdout).split(b'\r\n\r\n', 1)[0]

    @property
    def body(self):
        return bytes(self.stdout).split(b'\r\n\r\n', 1)[1]

    @property
    def status(self):
        first = self.head.split(b'\r\n', 1)[0]
        assert first.startswith(b'Status: '), first
        return int(first[8:11])

    def header(self, name):
        for line in self.head.split(b'\r\n')[1:]:
            key, _, value = line.partition(b': ')
            if key.lower() == name.lower().encode():
                return value.decode('latin-1')
        return None


# Records read past one response's END_REQUEST, kept for the next read on the same socket.
_leftover = weakref.WeakKeyDictionary()


def read_response(sock, request_id=1, timeout=10.0):
    """Read records until END_REQUEST for ``request_id`` (or EOF; then ``end`` is None)."""
    sock.settimeout(timeout)
    parser, pending = _leftover.pop(sock, (f.FastCGIParser(), []))
    resp = Response()
    while True:
        while pending:
            kind, rid, payload = pending.pop(0)
            resp.records.append(kind)
            if kind == f.FCGI_STDOUT and rid == request_id:
                resp.stdout += payload
            elif kind == f.FCGI_STDERR and rid == request_id:
                resp.stderr += payload
            elif kind == f.FCGI_END_REQUEST and rid == request_id:
                resp.end = struct.unpack('!LB3x', payload)
                _leftover[sock] = (parser, pending)
                return resp
            else:
                resp.other.append((kind, rid, payload))
        data = sock.recv(1 << 20)
        if not data:
            return resp
        pending = _parse_answers(parser, data)


def _parse_answers(parser, data):
    # The parser only reports STDIN/DATA payloads; answers (STDOUT, STDERR, END_REQUEST...)
    # come back as "unknown" types with raw content, which is what we want here.
    return parser.feed(data)


def roundtrip(address, uri='/', **kw):
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(address)
        sock.sendall(request_bytes(uri, **kw))
        return read_response(sock, kw.get('request_id', 1))
