"""The three modes in real processes: a tiny line-based job (one request per line: sleep, then
answer "pid thread served") under each flup-named facade, on a Unix socket.

Proves: the threaded and prefork pools really grow under concurrent load (flup's prefork pool
stays at maxSpare), idle prefork shrinks back; INT/TERM stop every mode within a second or two
even when idle (flup's prefork ignores them until a request comes), leaving no child process;
SIGHUP makes run() return True; handlers and the wakeup fd are restored after run(); SIGUSR1
replaces prefork children (flup crashes); maxRequests counts requests, not connections; a
SIGKILLed child is replaced; shutdown escalates to SIGKILL (flup's never does); a threaded
server runs and stops outside the main thread (flup raises).

Every subprocess is bounded by timeouts and stopped by PID.
"""
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tests.reliability.fault_harness import children_of, process_state
from tests.waiting import wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
START_TIMEOUT = 20.0   # interpreter start + import, on a slow machine
WAIT = 10.0            # generous bound for wait_until
STOP_BOUND = 3.0       # INT/TERM/HUP must end run() well within this (usually < 0.2 s)

SERVER = textwrap.dedent("""
    import json, os, signal, sys, threading, time
    sys.path.insert(0, %(root)r)
    mode, path, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    # SIGINT as a terminal or systemd leaves it: raising KeyboardInterrupt. A background job
    # of a script starts with it ignored, and prefork children keep what was there before
    # run() (flup's rule): the shutdown's SIGINT then cannot interrupt a busy child.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import flupfast.serving.prefork.arbiter as prefork
    for name, value in options.pop("constants", {}).items():
        setattr(prefork, name, value)  # shorten the shutdown grace for the escalation test
    if options.pop("board_misses_busy", False):
        # The race of a child that accepts after the parent's last look at the board: here
        # the shutdown's look sees every child idle.
        retire_all_children = prefork.PreforkMode.retire_all_children

        def retire_with_a_stale_board(self):
            self._read_board = lambda: None
            for child in self.children.values():
                child.state = prefork.IDLE
            retire_all_children(self)
        prefork.PreforkMode.retire_all_children = retire_with_a_stale_board
    from flupfast.serving.listen import bind_listen_socket

    from flupfast.serving.job import Job

    class LineJob(Job):
        # One request per line: "<seconds>" sleeps, "ignore-int <seconds>" sleeps with
        # SIGINT ignored. Stops at EOF or after max_requests (set by the prefork child: the
        # job contract of flupfast/serving/job.py).

        def __init__(self, sock, addr):
            self.sock = sock

        def run(self):
            served = 0
            with self.sock, self.sock.makefile("rwb") as stream:
                while True:
                    # Between requests the connection is idle: the prefork drain ends the
                    # wait by shutting the socket's read side (the job contract).
                    self.idle = served > 0
                    line = stream.readline()
                    self.idle = False
                    if not line:
                        break
                    words = line.split()
                    if words[0] == b"ignore-int":
                        signal.signal(signal.SIGINT, signal.SIG_IGN)
                        words = words[1:]
                    time.sleep(float(words[0]))
                    served += 1
                    stream.write(b"%%d %%d %%d\\n" %% (os.getpid(), threading.get_ident(), served))
                    stream.flush()
                    if self.max_requests is not None and served >= self.max_requests:
                        break
            return served

    def pre_run_handler(signum, frame):
        pass

    # Non-default handlers before run(): run() must put exactly these back.
    signal.signal(signal.SIGHUP, pre_run_handler)
    signal.signal(signal.SIGUSR1, pre_run_handler)
    watched = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGCHLD]
    before = {sig: signal.getsignal(sig) for sig in watched}

    sock = bind_listen_socket(path)
    flup_child = options.pop("flup_child", False)
    if mode == "prefork":
        from flupfast.server.preforkserver import PreforkServer
        server_class = PreforkServer
        if flup_child:
            import select

            class FlupChildLoop(PreforkServer):
                def _child(self, sock, parent):  # flup 1.0.3's loop, in short
                    while True:
                        ready, _, _ = select.select([sock, parent], [], [])
                        if parent in ready:
                            return
                        try:
                            client, addr = sock.accept()
                        except BlockingIOError:
                            continue
                        self._notifyParent(parent, b"\\x00")
                        self._jobClass(client, addr, *self._jobArgs).run()
                        if not self._notifyParent(parent, b"\\xff"):
                            return
            server_class = FlupChildLoop
        server = server_class(jobClass=LineJob, **options)
    elif mode == "threaded":
        from flupfast.server.threadedserver import ThreadedServer
        server = ThreadedServer(jobClass=LineJob, **options)
    else:
        from flupfast.server.singleserver import SingleServer
        server = SingleServer(jobClass=LineJob, **options)
    print("READY", flush=True)
    ret = server.run(sock)
    # Only the parent gets here: children leave run() with SystemExit.
    if mode == "threaded":
        server.shutdown()
    sock.close()
    try:
        left = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        left = None
    print("RESULT " + json.dumps({
        "ret": ret,
        "restored": all(signal.getsignal(sig) is before[sig] for sig in watched),
        "wakeup_fd": signal.set_wakeup_fd(-1),
        "children_left": left,
    }), flush=True)
""") % {"root": ROOT}


