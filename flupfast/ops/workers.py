"""The status page's per-worker slots (PHP-FPM's scoreboard procs) and pool counters: in fork
mode fixed-size records in memory shared by the parent and its children, in thread and single
mode one record per thread in the process. Each worker writes only its own slot.

A request writes a few integers and bounded copies of its method and URI at its start and end
(the gateway's request observer); readers (the status request, the fork parent's tick) copy
the slots without a lock, as a torn read only shows a stale field. Nothing here knows a
protocol or renders a page (ops/status.py does).
"""
import mmap
import os
import resource
import socket
import struct
import sys
import threading
import time

__all__ = ['IDLE', 'RUNNING', 'PreforkWorkers', 'ThreadWorkers', 'listen_queue']

# PHP-FPM's state names (fpm_request_get_stage_name) for the two stages a WSGI worker has: it
# waits for a request, or runs one (reading the body and sending the answer included).
IDLE = 'Idle'
RUNNING = 'Running'
_EMPTY, _IDLE, _RUNNING = 0, 1, 2
_STATE_NAMES = {_IDLE: IDLE, _RUNNING: RUNNING}

# Bounded copies, as PHP-FPM's fixed-size proc fields: longer values are cut, never grown.
METHOD_BYTES = 16      # the longest standard method is 7; extension methods are short
URI_BYTES = 512        # REQUEST_URI with its query, enough to tell requests apart
USER_BYTES = 32        # REMOTE_USER
SCRIPT_BYTES = 256     # SCRIPT_FILENAME (or SCRIPT_NAME)

# One shared slot (fork mode): written by the parent at spawn, by the child per request.
#   0  pid, process start (epoch seconds)             parent, at spawn
#   16 state byte                                     child, last
#   24 request start (monotonic), content length,
#      method, uri, user, script                      child, at request start
#   24+BEGIN: requests, duration (us), cpu (%),
#      memory (bytes), slow requests                  child, at request end
_PROCESS = struct.Struct('=qd')
_STATE_AT = _PROCESS.size
_BEGIN_AT = 24
_BEGIN = struct.Struct('=dq%ds%ds%ds%ds' % (METHOD_BYTES, URI_BYTES, USER_BYTES, SCRIPT_BYTES))
_END_AT = _BEGIN_AT + _BEGIN.size
_END = struct.Struct('=QQdQQ')
SLOT_SIZE = (_END_AT + _END.size + 63) & ~63
# The pool's counters ahead of the slots, written by the fork parent only: requests and slow
# requests of children already reaped, max active processes, max children reached, max
# listen queue.
_HEADER = struct.Struct('=QQQQQ')
HEADER_SIZE = 64

_TCP_INFO = getattr(socket, 'TCP_INFO', None)
# struct tcp_info (linux/tcp.h): eight one-byte fields, then u32 rto, ato, snd_mss, rcv_mss,
# unacked, sacked. On a listening socket the kernel reports the accept queue's length in
# tcpi_unacked and its limit (the listen() backlog) in tcpi_sacked.
_TCP_INFO_QUEUE = struct.Struct('=II')
_TCP_INFO_QUEUE_AT = 24


def listen_queue(sock):
    """(connections waiting in ``sock``'s accept queue, the queue's limit), as PHP-FPM reads
    them (TCP_INFO, Linux). (0, 0) where that cannot be read: a Unix socket (PHP-FPM reports
    0 for those too), no socket, or a system without TCP_INFO."""
    if sock is None or _TCP_INFO is None or sock.family not in (socket.AF_INET,
                                                                  socket.AF_INET6):
        return 0, 0
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 104)
    except OSError:
        return 0, 0
    if len(info) < _TCP_INFO_QUEUE_AT + _TCP_INFO_QUEUE.size:
        return 0, 0
    return _TCP_INFO_QUEUE.unpack_from(info, _TCP_INFO_QUEUE_AT)


def _text(environ, name, size):
    value = environ.get(name)
    if not value:
        return b''
    return value.encode('latin-1', 'replace')[:size]


def _request_uri(environ):
    uri = environ.get('REQUEST_URI')
    if uri:
        return uri
    query = environ.get('QUERY_STRING')
    path = environ.get('SCRIPT_NAME', '') + environ.get('PATH_INFO', '')
    return path + '?' + query if query else path


def _content_length(environ):
    try:
        return int(environ.get('CONTENT_LENGTH') or 0)
    except ValueError:
        return 0


