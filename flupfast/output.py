"""Response bytes on the wire: the CGI-style header block and its responder (FastCGI, SCGI;
uwsgi's HTTP head is the same block behind a status line), and the one helper that sends a
list of buffers without copying them.

No WSGI logic here (that is gateway.py) and no protocol framing (that is in the codecs).
``PartsWriter`` and ``send_buffers`` have compiled twins (_cython/output.pxi): the streams
subclass _impl's PartsWriter.
"""
import io
import os
import socket
import stat

from flupfast.limits import MAX_IOVECS

# A first body chunk up to this size is copied behind the header block (one buffer, one
# record); a bigger one is framed on its own, never copied.
JOIN_HEAD_LIMIT = 4096


# What starts a CGI-style header block (FastCGI, SCGI, CGI); uwsgi's starts with the HTTP
# status line's version instead (``HTTP/1.1 ``: nginx and Apache parse it as from HTTP).
CGI_STATUS_PREFIX = b'Status: '


def build_cgi_head(status, headers, status_prefix=CGI_STATUS_PREFIX):
    """``Status: <status>\\r\\n`` + ``Name: value\\r\\n``... + ``\\r\\n`` (flup's
    fcgi_base.py:1124); with ``status_prefix`` ``HTTP/1.1 ``, an HTTP response head.

    ``status`` and the header names and values are bytes; order and case are kept.
    """
    parts = [status_prefix, status, b'\r\n']
    for name, value in headers:
        parts += (name, b': ', value, b'\r\n')
    parts.append(b'\r\n')
    return b''.join(parts)


# The answer to a request refused because every worker is busy and the queue is full (FastCGI
# sends it before END_REQUEST FCGI_OVERLOADED, SCGI alone; AJP sends the same status and body).
OVERLOADED_STATUS = 503
OVERLOADED_REASON = b'Service Unavailable'
OVERLOADED_HEADERS = [(b'Content-Type', b'text/plain'), (b'Retry-After', b'1')]
OVERLOADED_BODY = b'503 Service Unavailable: the server is overloaded, retry later.\n'


def overloaded_response(status_prefix=CGI_STATUS_PREFIX):
    """The whole 503 answer, head and body, as a CGI-style block (or an HTTP response)."""
    return build_cgi_head(b'%d %s' % (OVERLOADED_STATUS, OVERLOADED_REASON), OVERLOADED_HEADERS,
                          status_prefix) + OVERLOADED_BODY


OVERLOADED_CGI_RESPONSE = overloaded_response()


class PartsWriter:
    """The response streams (FastCGI's STDOUT, SCGI's raw socket, plain CGI's stdout), once,
    over their ``write_parts(parts, hold=False)``: the file-like ``write``/``writelines``, and
    the gateway's responder for CGI-style protocols (``run_application`` is given the stream
    itself, so no responder object is built per request): a ``Status:`` header block (uwsgi:
    an HTTP status line, by ``status_prefix``), then the body, on one byte stream; headers
    and the first body bytes leave in one send. ``STR_ENCODING`` is how each encodes a str,
    as flup's stream for that protocol does."""

    __slots__ = ()
    STR_ENCODING = 'latin-1'
    status_prefix = CGI_STATUS_PREFIX

    def write(self, data):
        if isinstance(data, str):
            data = data.encode(self.STR_ENCODING)
        self.write_parts((data,))

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    # -- the responder (gateway.Response's other side) ---------------------------------------

    def send_head(self, status, headers, data, more):
        head = build_cgi_head(status, headers, self.status_prefix)
        if len(data) <= JOIN_HEAD_LIMIT:
            # One part, so one record: joining a small body costs less than framing it apart.
            self.write_parts((head + data,), more)
        else:
            self.write_parts((head, data), more)

    def send_body(self, data, more):
        self.write_parts((data,), more)

    def can_send_file(self, filelike):
        """True when ``send_file`` can hand ``filelike`` to the kernel (SCGI's raw socket)."""
        return False


def send_buffers(sock, buffers):
    """Send every buffer in order with as few syscalls as possible (``sendmsg`` gathers up to
    MAX_IOVECS of them). Partial sends resume where the kernel stopped, by memoryview slicing,
    never by copying what is left (flup's ``data = data[sent:]`` is quadratic).
    """
    sendmsg = sock.sendmsg
    index = 0
    count = len(buffers)
    while index < count:
        batch = buffers[index:index + MAX_IOVECS]
        sent = sendmsg(batch)
        # Skip the buffers sent whole; resume inside a partly sent one.
        for buf in batch:
            size = len(buf)
            if sent >= size:
                sent -= size
                index += 1
                continue
            if sent:
                buffers[index] = memoryview(buf)[sent:]
            break


# What open(path, 'rb') (or 'r+b', or buffering=0) gives: sendfile sends from the descriptor
# what these would read.
_SENDFILE_TYPES = (io.BufferedReader, io.BufferedRandom, io.FileIO)


def is_regular_file(filelike):
    """True when ``socket.sendfile`` sends what iterating ``filelike`` would: a binary file
    opened for reading on a regular file with bytes left. It sends from the descriptor, so an
    object that reads otherwise (a reader limited to a range, a decompressing file, a wrapper
    passing ``fileno`` through) is iterated, as is a file whose size says nothing (/proc)."""
    if type(filelike) not in _SENDFILE_TYPES:
        return False
    try:
        if not filelike.readable():
            return False
        st = os.fstat(filelike.fileno())
        return stat.S_ISREG(st.st_mode) and st.st_size > filelike.tell()
    except (AttributeError, OSError, ValueError):  # closed, or not a real file
        return False


def shutdown_quietly(sock, how=socket.SHUT_WR):
    try:
        sock.shutdown(how)
    except OSError:
        pass
