"""The status page's per-worker slots (PHP-FPM's scoreboard procs) and pool counters: in fork
mode fixed-size records in memory shared by the parent and its children, in thread and single
mode one record per thread in the process. Each worker writes only its own slot.

A request writes a few integers and bounded copies of its method and URI at its start and end
(the gateway's request observer), with no system call: the clocks it reads are the vDSO's,
and the CPU time (a real system call) is read for one request per CPU_SAMPLE_INTERVAL.
Readers (the status request, the fork parent's tick) take no lock. In fork mode a slot
carries a sequence number, odd while its child writes a request's start or end: a reader
copies the slot again when it moved (struct's pack_into clears a record before it fills it,
and the count and the state change together). Counters are single aligned 8-byte stores.
Nothing here knows a protocol or renders a page (ops/status.py does).
"""
import mmap
import os
import re
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
#   SEQ: one byte, odd while the child writes the state, the child
#        BEGIN or END (it wraps at 256: a reader that saw it even
#        twice around a copy missed no write unless 128 of them
#        came between its two looks, microseconds apart)
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
_SEQ_AT = _SLOW_AT + _SLOW.size
SLOT_SIZE = (_SEQ_AT + 1 + 63) & ~63
# The pool's counters ahead of the slots, written by the fork parent only: requests and slow
# requests of children already reaped, max active processes, max children reached, max
# listen queue; then a generation, odd while a reaped child's counts move from its slot to the
# header (a reader in a child that saw the header before the move and the slot after it would
# miss them: it reads again).
_RETIRED, _RETIRED_SLOW, _MAX_ACTIVE, _REACHED, _MAX_LISTEN_QUEUE, _GENERATION = range(6)
HEADER_SIZE = 64
# How long a reader waits for a write under way (a fold by the parent, a child's record) to
# end before it takes what is there: each takes microseconds, unless its writer was
# preempted; a reader never waits for a writer that died mid-write.
_SNAPSHOT_WAIT = 0.1

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


def _raw(value):
    """An environ string as the bytes the request carried (PEP 3333: latin-1 code points);
    anything past U+00FF, which no front sends, as '?'."""
    return (value or '').encode('latin-1', 'replace')


def _cut(value, size):
    return _raw(value)[:size]


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


# What a client may put in a request's URI or user (nginx decodes REMOTE_USER from any
# Authorization header) and no page may show as it is: a newline adds lines to the text page,
# a control character makes the XML page ill-formed. Shown as \xHH, as the access log does.
_control = re.compile('[\x00-\x1f\x7f]')