def _memory():
    """The process's peak resident size in bytes (PHP-FPM: the request's peak memory)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == 'darwin' else peak * 1024


def _decode(raw):
    return raw.rstrip(b'\0').decode('latin-1')


class _Counters:
    """What the pool's fields are computed from, gathered by a board's ``snapshot``."""

    def __init__(self):
        self.accepted = self.slow = self.active = self.idle = 0
        self.max_active = self.max_children_reached = self.max_listen_queue = 0
        self.processes = []


class _Board:
    """What both boards share: the pool's description, the listening socket, the slow log,
    the sampled maxima, and the request observer's shape (``begin``/``end``)."""

    process_manager = 'dynamic'

    def __init__(self, process_manager):
        self.process_manager = process_manager
        self.start_time = time.time()
        self.listen_sock = None
        self.slow_log = None

    def listen_queue(self):
        return listen_queue(self.listen_sock)


class PreforkWorkers(_Board):
    """Fork mode: ``max_children`` slots in an anonymous shared mapping made before the first
    fork. The arbiter calls ``prepare``/``reaped`` (parent) and ``attach`` (in the child)
    with the child's scoreboard slot, and ``sample`` on its tick (PHP-FPM's maintenance: max
    active processes, max children reached, max listen queue)."""

    def __init__(self, max_children, min_spare, process_manager='dynamic'):
        super().__init__(process_manager)
        self.max_children = max_children
        self.min_spare = min_spare
        self.memory = mmap.mmap(-1, HEADER_SIZE + SLOT_SIZE * max_children)
        self._offset = None     # in a child: its slot's offset
        self._requests = 0      # in a child: requests it has ended
        self._reached = False   # the parent's "at max children" episode flag

    # -- the parent ----------------------------------------------------------------------

    def prepare(self, slot):
        """Before the fork: a fresh slot, idle (the child writes its pid)."""
        offset = HEADER_SIZE + SLOT_SIZE * slot
        self.memory[offset:offset + SLOT_SIZE] = bytes(SLOT_SIZE)
        _PROCESS.pack_into(self.memory, offset, 0, time.time())
        self.memory[offset + _STATE_AT] = _IDLE

    def reaped(self, slot):
        """Fold a gone child's counts into the pool's and free its slot."""
        offset = HEADER_SIZE + SLOT_SIZE * slot
        requests, _, _, _, slow = _END.unpack_from(self.memory, offset + _END_AT)
        header = list(_HEADER.unpack_from(self.memory, 0))
        header[0] += requests
        header[1] += slow
        _HEADER.pack_into(self.memory, 0, *header)
        self.memory[offset:offset + SLOT_SIZE] = bytes(SLOT_SIZE)

    def sample(self):
        """The parent's periodic look: raise the maxima, count a new "max children reached"
        episode (all ``max_children`` running with fewer than ``min_spare`` idle, counted once
        until it ends, as PHP-FPM's pm.max_children warning)."""
        total = active = 0
        memory = self.memory
        for slot in range(self.max_children):
            state = memory[HEADER_SIZE + SLOT_SIZE * slot + _STATE_AT]
            if state:
                total += 1
                active += state == _RUNNING
        header = list(_HEADER.unpack_from(memory, 0))
        reached = total >= self.max_children and total - active < self.min_spare
        if reached and not self._reached:
            header[3] += 1
        self._reached = reached
        header[2] = max(header[2], active)
        header[4] = max(header[4], self.listen_queue()[0])
        _HEADER.pack_into(memory, 0, *header)

    # -- the child -----------------------------------------------------------------------

    def attach(self, slot):
        """In a new child: write to ``slot`` from now on (None: no slot, write nothing)."""
        self._offset = None if slot is None else HEADER_SIZE + SLOT_SIZE * slot
        self._requests = 0
        if self._offset is not None:
            _PROCESS.pack_into(self.memory, self._offset, os.getpid(), time.time())

    def begin(self, environ):
        offset = self._offset
        if offset is None:
            return None
        memory = self.memory
        _BEGIN.pack_into(memory, offset + _BEGIN_AT, time.monotonic(),
                         _content_length(environ),
                         _text(environ, 'REQUEST_METHOD', METHOD_BYTES),
                         _request_uri(environ).encode('latin-1', 'replace')[:URI_BYTES],
                         _text(environ, 'REMOTE_USER', USER_BYTES),
                         _text(environ, 'SCRIPT_FILENAME', SCRIPT_BYTES))
        memory[offset + _STATE_AT] = _RUNNING
        return time.process_time()

    def end(self, cpu_start, response, failed):
        offset = self._offset
        if offset is None:
            return
        memory = self.memory
        started = _BEGIN.unpack_from(memory, offset + _BEGIN_AT)[0]
        duration = time.monotonic() - started
        cpu = time.process_time() - cpu_start
        self._requests += 1
        slow = self.slow_log.slow_requests if self.slow_log is not None else 0
        _END.pack_into(memory, offset + _END_AT, self._requests, int(duration * 1e6),
                       cpu * 100.0 / duration if duration > 0 else 0.0, _memory(), slow)
        memory[offset + _STATE_AT] = _IDLE

    def on_slow(self, count):
        """The slow log's count in this child, written as soon as it changes."""
        offset = self._offset
        if offset is not None:
            struct.pack_into('=Q', self.memory, offset + _END_AT + 32, count)

    # -- readers -------------------------------------------------------------------------

    def snapshot(self):
        """Copy the board: pool counters and one entry per child."""
        memory = self.memory
        counters = _Counters()
        now, mono = time.time(), time.monotonic()
        retired, retired_slow, max_active, reached, max_lq = _HEADER.unpack_from(memory, 0)
        counters.accepted, counters.slow = retired, retired_slow
        for slot in range(self.max_children):
            offset = HEADER_SIZE + SLOT_SIZE * slot
            state = memory[offset + _STATE_AT]
            if not state:
                continue
            pid, started = _PROCESS.unpack_from(memory, offset)
            begin = _BEGIN.unpack_from(memory, offset + _BEGIN_AT)
            requests, duration, cpu, mem, slow = _END.unpack_from(memory, offset + _END_AT)
            counters.slow += slow
            counters.accepted += requests
            entry = _entry(pid, state, started, now, mono, begin, requests, duration, cpu, mem)
            if state == _RUNNING:
                counters.accepted += 1  # counted when accepted, as PHP-FPM
                counters.active += 1
            else:
                counters.idle += 1
            counters.processes.append(entry)
        counters.max_active = max(max_active, counters.active)
        counters.max_children_reached = reached
        counters.max_listen_queue = max_lq
        return counters


