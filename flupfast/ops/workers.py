"""The status page's per-worker slots (PHP-FPM's scoreboard procs) and pool counters: in fork
mode fixed-size records in memory shared by the parent and its children, in thread and single
mode one record per thread in the process. Each worker writes only its own slot.

A request writes a few integers and bounded copies of its method and URI at its start and end
(the gateway's request observer), with no system call: the clocks it reads are the vDSO's,
and the CPU time (a real system call) is read for one request per CPU_SAMPLE_INTERVAL.
Readers (the status request, the fork parent's tick) copy the slots without a lock, as a
torn read only shows a stale field. Nothing here knows a
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
SCRIPT_BYTES = 256     # SCRIPT_FILENAME

# One shared slot (fork mode), each part written by one side at one moment (the parent
# clears the whole slot before the fork and after the child is reaped):
#   0  pid, process start (epoch seconds)                  the child, once
#   16 state, request start (monotonic), content length,
#      method, uri, user, script (struct's 's' cuts them)  the child, at request start
#   END: requests, duration (of the last), cpu seconds     the child, at request end (then
#        and duration of the last request whose cpu was   the state byte alone)
#        read (CPU_SAMPLE_INTERVAL)
#   SLOW: slow requests                                    the child's slow log watcher
# A request pays for one pack of each of the two middle parts; what can be worked out when
# the page is read (percentages, memory) is.
_PROCESS = struct.Struct('=qd')
_STATE_AT = _PROCESS.size
_BEGIN = struct.Struct('=B7xdq%ds%ds%ds%ds' % (METHOD_BYTES, URI_BYTES, USER_BYTES,
                                               SCRIPT_BYTES))
_END_AT = _STATE_AT + _BEGIN.size
_END = struct.Struct('=Qddd')
_END_COUNT = struct.Struct('=Qd')  # a request whose cpu was not read: the count and duration
_SLOW_AT = _END_AT + _END.size
_SLOW = struct.Struct('=Q')
SLOT_SIZE = (_SLOW_AT + _SLOW.size + 63) & ~63
# The pool's counters ahead of the slots, written by the fork parent only: requests and slow
# requests of children already reaped, max active processes, max children reached, max
# listen queue; then a generation, odd while a reaped child's counts move from its slot to the
# header (a reader in a child that saw the header before the move and the slot after it would
# miss them: it reads again).
_HEADER = struct.Struct('=QQQQQQ')
_GENERATION_AT = 40
_GENERATION = struct.Struct('=Q')
HEADER_SIZE = 64
# A snapshot reads the board again at most this often while a fold goes on under it (the
# parent's fold is a few microseconds; a reader never waits for a parent that died mid-fold).
_SNAPSHOT_TRIES = 1000

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


# The CPU time is a system call (no vDSO clock gives it): read at the start and end of one
# request per this many seconds (every request when they come further apart); "last request
# cpu" is that request's, at most this much older than the last request.
CPU_SAMPLE_INTERVAL = 0.05

_monotonic = time.monotonic
_process_time = time.process_time
_thread_time = time.thread_time


def _cut(value, size):
    return (value or '').encode()[:size]


def _request_uri(environ):
    uri = environ.get('REQUEST_URI')
    if uri:
        return uri
    query = environ.get('QUERY_STRING')
    path = environ.get('SCRIPT_NAME', '') + environ.get('PATH_INFO', '')
    return path + '?' + query if query else path


def _content_length(value):
    try:
        return int(value or 0)
    except ValueError:
        return 0


def peak_memory(pid):
    """Process ``pid``'s peak resident size in bytes (VmHWM; PHP-FPM shows its request's
    peak memory), read when the page is: nothing per request. 0 where it cannot be read."""
    if pid == os.getpid():
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == 'darwin' else peak * 1024
    try:
        with open('/proc/%d/status' % pid, 'rb') as status:
            for line in status:
                if line.startswith(b'VmHWM:'):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _decode(raw):
    """A field cut at its size may end inside a character: shown replaced."""
    return raw.rstrip(b'\0').decode('utf-8', 'replace')


def _cpu_percent(cpu, duration):
    return cpu * 100.0 / duration if duration > 0 else 0.0


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


_pack_begin = _BEGIN.pack_into
_pack_end = _END.pack_into
_pack_count = _END_COUNT.pack_into


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
        self._started = 0.0     # in a child: its request's start (monotonic)
        self._next_cpu = 0.0    # in a child: when a request's cpu is read next (monotonic)
        self._reached = False   # the parent's "at max children" episode flag

    # -- the parent ----------------------------------------------------------------------

    def prepare(self, slot):
        """Before the fork: a fresh slot, idle (the child writes its pid)."""
        offset = HEADER_SIZE + SLOT_SIZE * slot
        self.memory[offset:offset + SLOT_SIZE] = bytes(SLOT_SIZE)
        _PROCESS.pack_into(self.memory, offset, 0, time.time())
        self.memory[offset + _STATE_AT] = _IDLE

    def reaped(self, slot):
        """Fold a gone child's counts into the pool's and free its slot (the generation odd
        meanwhile: see ``snapshot``)."""
        memory = self.memory
        offset = HEADER_SIZE + SLOT_SIZE * slot
        requests = _END.unpack_from(memory, offset + _END_AT)[0]
        slow = _SLOW.unpack_from(memory, offset + _SLOW_AT)[0]
        header = list(_HEADER.unpack_from(memory, 0))
        generation = header[5]
        _GENERATION.pack_into(memory, _GENERATION_AT, generation + 1)  # odd: folding
        header[0] += requests
        header[1] += slow
        header[5] = generation + 1
        _HEADER.pack_into(memory, 0, *header)
        memory[offset:offset + SLOT_SIZE] = bytes(SLOT_SIZE)
        _GENERATION.pack_into(memory, _GENERATION_AT, generation + 2)

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
        get = environ.get
        self._started = started = _monotonic()
        # Native strings are latin-1 code points (PEP 3333): encode() never fails on them.
        _pack_begin(self.memory, offset + _STATE_AT, _RUNNING, started,
                    _content_length(get('CONTENT_LENGTH')),
                    (get('REQUEST_METHOD') or '').encode(),
                    (get('REQUEST_URI') or _request_uri(environ)).encode(),
                    (get('REMOTE_USER') or '').encode(),
                    (get('SCRIPT_FILENAME') or '').encode())
        if started < self._next_cpu:
            return None
        self._next_cpu = started + CPU_SAMPLE_INTERVAL
        return _process_time()

    def end(self, cpu_start, response, failed):
        offset = self._offset
        if offset is None:
            return
        memory = self.memory
        self._requests += 1
        duration = _monotonic() - self._started
        if cpu_start is None:
            _pack_count(memory, offset + _END_AT, self._requests, duration)
        else:
            _pack_end(memory, offset + _END_AT, self._requests, duration,
                      _process_time() - cpu_start, duration)
        memory[offset + _STATE_AT] = _IDLE

    def on_slow(self, count):
        """The slow log's count in this child, written as soon as it changes."""
        offset = self._offset
        if offset is not None:
            _SLOW.pack_into(self.memory, offset + _SLOW_AT, count)

    # -- readers -------------------------------------------------------------------------

    def snapshot(self):
        """Copy the board: pool counters and one entry per child. Read again when the parent
        folded a reaped child's counts meanwhile (the generation moved or is odd)."""
        for _ in range(_SNAPSHOT_TRIES):
            generation = _GENERATION.unpack_from(self.memory, _GENERATION_AT)[0]
            if generation % 2:
                time.sleep(0)
                continue
            counters = self._read()
            if _GENERATION.unpack_from(self.memory, _GENERATION_AT)[0] == generation:
                return counters
        return self._read()

    def _read(self):
        memory = self.memory
        counters = _Counters()
        now, mono = time.time(), time.monotonic()
        retired, retired_slow, max_active, reached, max_lq, _ = _HEADER.unpack_from(memory, 0)
        counters.accepted, counters.slow = retired, retired_slow
        for slot in range(self.max_children):
            offset = HEADER_SIZE + SLOT_SIZE * slot
            state = memory[offset + _STATE_AT]
            if not state:
                continue
            pid, started = _PROCESS.unpack_from(memory, offset)
            if not pid:
                continue  # forked this moment: listed once the child has written its pid
            begin = _BEGIN.unpack_from(memory, offset + _STATE_AT)[1:]
            requests, duration, cpu, cpu_duration = _END.unpack_from(memory, offset + _END_AT)
            counters.slow += _SLOW.unpack_from(memory, offset + _SLOW_AT)[0]
            counters.accepted += requests
            entry = _entry(pid, state, started, now, mono, begin, requests, duration,
                           _cpu_percent(cpu, cpu_duration),
                           peak_memory(pid) if pid and state != _RUNNING else 0)
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