def _decode(raw):
    """A request's bytes as text (UTF-8; a field cut at its size may end inside a character:
    shown replaced), control characters escaped."""
    text = raw.rstrip(b'\0').decode('utf-8', 'replace')
    if _control.search(text):
        text = _control.sub(lambda match: '\\x%02X' % ord(match.group()), text)
    return text


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
        self._words = memoryview(self.memory).cast('Q')  # aligned 8-byte loads and stores
        self._offset = None     # in a child: its slot's offset
        self._seq = None        # in a child: where its slot's sequence number is
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
        meanwhile: see ``snapshot``). A request it was running counts as accepted: the
        request timeout, a crash or SIGKILL ended it, and "accepted conn" never goes down."""
        words = self._words
        offset = HEADER_SIZE + SLOT_SIZE * slot
        raw = self._slot_bytes(offset)
        requests = _END.unpack_from(raw, _END_AT)[0] + (raw[_STATE_AT] == _RUNNING)
        words[_GENERATION] += 1  # odd: folding
        words[_RETIRED] += requests
        words[_RETIRED_SLOW] += _SLOW.unpack_from(raw, _SLOW_AT)[0]
        self.memory[offset:offset + SLOT_SIZE] = bytes(SLOT_SIZE)
        words[_GENERATION] += 1

    def sample(self):
        """The parent's periodic look: raise the maxima, count a new "max children reached"
        episode (all ``max_children`` running with fewer than ``min_spare`` idle, counted once
        until it ends, as PHP-FPM's pm.max_children warning). Each counter is one store: a
        reader sees it before or after, never cleared."""
        total = active = 0
        memory = self.memory
        for slot in range(self.max_children):
            state = memory[HEADER_SIZE + SLOT_SIZE * slot + _STATE_AT]
            if state:
                total += 1
                active += state == _RUNNING
        words = self._words
        reached = total >= self.max_children and total - active < self.min_spare
        if reached and not self._reached:
            words[_REACHED] += 1
        self._reached = reached
        if active > words[_MAX_ACTIVE]:
            words[_MAX_ACTIVE] = active
        queue = self.listen_queue()[0]
        if queue > words[_MAX_LISTEN_QUEUE]:
            words[_MAX_LISTEN_QUEUE] = queue

    # -- the child -----------------------------------------------------------------------

    def attach(self, slot):
        """In a new child: write to ``slot`` from now on (None: no slot, write nothing)."""
        self._offset = None if slot is None else HEADER_SIZE + SLOT_SIZE * slot
        self._seq = None if slot is None else self._offset + _SEQ_AT
        self._requests = 0
        if self._offset is not None:
            _PROCESS.pack_into(self.memory, self._offset, os.getpid(), time.time())

    def begin(self, environ):
        offset = self._offset
        if offset is None:
            return None
        get = environ.get
        self._started = started = _monotonic()
        memory, seq = self.memory, self._seq
        writing = memory[seq] | 1  # odd, also after a write a signal cut short (--timeout)
        memory[seq] = writing
        _pack_begin(memory, offset + _STATE_AT, _RUNNING, started,
                    _content_length(get('CONTENT_LENGTH')),
                    # _raw's rule, inline (one call less per field and request)
                    (get('REQUEST_METHOD') or '').encode('latin-1', 'replace'),
                    (get('REQUEST_URI') or _request_uri(environ)).encode('latin-1', 'replace'),
                    (get('REMOTE_USER') or '').encode('latin-1', 'replace'),
                    (get('SCRIPT_FILENAME') or '').encode('latin-1', 'replace'))
        memory[seq] = (writing + 1) & 0xff
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
        cpu = None if cpu_start is None else _process_time() - cpu_start
        seq = self._seq
        writing = memory[seq] | 1  # odd (see begin)
        memory[seq] = writing
        if cpu is None:
            _pack_count(memory, offset + _END_AT, self._requests, duration)
        else:
            _pack_end(memory, offset + _END_AT, self._requests, duration, cpu, duration)
        memory[offset + _STATE_AT] = _IDLE
        memory[seq] = (writing + 1) & 0xff

    def on_slow(self, count):
        """The slow log's count in this child, written as soon as it changes (one store: the
        slow log's thread writes it, not the request's)."""
        offset = self._offset
        if offset is not None:
            self._words[(offset + _SLOW_AT) // 8] = count

    # -- readers -------------------------------------------------------------------------

    def _slot_bytes(self, offset):
        """A copy of the slot at ``offset`` that no write of its child was under way in."""
        memory = self.memory
        seq = offset + _SEQ_AT
        return _read_whole(lambda: memory[seq], lambda: memory[offset:offset + SLOT_SIZE])

    def snapshot(self):
        """Copy the board: pool counters and one entry per child. Read again when the parent
        folded a reaped child's counts meanwhile (the generation moved or is odd)."""
        words = self._words
        return _read_whole(lambda: words[_GENERATION], self._read)

    def _read(self):
        words = self._words
        counters = _Counters()
        now, mono = time.time(), time.monotonic()
        counters.accepted, counters.slow = words[_RETIRED], words[_RETIRED_SLOW]
        for slot in range(self.max_children):
            offset = HEADER_SIZE + SLOT_SIZE * slot
            if not words[offset // 8]:
                continue  # no child's pid (written once): a free slot, or a child just forked
            raw = self._slot_bytes(offset)
            state = raw[_STATE_AT]
            pid, started = _PROCESS.unpack_from(raw, 0)
            if not state or not pid:
                continue  # forked this moment: listed once the child has written its pid
            begin = _BEGIN.unpack_from(raw, _STATE_AT)[1:]
            requests, duration, cpu, cpu_duration = _END.unpack_from(raw, _END_AT)
            counters.slow += _SLOW.unpack_from(raw, _SLOW_AT)[0]
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
        counters.max_active = max(words[_MAX_ACTIVE], counters.active)
        counters.max_children_reached = words[_REACHED]
        counters.max_listen_queue = words[_MAX_LISTEN_QUEUE]
        return counters


def _read_whole(sequence, read):
    """``read()`` taken while ``sequence()`` stood even and unchanged (the number its
    writer keeps odd while it writes); after _SNAPSHOT_WAIT, what ``read()`` gives (a writer
    that died mid-write)."""
    deadline = None
    while True:
        before = sequence()
        if not before % 2:
            value = read()
            if sequence() == before:
                return value
        if deadline is None:
            deadline = time.monotonic() + _SNAPSHOT_WAIT
        elif time.monotonic() > deadline:
            return read()
        time.sleep(0)


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

    def sample(self, workers=None):
        """Raise the maxima; count a new "max children reached" episode (every thread the pool
        may have busy). ``workers``: a look ``_threads`` just took."""
        if workers is None:
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
        # One look: a thread that ended between two would count in the workers of the first
        # and in the retired count of the second ("accepted conn" went down a request later).
        retired, workers = self._threads()
        self.sample(workers)
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