def proc_children(pid):
    """{child pid: state letter} for the processes whose parent is ``pid``."""
    return children_of(pid)


def exists(pid):
    return process_state(pid) not in (None, "Z")


class Server:
    def __init__(self, tmp_path, mode, **options):
        self.path = str(tmp_path / ("%s.sock" % mode))
        script = tmp_path / "server.py"
        script.write_text(SERVER)
        self.stderr_path = tmp_path / "stderr.txt"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-W", "error::DeprecationWarning", str(script), mode, self.path,
             json.dumps(options)],
            stdout=subprocess.PIPE, stderr=self._stderr, cwd=str(tmp_path))
        self.pid = self.proc.pid
        self.known_children = set()
        assert self.readline(START_TIMEOUT) == "READY", self.stderr()

    def readline(self, timeout):
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                raise AssertionError("no output within %.0f s; stderr:\n%s"
                                     % (timeout, self.stderr()))
        return self.proc.stdout.readline().decode().strip()

    def stderr(self):
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def children(self):
        """Live (non-zombie) children."""
        live = {pid for pid, state in proc_children(self.pid).items() if state != "Z"}
        self.known_children |= live
        return live

    def request(self, *delays):
        """One connection, one request per delay; the list of (pid, thread, served) replies,
        shorter if the server closed the connection early."""
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(WAIT)
            client.connect(self.path)
            replies = []
            stream = client.makefile("rwb")
            try:
                for delay in delays:
                    stream.write(b"%s\n" % str(delay).encode())
                    stream.flush()
                    line = stream.readline()
                    if not line:
                        break
                    replies.append(tuple(int(word) for word in line.split()))
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused: closed by the server
            finally:
                try:
                    stream.close()
                except OSError:
                    pass  # flushing the unsent request to a closed peer
            return replies

    def concurrent(self, count, delay):
        """``count`` one-request connections at once; their replies."""
        replies = [None] * count
        errors = []

        def one(index):
            try:
                replies[index] = self.request(delay)
            except Exception as exc:  # reported below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
        for thread in threads:
            thread.start()
        # Note the children while they answer: one above maxSpare may be retired as soon as
        # its request ends, before the test looks again.
        deadline = time.monotonic() + WAIT * 2
        while any(thread.is_alive() for thread in threads) and time.monotonic() < deadline:
            self.children()
            time.sleep(0.05)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        assert not errors, errors
        return replies

    def signal(self, signum):
        os.kill(self.pid, signum)

    def stop(self, signum):
        """Send ``signum``, wait for the exit; returns (seconds taken, RESULT dict)."""
        started = time.monotonic()
        self.signal(signum)
        try:
            self.proc.wait(STOP_BOUND * 3)
        except subprocess.TimeoutExpired:
            raise AssertionError("still running %.1f s after signal %d; children %r; stderr:\n%s"
                                 % (time.monotonic() - started, signum,
                                    proc_children(self.pid), self.stderr())) from None
        elapsed = time.monotonic() - started
        out = self.proc.stdout.read().decode()
        results = [line[7:] for line in out.splitlines() if line.startswith("RESULT ")]
        assert len(results) == 1, (out, self.stderr())
        assert self.proc.returncode == 0, self.stderr()
        return elapsed, json.loads(results[0])

    def close(self):
        """Teardown: whatever happened, leave no process behind (by PID only)."""
        if self.proc.poll() is None:
            self.children()
            self.proc.kill()
            self.proc.wait(WAIT)
        for pid in self.known_children | set(proc_children(self.pid)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.stdout.close()
        self._stderr.close()


@pytest.fixture
def start(tmp_path):
    servers = []

    def make(mode, **options):
        server = Server(tmp_path, mode, **options)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def assert_clean_stop(result, ret):
    assert result["ret"] is ret
    assert result["restored"] is True
    assert result["wakeup_fd"] == -1
    assert result["children_left"] is None  # no child at all: neither running nor zombie


# -- signals, every mode --------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["single", "threaded", "prefork"])
@pytest.mark.parametrize("signum, ret", [(signal.SIGTERM, False), (signal.SIGINT, False),
                                         (signal.SIGHUP, True)])
def test_signal_stops_idle_server(start, mode, signum, ret):
    server = start(mode, maxSpare=2) if mode != "single" else start(mode)
    served_by = server.request(0)[0][0]
    assert (served_by == server.pid) is (mode != "prefork")
    if mode == "prefork":
        children = wait_until(lambda: len(server.children()) == 2 and server.children(), WAIT)
        assert children
    time.sleep(0.2)  # idle: nothing in flight
    elapsed, result = server.stop(signum)
    assert elapsed < STOP_BOUND
    assert_clean_stop(result, ret)
    for pid in server.known_children:
        assert not exists(pid)


# -- pool growth ----------------------------------------------------------------------------------

def test_threaded_pool_grows_under_load(start):
    server = start("threaded", maxSpare=2)
    replies = server.concurrent(6, 0.5)
    assert {reply[0][0] for reply in replies} == {server.pid}
    assert len({reply[0][1] for reply in replies}) == 6  # six threads at once
    _, result = server.stop(signal.SIGTERM)
    assert_clean_stop(result, False)


def test_threaded_queues_past_max_threads_and_warns_once(start):
    # flup closes the connections past maxThreads; they now wait in a bounded queue.
    server = start("threaded", minSpare=1, maxSpare=2, maxThreads=2)
    replies = server.concurrent(5, 1.0)
    assert all(replies)
    assert len({reply[0][1] for reply in replies}) == 2
    _, result = server.stop(signal.SIGTERM)
    assert_clean_stop(result, False)
    assert server.stderr().count("queueing connections") == 1


def test_prefork_pool_grows_to_max_children_then_shrinks(start):
    server = start("prefork", maxSpare=2, maxChildren=6)
    wait_until(lambda: len(server.children()) == 2, WAIT)
    replies = server.concurrent(6, 0.5)
    pids = {reply[0][0] for reply in replies}
    assert len(pids) == 6  # six children served at once (flup's pool stays at 2)
    assert pids <= server.known_children | server.children()
    # Idle again: extras above maxSpare are retired.
    wait_until(lambda: len(server.children()) == 2, WAIT)
    _, result = server.stop(signal.SIGTERM)
    assert_clean_stop(result, False)


# -- prefork child lifecycle ----------------------------------------------------------------------

def test_prefork_usr1_replaces_children_and_keeps_serving(start):
    server = start("prefork", maxSpare=2)
    old = wait_until(lambda: len(server.children()) == 2 and server.children(), WAIT)
    assert old
    server.signal(signal.SIGUSR1)
    new = wait_until(lambda: (lambda now: len(now) == 2 and not now & old and now)(
        server.children()), WAIT)
    assert new, server.stderr()
    assert server.request(0)[0][0] in new
    assert server.proc.poll() is None
    _, result = server.stop(signal.SIGTERM)
    assert_clean_stop(result, False)


def test_prefork_max_requests_counts_requests_not_connections(start):
    server = start("prefork", minSpare=1, maxSpare=1, maxChildren=1, maxRequests=3)
    first = server.request(0, 0)           # two requests on one connection
    assert len(first) == 2
    pid = first[0][0]
    # One request left: the job is told so and closes after it.
    assert [reply[0] for reply in server.request(0, 0)] == [pid]
    # The child retired after three requests (flup would count two connections).
    wait_until(lambda: pid not in server.children(), WAIT)
    later = server.request(0)
    assert later[0][0] != pid
    _, result = server.stop(signal.SIGTERM)
    assert_clean_stop(result, False)


def test_prefork_max_requests_one_request_connections(start):
    server = start("prefork", minSpare=1, maxSpare=1, maxChildren=1, maxRequests=2)
    pids = [server.request(0)[0][0] for _ in range(4)]
    assert pids[0] == pids[1] != pids[2] == pids[3]


def test_prefork_killed_child_is_replaced(start):
    server = start("prefork", maxSpare=2)
    children = wait_until(lambda: len(server.children()) == 2 and server.children(), WAIT)
    assert children
    victim = min(children)
    os.kill(victim, signal.SIGKILL)
    # Reaped (no zombie left) and replaced.
    wait_until(lambda: victim not in proc_children(server.pid), WAIT)
    wait_until(lambda: len(server.children()) == 2, WAIT)
    assert server.request(0)[0][0] != victim
    _, result = server.stop(signal.SIGTERM)
    assert_clean_stop(result, False)


def test_prefork_shutdown_interrupts_busy_child(start):
    server = start("prefork", maxSpare=1, constants={"FORK_DRAIN_GRACE": 0.5})
    reply = []
    client = threading.Thread(target=lambda: reply.append(server.request(30)))
    client.start()
    wait_until(lambda: len(server.children()) == 2, WAIT)  # one busy, one spare
    elapsed, result = server.stop(signal.SIGTERM)
    client.join(WAIT)
    assert elapsed < STOP_BOUND  # SIGINT after the drain ended the 30 s job (flup: never)
    assert_clean_stop(result, False)
    assert "sending SIGTERM" not in server.stderr()
    assert reply == [[]]


def test_prefork_shutdown_drains_a_connection_the_board_shows_idle(start):
    """A child that accepts between the parent's last look at the board and its shutdown is
    drained too: its kept connection's idle wait ends at once, not after FORK_DRAIN_GRACE
    (found in review). The board is made to miss every busy child, as the race does one."""
    server = start("prefork", maxSpare=1, board_misses_busy=True)
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(WAIT)
        client.connect(server.path)
        stream = client.makefile("rwb")
        stream.write(b"0\n")
        stream.flush()
        assert stream.readline(), server.stderr()  # served; the connection now idles
        elapsed, result = server.stop(signal.SIGTERM)
        assert stream.readline() == b""  # ended by the server
    assert elapsed < STOP_BOUND, server.stderr()  # FORK_DRAIN_GRACE is 5 s
    assert_clean_stop(result, False)
    assert "SIGINT" not in server.stderr()


def test_prefork_shutdown_drains_a_flup_style_child_loop(start):
    """A PreforkServer subclass with flup's own ``_child`` loop sets no handler for the drain
    signal: a busy child finishes its job at shutdown (found in review: the signal's default
    action ended it at once, the request unanswered)."""
    server = start("prefork", maxSpare=1, flup_child=True)
    reply = []
    client = threading.Thread(target=lambda: reply.append(server.request(1.5)))
    client.start()
    wait_until(lambda: len(server.children()) == 2, WAIT)  # one busy, one spare
    time.sleep(0.3)  # the job is sleeping
    _, result = server.stop(signal.SIGTERM)
    client.join(WAIT)
    assert_clean_stop(result, False)
    assert len(reply) == 1 and len(reply[0]) == 1, server.stderr()  # answered


def test_prefork_shutdown_escalates_to_kill(start):
    # The job ignores SIGINT; with the grace shortened, SIGTERM then ends it (flup's SIGKILL
    # after 10 s never fires: it waits for the job however long it takes).
    server = start("prefork", maxSpare=1,
                   constants={"FORK_DRAIN_GRACE": 0.5, "FORK_INTERRUPT_GRACE": 0.5, "FORK_TERM_GRACE": 0.5})
    client = threading.Thread(target=lambda: server.request("ignore-int 30"))
    client.start()
    wait_until(lambda: len(server.children()) == 2, WAIT)
    time.sleep(0.2)  # let the job ignore SIGINT
    elapsed, result = server.stop(signal.SIGTERM)
    client.join(WAIT)
    assert elapsed < STOP_BOUND + 1.0
    assert_clean_stop(result, False)
    assert "sending SIGTERM to 1 child(ren)" in server.stderr()
    assert "SIGKILL" not in server.stderr()  # the default SIGTERM action sufficed


# -- outside the main thread, in-process ----------------------------------------------------------

class EchoJob:
    def __init__(self, sock, addr):
        self.sock = sock

    def run(self):
        with self.sock:
            self.sock.sendall(b"%d\n" % threading.get_ident())


@pytest.mark.parametrize("facade", ["threaded", "single"])
def test_runs_and_stops_outside_main_thread(tmp_path, facade):
    from flupfast.serving.listen import bind_listen_socket
    if facade == "threaded":
        from flupfast.server.threadedserver import ThreadedServer as Facade
    else:
        from flupfast.server.singleserver import SingleServer as Facade
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM,
                                                       signal.SIGHUP)}
    path = str(tmp_path / "t.sock")
    listener = bind_listen_socket(path)
    server = Facade(jobClass=EchoJob)
    outcome = []
    runner = threading.Thread(target=lambda: outcome.append(server.run(listener)))
    runner.start()
    try:
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(WAIT)
            client.connect(path)
            assert client.recv(100).strip().isdigit()
        started = time.monotonic()
        server._exit(reload=True)
        runner.join(WAIT)
        assert not runner.is_alive()
        assert time.monotonic() - started < STOP_BOUND
        assert outcome == [True]
        # Nothing was installed in the main thread's name.
        assert {sig: signal.getsignal(sig) for sig in handlers} == handlers
    finally:
        server._exit()
        runner.join(WAIT)
        if facade == "threaded":
            server.shutdown()
        listener.close()


