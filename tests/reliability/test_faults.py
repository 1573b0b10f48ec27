"""Fault injection against real server processes (``python -m flupfast`` running
tests/reliability/fault_app.py), each with what must hold afterwards:

* a prefork child killed with SIGKILL mid-request: only that request fails, the others are
  answered, the child is reaped and replaced, and the server goes on serving;
* SIGTERM and SIGHUP while 16 requests are in flight: every one of them is answered; after
  SIGTERM no new connection is served and the process exits (status 0, no child left); after
  SIGHUP it re-executes itself and serves again;
* an idle persistent connection (AJP, FastCGI KEEP_CONN) does not hold up the thread mode's
  exit: it is closed at once, and the pool's grace never runs out;
* the pool exhausted: past maxThreads connections queue (up to MAX_QUEUED_CONNECTIONS) and are
  all answered; beyond that the protocol's explicit "overloaded" answer, with a log line; past
  maxChildren connections wait in the listen queue and are all answered once a child frees,
  and those still waiting after the fork parent's wait bound get the "overloaded" answer (from
  the parent, with a log line; a flup-style job class without one is closed);
* an app that hangs: the fork servers' ``timeout=`` ends it with flup's "Timeout Exceeded",
  the child goes on, and the app's own SIGALRM handler and threads are untouched;
* an app that leaks a file descriptor per request: maxRequests recycles the child.

Requests are held in the app by withholding their body, so nothing depends on timing.
"""
import os
import signal
import socket
import time

import pytest

from flupfast.limits import MAX_QUEUED_CONNECTIONS
from tests.integration.backend_process import Server
from tests.reliability.fault_harness import (
    PROTOCOLS, WAIT, Backend, Exchange, ask, fd_count, is_overloaded)
from tests.waiting import wait_until

BODY = b"b" * 100


@pytest.fixture
def start(tmp_path):
    backends = []

    def make(protocol="fcgi", mode="thread", *extra, **kw):
        workdir = tmp_path / ("%s-%s-%d" % (protocol, mode, len(backends)))
        workdir.mkdir()
        backend = Backend(workdir, protocol, mode, extra, **kw)
        backends.append(backend)
        return backend

    yield make
    for backend in backends:
        backend.close()


def hold(backend, count, prefix="h"):
    """``count`` requests held in the app; returns (exchanges, pids running them)."""
    exchanges = [Exchange(backend, "/hold?tag=%s%d" % (prefix, i), BODY, hold=True)
                 for i in range(count)]
    pids = [backend.held_pid("%s%d" % (prefix, i)) for i in range(count)]
    return exchanges, pids


def finish(exchanges):
    """Release every held request; their answers."""
    for exchange in exchanges:
        try:
            exchange.release()
        except OSError:
            pass
    answers = [exchange.answer() for exchange in exchanges]
    for exchange in exchanges:
        exchange.close()
    return answers


def assert_held_answers(exchanges, answers, prefix="h"):
    for i, answer in enumerate(answers):
        assert answer.status == 200, (i, answer)
        assert answer.body.startswith(b"held %s%d " % (prefix.encode(), i)), answer


# -- a prefork child killed mid-request ---------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_prefork_child_killed_mid_request(start, protocol):
    backend = start(protocol, "fork", "--min-spare", "1", "--max-spare", "3")
    exchanges, pids = hold(backend, 3)
    assert len(set(pids)) == 3  # three children, one request each
    victim = pids[1]
    os.kill(victim, signal.SIGKILL)
    # Only the victim's request fails: its connection ends without an answer.
    assert exchanges[1].answer().status is None
    survivors = [exchanges[0], exchanges[2]]
    for answer, tag in zip(finish(survivors), ("h0", "h2")):
        assert answer.status == 200 and answer.body.startswith(b"held %s " % tag.encode())
    exchanges[1].close()
    # Reaped (no zombie) and replaced; the server goes on serving.
    wait_until(lambda: victim not in backend.children() | backend.zombies(), WAIT)
    wait_until(lambda: len(backend.children()) >= 1, WAIT)
    answers = [ask(backend, "/") for _ in range(5)]
    assert all(a.status == 200 for a in answers), answers
    assert "child %d killed by signal 9" % victim in backend.log()
    assert "Traceback" not in backend.log()


