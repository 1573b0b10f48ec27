"""wsgi.input for every protocol: a pull-based, bounded stream, and the spool that holds a body
read ahead of the app (multiplexed FastCGI).

The stream knows no protocol: it calls ``pull()`` for the next chunk only when the app reads,
and ``pull()`` returns ``b''`` at the end of the body (the protocol bounds it: end of FastCGI
STDIN, CONTENT_LENGTH for SCGI and AJP). ``flupfast._speedups.InputStream`` is the compiled twin.
"""
import collections
import tempfile
import threading

from flupfast.limits import INPUT_COMPACT_THRESHOLD, SPOOL_MEMORY_LIMIT


class ClientDisconnected(ConnectionError):
    """The web server closed the connection before the whole request body arrived."""


class InputStream:
    """A file-like, read-only request body that pulls data on demand.

    ``read``, ``readline`` and iteration are linear in the bytes returned: the buffer is a
    ``bytearray`` compacted only past a threshold, and ``readline`` never rescans what it
    already searched (flup's is quadratic on long lines). ``readline(size)`` returns at most
    ``size`` bytes and ``read(None)`` reads everything (both differ from flup, which breaks
    there).
    """

    def __init__(self, pull):
        self._pull = pull
        self._buf = bytearray()
        self._pos = 0
        self._eof = False
        self.bytes_read = 0  # handed to the app so far

    # -- internals --------------------------------------------------------------------------

    def _fill(self):
        """Append one more chunk; returns False at the end of the body."""
        if self._eof:
            return False
        chunk = self._pull()
        if not chunk:
            self._eof = True
            return False
        self._buf += chunk
        return True

    def _take(self, end):
        data = bytes(self._buf[self._pos:end])
        self._pos = end
        self.bytes_read += len(data)
        if self._pos == len(self._buf):
            # Everything handed out: reuse the buffer from its start without a memmove.
            self._pos = 0
            del self._buf[:]
        elif self._pos >= INPUT_COMPACT_THRESHOLD and self._pos * 2 >= len(self._buf):
            # Only here, between calls, where no caller holds an offset into the buffer.
            del self._buf[:self._pos]
            self._pos = 0
        return data

    # -- the file API -----------------------------------------------------------------------

    def read(self, size=-1):
        if size is None or size < 0:
            while self._fill():
                pass
            return self._take(len(self._buf))
        want = self._pos + size
        while len(self._buf) < want and self._fill():
            pass
        return self._take(min(want, len(self._buf)))

    def readline(self, size=-1):
        if size is None:
            size = -1
        if size == 0:
            return b''
        scan = self._pos
        while True:
            end = len(self._buf)
            limit = end if size < 0 else min(end, self._pos + size)
            found = self._buf.find(b'\n', scan, limit)
            if found >= 0:
                return self._take(found + 1)
            if size >= 0 and limit - self._pos >= size:
                return self._take(limit)
            scan = end
            if not self._fill():
                return self._take(len(self._buf))

    def readlines(self, hint=-1):
        if hint is None or hint <= 0:
            return list(self)
        lines = []
        total = 0
        while total < hint:
            line = self.readline()
            if not line:
                break
            lines.append(line)
            total += len(line)
        return lines

    def __iter__(self):
        return self

    def __next__(self):
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def readable(self):
        return True

    def close(self):
        """WSGI allows the app to close wsgi.input; the server still drains the rest."""

    def drain(self):
        """Discard the rest of the body (before a connection is reused); returns its size."""
        drained = len(self._buf) - self._pos
        del self._buf[:]
        self._pos = 0
        while not self._eof:
            chunk = self._pull()
            if not chunk:
                self._eof = True
            else:
                drained += len(chunk)
        return drained

    @property
    def at_eof(self):
        """True once the end of the body has been pulled."""
        return self._eof


class Spool:
    """A body pushed by one thread and pulled by another, held in memory up to
    ``memory_limit`` bytes and in an anonymous temporary file beyond (waitress's buffers).

    ``pull`` blocks until data or the end arrives; ``abort`` wakes it with ClientDisconnected.
    """

    def __init__(self, memory_limit=SPOOL_MEMORY_LIMIT, chunk_size=65536):
        self._memory_limit = memory_limit
        self._chunk_size = chunk_size
        self._chunks = collections.deque()  # in-memory chunks, oldest first
        self._memory = 0
        self._file = None       # temporary file once memory_limit is passed
        self._file_read = 0     # read offset in the file
        self._file_size = 0
        self._ended = False
        self._error = None
        self._cond = threading.Condition()

    def push(self, data):
        if not data:
            return
        with self._cond:
            if self._file is None and self._memory + len(data) > self._memory_limit:
                self._file = tempfile.TemporaryFile(prefix='flupfast-body-')
            if self._file is not None:
                self._file.seek(self._file_size)
                self._file.write(data)
                self._file_size += len(data)
            else:
                self._chunks.append(bytes(data))
                self._memory += len(data)
            self._cond.notify()

    def end(self):
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def abort(self, reason='the web server closed the connection mid-body'):
        with self._cond:
            self._error = reason
            self._cond.notify_all()

    def pull(self):
        with self._cond:
            while True:
                if self._chunks:
                    chunk = self._chunks.popleft()
                    self._memory -= len(chunk)
                    return chunk
                if self._file is not None and self._file_read < self._file_size:
                    self._file.seek(self._file_read)
                    chunk = self._file.read(self._chunk_size)
                    self._file_read += len(chunk)
                    return chunk
                if self._ended:
                    return b''
                if self._error is not None:
                    raise ClientDisconnected(self._error)
                self._cond.wait()

    @property
    def memory_used(self):
        return self._memory

    def close(self):
        with self._cond:
            if self._file is not None:
                self._file.close()
                self._file = None
            self._chunks.clear()
            self._memory = 0
