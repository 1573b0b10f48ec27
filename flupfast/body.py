"""wsgi.input for every protocol: a pull-based, bounded stream, and the spool that holds a body
read ahead of the app (multiplexed FastCGI).

The stream knows no protocol: it calls ``pull()`` for the next chunk only when the app reads,
and ``pull()`` returns ``b''`` at the end of the body (the protocol bounds it: end of FastCGI
STDIN, CONTENT_LENGTH for SCGI and AJP). ``flupfast._speedups.InputStream`` is the compiled twin.
"""
import atexit
import collections
import io
import os
import shutil
import tempfile
import threading

from flupfast.limits import SPOOL_MEMORY_LIMIT


class ClientDisconnected(ConnectionError):
    """The web server closed the connection before the whole request body arrived."""


# What a body read says after one that the request timeout (or flup's fork-mode timeout)
# cut short: the connection's framing is unknown from there, so nothing more is read.
BODY_READ_INTERRUPTED = 'the request body is read no further: a read of it was interrupted'


def _copy_into(buffer, read):
    """``readinto``: what ``read(len)`` gives, copied into ``buffer``; the count."""
    view = memoryview(buffer).cast('B')
    if view.readonly:  # refused before a byte is taken, as io.BufferedReader does
        raise TypeError('readinto() argument must be a writable bytes-like object')
    data = read(len(view))
    view[:len(data)] = data
    return len(data)


class InputStream:
    """A file-like, read-only request body that pulls data on demand.

    Unread bytes stay in the last pulled chunk (as bytes) with an offset, so a line or a read
    within one chunk costs one slice; reads that span chunks join their pieces once. Every
    method is linear in the bytes it returns (flup's ``readline`` is quadratic on long lines).
    ``readline(size)`` returns at most ``size`` bytes and ``read(None)`` reads everything
    (both differ from flup, which breaks there).
    """

    def __init__(self, pull):
        self._pull = pull
        self._chunk = b''
        self._pos = 0
        self._eof = False
        self.bytes_read = 0  # handed to the app so far

    def _keep_unread(self, parts):
        """After ``pull()`` raised mid-read: what was gathered stays unread for the next call."""
        self._chunk = b''.join(parts) + self._chunk[self._pos:]
        self._pos = 0

    def _next_chunk(self):
        """Make the next pulled chunk current; returns False at the end of the body."""
        if self._eof:
            return False
        chunk = self._pull()
        if not chunk:
            self._eof = True
            return False
        if type(chunk) is not bytes:
            chunk = bytes(chunk)  # a bytearray or view may be a reused receive buffer
        self._chunk = chunk
        self._pos = 0
        return True

    def read(self, size=-1):
        chunk = self._chunk
        pos = self._pos
        if size is None or size < 0:
            parts = [chunk[pos:]]
            self._pos = len(chunk)
            try:
                while self._next_chunk():
                    parts.append(self._chunk)
                    self._pos = len(self._chunk)
            except BaseException:
                self._keep_unread(parts)
                raise
            self._chunk = b''
            self._pos = 0
            data = b''.join(parts)
        elif pos + size <= len(chunk):
            self._pos = pos + size
            data = chunk[pos:pos + size]
        else:
            parts = [chunk[pos:]]
            need = size - (len(chunk) - pos)
            self._pos = len(chunk)
            try:
                while need > 0 and self._next_chunk():
                    chunk = self._chunk
                    if len(chunk) >= need:
                        parts.append(chunk[:need])
                        self._pos = need
                        need = 0
                    else:
                        parts.append(chunk)
                        self._pos = len(chunk)
                        need -= len(chunk)
            except BaseException:
                self._keep_unread(parts)
                raise
            data = b''.join(parts)
        self.bytes_read += len(data)
        return data

    def readline(self, size=-1):
        chunk = self._chunk
        pos = self._pos
        if size is None or size < 0:
            # The common case, kept short: an unbounded line that ends in the current chunk.
            found = chunk.find(b'\n', pos) + 1
            if found:
                self._pos = found
                self.bytes_read += found - pos
                return chunk[pos:found]
            size = -1
        elif size == 0:
            return b''
        limit = len(chunk) if size < 0 else min(len(chunk), pos + size)
        found = chunk.find(b'\n', pos, limit)
        if found >= 0 or limit < len(chunk):
            end = found + 1 if found >= 0 else limit
            self._pos = end
            self.bytes_read += end - pos
            return chunk[pos:end]
        # The line goes on in the next chunks: search only the new bytes of each.
        parts = [chunk[pos:]]
        got = len(chunk) - pos
        self._pos = len(chunk)
        try:
            while (size < 0 or got < size) and self._next_chunk():
                chunk = self._chunk
                limit = len(chunk) if size < 0 else min(len(chunk), size - got)
                found = chunk.find(b'\n', 0, limit)
                end = found + 1 if found >= 0 else limit
                parts.append(chunk[:end])
                self._pos = end
                got += end
                if found >= 0:
                    break
        except BaseException:
            self._keep_unread(parts)
            raise
        self.bytes_read += got
        return b''.join(parts)

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

    # The rest of io.BufferedReader's reading surface, what flup's SCGI hands the app (a
    # socket's file): code that wraps wsgi.input in io.TextIOWrapper or reads into its own
    # buffer works on every protocol.

    def read1(self, size=-1):
        """At most ``size`` bytes (all of them if negative) with at most one pull."""
        if self._pos >= len(self._chunk) and (size == 0 or not self._next_chunk()):
            return b''
        chunk = self._chunk
        pos = self._pos
        end = len(chunk) if size is None or size < 0 else min(len(chunk), pos + size)
        self._pos = end
        self.bytes_read += end - pos
        return chunk[pos:end]

    def peek(self, size=0):
        """The unread bytes of the current chunk, without taking them (one pull if there
        are none); b'' at the end of the body."""
        if self._pos >= len(self._chunk) and not self._next_chunk():
            return b''
        return self._chunk[self._pos:]

    def readinto(self, buffer):
        return _copy_into(buffer, self.read)

    def readinto1(self, buffer):
        return _copy_into(buffer, self.read1)

    def readable(self):
        return True

    def writable(self):
        return False

    def seekable(self):
        return False

    def fileno(self):
        raise io.UnsupportedOperation('wsgi.input has no file descriptor')

    def flush(self):
        pass

    @property
    def closed(self):
        return False  # close() leaves the body to the server, which drains it

    def close(self):
        """WSGI allows the app to close wsgi.input; the server still drains the rest."""

    def drain(self):
        """Discard the rest of the body (before a connection is reused); returns its size."""
        drained = len(self._chunk) - self._pos
        self._chunk = b''
        self._pos = 0
        # Pulled here rather than through _next_chunk: drained bytes must never become
        # readable, even when a later pull() raises.
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