def _entry(pid, state, started, now, mono, begin, requests, duration, cpu, memory):
    """One process entry in PHP-FPM's order and units: a running request's duration so far,
    an idle worker's last request's; cpu and memory of the last request, 0 while running."""
    accepted, length, method, uri, user, script = begin
    running = state == _RUNNING
    return {
        'pid': pid,
        'state': _STATE_NAMES.get(state, IDLE),
        'start time': int(started),
        'start since': max(0, int(now - started)),
        'requests': requests,
        'request duration': int((mono - accepted) * 1e6) if running else duration,
        'request method': _decode(method) or '-',
        'request uri': _decode(uri) or '-',
        'content length': length,
        'user': _decode(user) or '-',
        'script': _decode(script) or '-',
        'last request cpu': 0.0 if running else cpu,
        'last request memory': 0 if running else memory,
    }


class _ThreadSlot:
    """One thread's record (thread and single mode); only its thread writes it."""
    __slots__ = ('thread', 'started', 'state', 'requests', 'accepted', 'length', 'method',
                 'uri', 'user', 'script', 'duration', 'cpu', 'memory')

    def __init__(self, thread, started):
        self.thread = thread
        self.started = started
        self.state = _IDLE
        self.requests = self.length = self.duration = self.memory = 0
        self.accepted = self.cpu = 0.0
        self.method = self.uri = self.user = self.script = b''