def _entry(pid, state, started, now, mono, begin, requests, duration, cpu_percent, memory):
    """One process entry in PHP-FPM's order and units: a running request's duration so far,
    an idle worker's last request's (microseconds); the last request's cpu (percent of one
    CPU) and memory (bytes), 0 while one runs."""
    accepted, length, method, uri, user, script = begin
    running = state == _RUNNING
    return {
        'pid': pid,
        'state': _STATE_NAMES.get(state, IDLE),
        'start time': int(started),
        'start since': max(0, int(now - started)),
        'requests': requests,
        'request duration': int(((mono - accepted) if running else duration) * 1e6),
        'request method': _decode(method) or '-',
        'request uri': _decode(uri) or '-',
        'content length': length,
        'user': _decode(user) or '-',
        'script': _decode(script) or '-',
        'last request cpu': 0.0 if running else cpu_percent,
        'last request memory': 0 if running else memory,
    }


class _ThreadSlot:
    """One thread's record (thread and single mode); only its thread writes it."""
    __slots__ = ('thread', 'started', 'state', 'requests', 'accepted', 'request',
                 'duration', 'cpu', 'cpu_duration', 'next_cpu')

    def __init__(self, thread, started):
        self.thread = thread
        self.started = started
        self.state = _IDLE
        self.requests = 0
        self.accepted = self.duration = self.cpu = self.cpu_duration = self.next_cpu = 0.0
        self.request = (None, None, None, None, None)  # method, uri, length, user, script