class ReportingJob:
    """Fails on "boom"; otherwise reports whether TCP_NODELAY is set on its socket."""

    def __init__(self, sock, addr):
        self.sock = sock

    def run(self):
        with self.sock:
            if self.sock.recv(10) == b"boom":
                raise RuntimeError("job failed")
            nodelay = self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            self.sock.sendall(b"%d" % bool(nodelay))


@pytest.mark.parametrize("facade", ["threaded", "single"])
def test_tcp_nodelay_and_failing_job(facade, caplog):
    from flupfast.serving.listen import bind_listen_socket
    if facade == "threaded":
        from flupfast.server.threadedserver import ThreadedServer as Facade
    else:
        from flupfast.server.singleserver import SingleServer as Facade
    listener = bind_listen_socket(("127.0.0.1", 0))
    server = Facade(jobClass=ReportingJob)
    runner = threading.Thread(target=server.run, args=(listener,))
    runner.start()

    def ask(message):
        with socket.create_connection(listener.getsockname(), timeout=WAIT) as client:
            client.sendall(message)
            return client.recv(10)

    try:
        with caplog.at_level("ERROR", logger="flupfast"):
            assert ask(b"boom") == b""  # logged with its traceback, socket closed
            assert ask(b"hello") == b"1"  # still serving; TCP_NODELAY set on TCP peers
            # (the worker thread logs just after the client sees the socket close)
            wait_until(lambda: [r.exc_info[0] for r in caplog.records
                                if r.exc_info] == [RuntimeError], WAIT)
    finally:
        server._exit()
        runner.join(WAIT)
        if facade == "threaded":
            server.shutdown()
        listener.close()