class ThreadWorkers(_Board):
    """Thread and single mode: a slot per thread that serves requests, found through a
    thread-local; ``pool`` (a ThreadPool, or None in single mode) lists the threads that
    have served nothing yet. ``start_sampler`` runs PHP-FPM's once-a-second maintenance look in
    a daemon thread."""

    def __init__(self, pool=None, max_workers=1, process_manager='dynamic'):
        super().__init__(process_manager)
        self.pool = pool
        self.max_workers = max_workers
        self._local = threading.local()
        self._slots = {}          # thread -> _ThreadSlot
        self._seen = {}           # pool thread -> when first seen (its start time, to 1 s)
        self._lock = threading.Lock()
        self._retired = [0]       # requests of threads gone
        self._max_active = 0
        self._max_listen_queue = 0
        self._reached = 0
        self._in_reached = False
        self._sampler = None

    def _slot(self):
        thread = threading.current_thread()
        slot = _ThreadSlot(thread, self._seen.get(thread) or time.time())
        with self._lock:
            self._slots[thread] = slot
        self._local.slot = slot
        return slot

    def begin(self, environ):
        try:
            slot = self._local.slot
        except AttributeError:
            slot = self._slot()
        slot.accepted = time.monotonic()
        slot.length = _content_length(environ)
        slot.method = _text(environ, 'REQUEST_METHOD', METHOD_BYTES)
        slot.uri = _request_uri(environ).encode('latin-1', 'replace')[:URI_BYTES]
        slot.user = _text(environ, 'REMOTE_USER', USER_BYTES)
        slot.script = _text(environ, 'SCRIPT_FILENAME', SCRIPT_BYTES)
        slot.state = _RUNNING
        return time.thread_time()

    def end(self, cpu_start, response, failed):
        slot = self._local.slot
        duration = time.monotonic() - slot.accepted
        slot.duration = int(duration * 1e6)
        slot.cpu = (time.thread_time() - cpu_start) * 100.0 / duration if duration > 0 else 0.0
        slot.memory = _memory()
        slot.requests += 1
        slot.state = _IDLE

    def _threads(self):
        """(thread, slot or None) for each worker thread alive; slots of gone threads are
        folded into the pool's counts."""
        with self._lock:
            for thread in [t for t in self._slots if not t.is_alive()]:
                self._retired[0] += self._slots.pop(thread).requests
            found = dict(self._slots)
            retired = self._retired[0]
        workers = [(thread, found.pop(thread, None)) for thread in self._pool_threads()]
        workers.extend(found.items())  # threads of no pool (a multiplexed request's)
        return retired, workers

    def _pool_threads(self):
        pool = self.pool
        if pool is None:
            return []
        with pool._cond:
            threads = sorted(pool._threads, key=lambda t: t.ident or 0)
        now = time.time()
        seen = self._seen
        for thread in threads:
            seen.setdefault(thread, now)
        if len(seen) > len(threads):
            for thread in [t for t in list(seen) if not t.is_alive()]:
                seen.pop(thread, None)
        return threads

    def sample(self):
        """Raise the maxima; count a new "max children reached" episode (every thread the pool
        may have busy)."""
        _, workers = self._threads()
        active = sum(1 for _, slot in workers if slot is not None and slot.state == _RUNNING)
        self._max_active = max(self._max_active, active)
        reached = self.pool is not None and active >= self.max_workers
        if reached and not self._in_reached:
            self._reached += 1
        self._in_reached = reached
        self._max_listen_queue = max(self._max_listen_queue, self.listen_queue()[0])
        return workers

    def start_sampler(self, interval=1.0):
        if self._sampler is not None and self._sampler.is_alive():
            return
        pid = os.getpid()

        def run():
            while os.getpid() == pid:
                time.sleep(interval)
                self.sample()
        self._sampler = threading.Thread(target=run, name='flupfast-status', daemon=True)
        self._sampler.start()

    def snapshot(self):
        workers = self.sample()
        retired, _ = self._threads()
        counters = _Counters()
        now, mono = time.time(), time.monotonic()
        counters.accepted = retired
        for thread, slot in workers:
            if slot is None:
                slot = _ThreadSlot(thread, self._seen.get(thread, self.start_time))
            counters.accepted += slot.requests + (slot.state == _RUNNING)
            if slot.state == _RUNNING:
                counters.active += 1
            else:
                counters.idle += 1
            begin = (slot.accepted, slot.length, slot.method, slot.uri, slot.user, slot.script)
            # A thread's "pid" is its kernel id (the TID ``ps -L`` and ``top -H`` show).
            counters.processes.append(_entry(
                thread.native_id or 0, slot.state, slot.started, now, mono, begin,
                slot.requests, slot.duration, slot.cpu, slot.memory))
        counters.slow = self.slow_log.slow_requests if self.slow_log is not None else 0
        counters.max_active = max(self._max_active, counters.active)
        counters.max_children_reached = self._reached
        counters.max_listen_queue = self._max_listen_queue
        return counters