class ThreadWorkers(_Board):
    """Thread and single mode: a slot per thread that serves requests, found through a
    thread-local; ``pool`` (a ThreadPool, or None in single mode) lists the threads that
    have served nothing yet. ``start_sampler`` runs PHP-FPM's once-a-second maintenance look in
    a daemon thread while ``watching``; without it (single mode) the maxima are sampled when
    the page is read."""

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
        self.watching = False     # the sampler runs while this board watches requests

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
        get = environ.get
        # The strings themselves (immutable), cut to size when the page is read.
        slot.request = (get('REQUEST_METHOD'), get('REQUEST_URI') or _request_uri(environ),
                        get('CONTENT_LENGTH'), get('REMOTE_USER'), get('SCRIPT_FILENAME'))
        slot.accepted = accepted = _monotonic()
        slot.state = _RUNNING
        if accepted < slot.next_cpu:
            return None
        slot.next_cpu = accepted + CPU_SAMPLE_INTERVAL
        return _thread_time()

    def end(self, cpu_start, response, failed):
        slot = self._local.slot
        slot.duration = duration = _monotonic() - slot.accepted
        if cpu_start is not None:
            slot.cpu = _thread_time() - cpu_start
            slot.cpu_duration = duration
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
            while os.getpid() == pid and self.watching:
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
            method, uri, length, user, script = slot.request
            begin = (slot.accepted, _content_length(length), _cut(method, METHOD_BYTES),
                     _cut(uri, URI_BYTES), _cut(user, USER_BYTES), _cut(script, SCRIPT_BYTES))
            # A thread's "pid" is its kernel id (the TID ``ps -L`` and ``top -H`` show).
            counters.processes.append(_entry(
                thread.native_id or 0, slot.state, slot.started, now, mono, begin,
                slot.requests, slot.duration, _cpu_percent(slot.cpu, slot.cpu_duration),
                0 if slot.state == _RUNNING else peak_memory(os.getpid())))
        counters.slow = self.slow_log.slow_requests if self.slow_log is not None else 0
        counters.max_active = max(self._max_active, counters.active)
        counters.max_children_reached = self._reached
        counters.max_listen_queue = self._max_listen_queue
        return counters