# -- SIGTERM / SIGHUP with 16 requests in flight ------------------------------------------------

@pytest.mark.parametrize("mode", ["thread", "fork"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_sigterm_with_16_in_flight(start, protocol, mode):
    backend = start(protocol, mode, "--max-spare", "2")
    exchanges, _ = hold(backend, 16)
    if mode == "fork":
        wait_until(lambda: len(backend.children()) >= 16, WAIT)
    backend.signal(signal.SIGTERM)
    if mode == "thread":
        # The accept loop stops and the listening socket closes: nobody can connect.
        def refused():
            try:
                backend.connect(timeout=2).close()
            except OSError:
                return True
            return False
        wait_until(refused, WAIT)
        late = None
    else:
        # Idle children leave at once; the 16 busy ones finish. A connection made now sits in
        # the listen queue of the children's copy of the socket and is never accepted.
        wait_until(lambda: len(backend.children()) == 16, WAIT)
        late = Exchange(backend, "/", b"")
    answers = finish(exchanges)
    assert_held_answers(exchanges, answers)
    assert backend.wait_exit() == 0
    if late is not None:
        assert late.answer().status is None
        late.close()
    assert not [c for c in backend.calls() if c.startswith("/ ")]  # the late one never ran
    assert backend.children() == set()
    log = backend.log()
    assert "Traceback" not in log
    assert "still running" not in log and "sending SIGINT" not in log


@pytest.mark.parametrize("mode", ["thread", "fork"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_sighup_with_16_in_flight_then_serves_again(start, protocol, mode):
    backend = start(protocol, mode, "--max-spare", "2")
    exchanges, _ = hold(backend, 16)
    backend.signal(signal.SIGHUP)
    answers = finish(exchanges)
    assert_held_answers(exchanges, answers)
    # The command line re-executes itself (same pid) and listens again.
    wait_until(lambda: _answers_hello(backend), WAIT)
    assert backend.proc.poll() is None
    assert "Traceback" not in backend.log()


def _answers_hello(backend):
    try:
        return ask(backend, "/").status == 200
    except OSError:
        return False


@pytest.mark.parametrize("mode", ["thread", "fork"])
@pytest.mark.parametrize("protocol", ["fcgi", "ajp"])
def test_exit_not_held_by_idle_persistent_connection(start, protocol, mode):
    # The known issue: an idle pooled connection (Apache's AJP pool, nginx's FastCGI
    # keepalive) made ThreadedMode.shutdown wait its whole grace; a prefork child holding one
    # would wait for the drain's end. It is closed at once; so is the busy one's, after its
    # request.
    backend = start(protocol, mode)
    kept = Exchange(backend, "/", b"", keep_conn=True)
    assert kept.answer().status == 200  # the connection stays open, idle
    busy, _ = hold(backend, 1)
    backend.signal(signal.SIGTERM)
    answers = finish(busy)
    assert answers[0].status == 200
    assert backend.wait_exit() == 0
    kept.sock.settimeout(WAIT)
    try:
        assert kept.sock.recv(100) == b""  # closed by the server
    except ConnectionResetError:
        pass
    kept.close()
    assert "still running" not in backend.log() and "sending SIGINT" not in backend.log()


# -- the pool exhausted -------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_thread_pool_exhausted_queues_then_answers_overloaded(start, protocol):
    backend = start(protocol, "thread", "--max-threads", "2", "--min-spare", "1",
                    "--max-spare", "2")
    held, _ = hold(backend, 2)
    queued = [Exchange(backend, "/?q=%d" % i) for i in range(MAX_QUEUED_CONNECTIONS)]
    extra = [Exchange(backend, "/?x=%d" % i) for i in range(3)]
    # Beyond the queue: an explicit answer at once, while both threads are still held.
    for exchange in extra:
        answer = exchange.answer()
        assert is_overloaded(protocol, answer), answer
        exchange.close()
    assert backend.log().count("answering 'overloaded'") == 1
    # The queued ones are answered once the threads are free: none was closed unanswered.
    assert_held_answers(held, finish(held))
    answers = [exchange.answer() for exchange in queued]
    assert [a.status for a in answers] == [200] * MAX_QUEUED_CONNECTIONS
    for exchange in queued:
        exchange.close()
    assert not [c for c in backend.calls() if "x=" in c]  # refused requests never ran
    assert backend.log().count("queueing connections") == 1
    assert "Traceback" not in backend.log()


@pytest.mark.parametrize("protocol", ["fcgi", "scgi"])
def test_fork_pool_exhausted_connections_wait_and_are_answered(start, protocol):
    backend = start(protocol, "fork", "--max-children", "2", "--max-spare", "2",
                    "--min-spare", "1")
    held, _ = hold(backend, 2)
    waiting = [Exchange(backend, "/?w=%d" % i) for i in range(10)]
    assert len(backend.children()) == 2
    assert_held_answers(held, finish(held))
    answers = [exchange.answer() for exchange in waiting]
    assert [a.status for a in answers] == [200] * 10
    for exchange in waiting:
        exchange.close()


# The fork parent's wait bound in these tests (the default, FORK_OVERLOAD_WAIT, is 5 s).
OVERLOAD_WAIT = 1.0


def speedups_of(backend):
    """FLUPFAST_SPEEDUPS for a server subprocess running ``backend``'s twins: the refusal
    reads the request head with the codecs, in the parent."""
    return "0" if backend.name == "py" else "1"


def one_child(start, protocol, backend, overload_wait):
    return start(protocol, "fork", "--max-children", "1", "--max-spare", "1", "--min-spare",
                 "1", "--overload-wait", str(overload_wait), speedups=speedups_of(backend))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_fork_pool_exhausted_answers_overloaded_after_the_wait(start, protocol, backend):
    server = one_child(start, protocol, backend, OVERLOAD_WAIT)
    held, _ = hold(server, 1)
    started = time.monotonic()
    extra = [Exchange(server, "/?x=%d" % i) for i in range(3)]
    # The only child stays busy: after the bound, the parent answers each waiting connection.
    for exchange in extra:
        answer = exchange.answer()
        assert is_overloaded(protocol, answer), answer
        exchange.close()
    waited = time.monotonic() - started
    assert OVERLOAD_WAIT * 0.9 <= waited < OVERLOAD_WAIT + WAIT, waited
    log = server.log()
    assert log.count("answering 'overloaded'") == 1, log
    assert "all 1 children busy and connections waiting for" in log
    # The held request was not disturbed; once it ends and the parent has seen the child free
    # (a connection arriving before that is still in the spell: OverloadGuard's docstring),
    # the child serves new requests.
    assert_held_answers(held, finish(held))
    wait_until(lambda: "a child is free again; 3 connection(s) were answered "
                       "'overloaded'" in server.log(), WAIT,
               what=lambda: "the 'child is free again' line in the log:\n" + server.log())
    assert [ask(server, "/").status for _ in range(3)] == [200] * 3
    assert not [c for c in server.calls() if "x=" in c]  # refused requests never ran
    assert server.log().count("answering 'overloaded'") == 1
    assert "Traceback" not in server.log()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_fork_pool_exhausted_connections_within_the_wait_are_served(start, protocol, backend):
    server = one_child(start, protocol, backend, 5.0)
    held, _ = hold(server, 1)
    waiting = [Exchange(server, "/?w=%d" % i) for i in range(3)]
    time.sleep(0.5)  # they wait in the listen queue, well within the bound
    assert_held_answers(held, finish(held))
    answers = []
    for exchange in waiting:
        answers.append(exchange.answer())
        exchange.close()  # an AJP connection keeps its child until the web server closes it
    assert [a.status for a in answers] == [200] * 3, answers
    assert "overloaded" not in server.log()


# A flup-style PreforkServer with its own job class, which has no refuse_overloaded: the parent
# closes the connection (as thread mode and flup's threaded server do past their bound).
FLUP_STYLE_SCRIPT = r"""
import logging, os, socket, sys, time
from flupfast.server.preforkserver import PreforkServer
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

class Job:
    def __init__(self, sock, addr):
        self.sock = sock

    def run(self):
        if not self.sock.recv(100):
            return self.sock.close()  # a probe: connected and left
        open({busy!r}, "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists({go!r}) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.sock.sendall(b"served\n")
        self.sock.close()

server = PreforkServer(maxChildren=1, maxSpare=1, jobClass=Job)
server.overloadWait = {wait!r}
sock = socket.socket(socket.AF_UNIX)
sock.bind({path!r})
sock.listen(16)
server.run(sock)
"""


def test_fork_overloaded_job_class_without_refusal_is_closed(tmp_path):
    path, busy, go = (str(tmp_path / name) for name in ("s.sock", "busy", "go"))
    server = Server([], path, log_path=str(tmp_path / "server.log"), script=FLUP_STYLE_SCRIPT
                    .format(busy=busy, go=go, wait=OVERLOAD_WAIT, path=path))
    try:
        with _flup_style_request(path) as held:
            wait_until(lambda: os.path.exists(busy), WAIT)  # the only child runs it
            started = time.monotonic()
            with _flup_style_request(path) as refused:
                try:
                    data = refused.recv(100)
                except ConnectionResetError:  # closed with the request unread
                    data = b""
            assert data == b"" and time.monotonic() - started >= OVERLOAD_WAIT * 0.9
            open(go, "w").close()
            assert held.recv(100) == b"served\n"
        wait_until(lambda: "1 connection(s) were answered 'overloaded'" in server.log(), WAIT)
        with _flup_style_request(path) as again:  # served normally
            assert again.recv(100) == b"served\n"
    finally:
        log = server.stop()
    assert log.count("answering 'overloaded'") == 1, log
    assert "Traceback" not in log


def _flup_style_request(path):
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(WAIT)
    sock.connect(path)
    sock.sendall(b"request\n")
    return sock


# -- an app that hangs --------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_fork_timeout_ends_a_hanging_app_and_spares_other_threads(start, protocol):
    backend = start(protocol, "fork", "--timeout", "1", "--max-children", "1",
                    "--max-spare", "1", "--min-spare", "1", log_level="INFO")
    pid, count, alive, handler, alarm = ask(backend, "/ticker").body.split()
    assert (alive, handler, alarm) == (b"True", b"_alarm_handler", b"True")
    for how in ("sleep", "spin"):
        answer = ask(backend, "/hang?how=" + how)
        assert answer.status == 500, answer
        if protocol == "fcgi":
            assert b"Timeout Exceeded" in answer.stderr  # flup's FCGI_STDERR report
            assert b"fault_app.py" in answer.stderr      # with the app's stack
    if protocol != "fcgi":
        assert backend.log().count("Timeout Exceeded") == 2  # flup's ERROR log line
    # The same child goes on; its ticker thread still runs; the app's SIGALRM handler and its
    # alarm were left alone (flup replaces both).
    pid2, count2, alive2, handler2, alarm2 = ask(backend, "/ticker").body.split()
    assert pid2 == pid and int(count2) > int(count)
    assert (alive2, handler2, alarm2) == (b"True", b"_alarm_handler", b"True")
    assert ask(backend, "/").status == 200


# -- an app that leaks a file descriptor per request ------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_max_requests_recycles_a_leaking_child(start, protocol):
    backend = start(protocol, "fork", "--max-requests", "5", "--max-children", "1",
                    "--max-spare", "1", "--min-spare", "1")
    replies = []
    for _ in range(20):
        answer = ask(backend, "/leak")
        assert answer.status == 200, answer
        pid, fds = answer.body.split()
        replies.append((int(pid), int(fds)))
    pids = [pid for pid, _ in replies]
    assert len(set(pids)) == 4
    for pid in set(pids):
        fds = [n for p, n in replies if p == pid]
        assert len(fds) == 5
        assert fds[-1] - fds[0] == 4  # it leaked one per request, and no more than 5 in all
    wait_until(lambda: all(fd_count(p) == 0 for p in set(pids[:15])), WAIT)  # old ones gone
    wait_until(lambda: not backend.zombies(), WAIT)