_spool_dir_lock = threading.Lock()
_spool_dir = None  # (pid, path): each process makes its own, so a forked child never shares


def _remove_spool_dir(pid, path):
    if os.getpid() == pid:  # atexit handlers are inherited by forked children: not theirs
        shutil.rmtree(path, ignore_errors=True)


def spool_directory():
    """This process's private spool directory (mode 0700, made on first use in the temp
    dir, removed at exit): request bodies never sit where another user could list or open
    them, whatever TMPDIR's permissions or the process umask."""
    global _spool_dir
    pid = os.getpid()
    with _spool_dir_lock:
        if _spool_dir is None or _spool_dir[0] != pid or not os.path.isdir(_spool_dir[1]):
            path = tempfile.mkdtemp(prefix='flupfast-spool-')  # 0700, owned by us
            atexit.register(_remove_spool_dir, pid, path)
            _spool_dir = (pid, path)
        return _spool_dir[1]


class Spool:
    """A body pushed by one thread and pulled by another, held in memory up to
    ``memory_limit`` bytes and in an anonymous temporary file beyond (waitress's buffers).
    The file is created 0600 in the private ``spool_directory()`` and has no name (unlinked
    at once, or never linked with O_TMPFILE); ``close`` (also after ``abort``) releases it.

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
        self._closed = False
        self._cond = threading.Condition()

    def push(self, data):
        if not data:
            return
        with self._cond:
            if self._closed:
                return  # the request ended: nobody will read it
            if self._file is None and self._memory + len(data) > self._memory_limit:
                self._file = tempfile.TemporaryFile(prefix='flupfast-body-',
                                                    dir=spool_directory())
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
                if self._closed:
                    raise ClientDisconnected('the request body was released')
                self._cond.wait()

    @property
    def memory_used(self):
        return self._memory

    def close(self):
        """Release the memory and the file; later pushes are dropped, a pull ends."""
        with self._cond:
            self._closed = True
            if self._file is not None:
                self._file.close()
                self._file = None
            self._chunks.clear()
            self._memory = 0
            self._cond.notify_all()
