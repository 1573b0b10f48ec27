"""A FastCGI request's streams (spec 5.3): STDOUT and STDERR framed as records, and
``RequestIO``, all they share with their connection (a non-multiplexed STDIN/DATA pulls through
the connection's ``_pull``). The connection builds them (fastcgi_connection.py); nothing here
refers to a request or a socket.
"""
from flupfast import _impl
from flupfast.protocols import fastcgi as fcgi


class RequestIO:
    """What one request's streams share with its connection: the request id, whether the web
    server aborted it, its input not yet read and which input streams have ended. Nothing here
    leads back to the request, which holds its streams: request, streams and connection are
    freed by reference counting when the request ends (no weak reference, no cycle to break).
    """

    __slots__ = ('request_id', 'aborted', 'pending', 'ended', 'settled')

    def __init__(self, request_id=None):
        self.request_id = request_id
        self.aborted = False
        # False while a pull reads and dispatches records: the request timeout raises
        # wherever the app's thread is, and a pull it cuts short may have dropped bytes the
        # parser never saw. The connection's records are then unknown: it is not kept.
        self.settled = True
        # stream type -> input not yet read: deques filled by the request's thread, or, when
        # multiplexed, spools filled by the connection's reading thread; None once it ended.
        self.pending = None
        self.ended = {fcgi.FCGI_STDIN: False, fcgi.FCGI_DATA: False}


class StdoutStream(_impl.PartsWriter):
    """FCGI_STDOUT of one request (flup's ``OutputStream``): ``write`` frames bytes as records
    and sends them; ``close`` ends the stream with an empty record if anything was written.
    """

    record_type = fcgi.FCGI_STDOUT
    STR_ENCODING = 'utf-8'  # as flup's fcgi_base OutputStream

    def __init__(self, conn, io):
        self._conn = conn
        self._io = io
        self.dataWritten = False
        self.closed = False

    def write_parts(self, parts, hold=False):
        io = self._io
        if io.aborted:
            return  # the web server gave up on this request: nothing reads the bytes
        buffers = []
        for part in parts:
            if part:
                buffers += _impl.frame_stdout(io.request_id, part, self._conn.max_content,
                                              self.record_type)
        if buffers:
            self.dataWritten = True
            self._conn.send(buffers, hold and not self._conn.multiplexed)

    def flush(self):
        self._conn.send([])

    def end_buffers(self):
        """The buffers that close the stream (empty if nothing was ever written)."""
        if self.closed:
            return []
        self.closed = True
        if not self.dataWritten:
            return []
        return [fcgi.encode_record(self.record_type, self._io.request_id)]

    def close(self):
        self._conn.send(self.end_buffers())


class StderrStream(StdoutStream):
    """FCGI_STDERR (``wsgi.errors``): held in memory until flushed or the request ends, as
    flup's buffered stream; str is encoded UTF-8 as flup does.
    """

    record_type = fcgi.FCGI_STDERR
    # Nothing held: a list once something is (no __init__ of its own: one per request).
    _held = ()

    def write(self, data):
        if isinstance(data, str):
            data = data.encode('utf-8')
        if data:
            if self._held:
                self._held.append(bytes(data))
            else:
                self._held = [bytes(data)]

    def flush(self):
        if self._held:
            held, self._held = self._held, ()
            self.write_parts((b''.join(held),))

    def end_buffers(self):
        buffers = []
        io = self._io
        if self._held and not io.aborted:
            held, self._held = self._held, ()
            buffers = _impl.frame_stdout(io.request_id, b''.join(held),
                                         self._conn.max_content, self.record_type)
            self.dataWritten = True
        return buffers + super().end_buffers()


# request id -> the empty FCGI_STDOUT record and END_REQUEST (app status 0, REQUEST_COMPLETE)
# that end a request with output and no stderr; web servers reuse a few small ids (nginx: 1).
_completed = {}
_COMPLETED_MAX_ID = 64


def _completed_records(request_id):
    records = _completed.get(request_id)
    if records is None:
        records = (fcgi.encode_record(fcgi.FCGI_STDOUT, request_id)
                   + fcgi.encode_end_request(request_id, 0, fcgi.FCGI_REQUEST_COMPLETE))
        if request_id <= _COMPLETED_MAX_ID:
            _completed[request_id] = records
    return records

