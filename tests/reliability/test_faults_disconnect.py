"""Clients that go away: many connections closed by the web server's side mid-upload (body half
sent) and mid-download (response half read), against real server processes in thread and fork
mode. Afterwards nothing has leaked (open fds and threads of every process, children, zombies
back where they were), the server serves on, and the log holds at most one line per
disconnect and no traceback.

1,000 disconnects per config in the default run (half of each kind); FLUPFAST_LONG_TESTS=1
runs 10,000.
"""
import threading

import pytest

from tests.reliability.fault_harness import (
    PROTOCOLS, WAIT, Exchange, ask, fd_count, long_tests, thread_count)
from tests.waiting import wait_until
from tests.reliability.test_faults import start  # noqa: F401  (a fixture)

UPLOAD = b"u" * (256 * 1024)
DOWNLOAD_SIZE = 1 << 20
CLIENT_THREADS = 8


def disconnect_mid_upload(backend):
    exchange = Exchange(backend, "/upload", UPLOAD, hold=True)
    try:
        rest = exchange._rest
        # Half the body (AJP: the first chunk; the server then asks for more), then leave.
        exchange.sock.sendall(rest if backend.protocol == "ajp" else rest[:len(rest) // 2])
    except OSError:
        pass
    finally:
        exchange.close()


def disconnect_mid_download(backend):
    exchange = Exchange(backend, "/download?size=%d" % DOWNLOAD_SIZE)
    try:
        exchange.sock.recv(4096)
    except OSError:
        pass
    finally:
        exchange.close()


def snapshot(backend):
    """(fds of the parent, threads of the parent, {child: fds})."""
    return (fd_count(backend.pid), thread_count(backend.pid),
            {child: fd_count(child) for child in backend.children()})


@pytest.mark.parametrize("mode", ["thread", "fork"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_clients_disconnecting_leak_nothing(start, protocol, mode):
    count = 10000 if long_tests() else 1000
    backend = start(protocol, mode, "--min-spare", "1", "--max-spare", "2")
    for _ in range(3):  # warm up: both kinds of request complete normally
        assert ask(backend, "/upload", UPLOAD).body == str(len(UPLOAD)).encode()
        assert ask(backend, "/download?size=%d" % DOWNLOAD_SIZE).status == 200
    if mode == "fork":
        wait_until(lambda: len(backend.children()) == 2, WAIT)
    parent_fds, parent_threads, child_fds = snapshot(backend)
    max_child_fds = max(child_fds.values(), default=0)
    log_lines = len(backend.log().splitlines())

    errors = []

    def client(index):
        try:
            for i in range(index, count, CLIENT_THREADS):
                (disconnect_mid_upload if i % 2 else disconnect_mid_download)(backend)
        except Exception as exc:  # reported in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENT_THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    assert not errors, errors[:3]

    def settled():
        fds, nthreads, children = snapshot(backend)
        return (fds <= parent_fds and nthreads <= parent_threads
                and len(children) <= 2 and all(n <= max_child_fds for n in children.values())
                and not backend.zombies())
    wait_until(settled, WAIT, what=lambda: "the processes to settle: %r" % (
        (snapshot(backend), (parent_fds, parent_threads, child_fds)),))
    assert ask(backend, "/upload", UPLOAD).body == str(len(UPLOAD)).encode()
    calls = backend.calls()
    assert len(calls) == 6 + count + 1  # every disconnect reached the app first
    new_lines = backend.log().splitlines()[log_lines:]
    assert len(new_lines) <= count, new_lines[:20]
    assert not [line for line in new_lines if "Traceback" in line], new_lines[:40]
