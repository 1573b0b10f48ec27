"""SCGI's wsgi.input, the one twin that is a choice of stream rather than a compiled class:
the compiled backend's InputStream pulling the body from the socket (``open_streamed``), or,
in pure Python, C's ``io.BufferedReader`` over a raw body stream (``open_buffered``), which
beats a Python readline. Both stop at CONTENT_LENGTH. _impl picks one.
"""
import io

from flupfast.body import ClientDisconnected

# The pure body's buffer: one receive takes a typical form post whole.
BUFFER_SIZE = 32768


class BodySource:
    """``pull()`` for wsgi.input: the body bytes that came with the header, then the socket,
    never past CONTENT_LENGTH (flup hands the app the raw socket, where a read past the body
    waits for the web server to give up)."""

    __slots__ = ('_conn', '_first', 'left')

    def __init__(self, conn, first, content_length):
        self._conn = conn
        self._first = first
        self.left = content_length - len(first)

    def __call__(self):
        first = self._first
        if first:
            self._first = None
            return first
        if self.left <= 0:
            return b''
        data = self._conn.recv_some(self.left)
        if not data:
            raise ClientDisconnected('the web server closed the connection with %d bytes of '
                                     'the body (CONTENT_LENGTH) still to come' % self.left)
        self.left -= len(data)
        return bytes(data)


class RawBody(io.RawIOBase):
    """The body as a raw stream for the pure backend's wsgi.input: ``readinto`` receives
    straight into the caller's buffer, never past CONTENT_LENGTH. Under ``BufferedBody``
    (C ``io.BufferedReader``, what flup hands the app) ``readline`` and ``read`` run in C."""

    def __init__(self, conn, first, content_length):
        self._conn = conn
        self._first = first
        self._offset = 0
        self.left = content_length - len(first)

    def readable(self):
        return True

    def readinto(self, buffer):
        first = self._first
        if first:
            n = min(len(buffer), len(first) - self._offset)
            buffer[:n] = first[self._offset:self._offset + n]
            self._offset += n
            if self._offset == len(first):
                self._first = None
            return n
        if self.left <= 0:
            return 0
        view = memoryview(buffer)
        if len(view) > self.left:
            view = view[:self.left]
        n = self._conn._sock.recv_into(view)
        if not n:
            raise ClientDisconnected('the web server closed the connection with %d bytes of '
                                     'the body (CONTENT_LENGTH) still to come' % self.left)
        self.left -= n
        return n


class BufferedBody(io.BufferedReader):
    """wsgi.input of the pure backend: closing it (WSGI allows that) leaves it readable,
    as the compiled stream does."""

    def close(self):
        pass


def open_streamed(input_stream_class, body_source_class=BodySource):
    """``open_body`` over ``input_stream_class`` (the compiled InputStream) pulling from
    ``body_source_class`` (this BodySource or its compiled twin)."""
    def open_body(conn, first, content_length):
        """(the body source, which counts what is ``left``; the app's wsgi.input)"""
        source = body_source_class(conn, first, content_length)
        return source, input_stream_class(source)
    return open_body


def open_buffered(conn, first, content_length):
    """``open_body`` of the pure backend: (the raw body, which counts what is ``left``; the
    app's wsgi.input)."""
    raw = RawBody(conn, first, content_length)
    return raw, BufferedBody(raw, BUFFER_SIZE)
