"""--request-timeout without a front: the stack report it shares with the slow log, the
exception raised in the request's thread (pool thread and main thread), the prefork child's
exit and the parent counting it, the servers' ``requestTimeout`` keyword, and the CLI flag."""
import logging
import os
import threading
import time

import pytest

from flupfast import gateway, ops
from flupfast.__main__ import UsageError, build_parser, server_kwargs
from flupfast.deadline import RequestTerminated
from flupfast.ops.request_timeout import RequestTimeout
from flupfast.serving.prefork import PreforkMode
from flupfast.serving.prefork.arbiter import ChildRecord
from flupfast.serving.prefork.child import EXIT_REQUEST_TIMEOUT, end_for_request_timeout
from tests.unit.deadline_helpers import run_side_by_side

ENVIRON = {'REQUEST_METHOD': 'GET', 'REQUEST_URI': '/stuck?x=1'}


@pytest.fixture(autouse=True)
def no_timeout_left():
    yield
    ops.set_request_timeout(None)


def run_in_thread(watch, body):
    """Start a 'request' in a thread; returns (thread, started, outcome)."""
    started = threading.Event()
    outcome = []

    def request():
        token = watch.begin(ENVIRON)
        started.set()
        try:
            body()
            outcome.append('finished')
        except RequestTerminated:
            outcome.append('terminated')
        finally:
            watch.end(token, None, True)
    thread = threading.Thread(target=request, daemon=True)
    thread.start()
    assert started.wait(10)
    return thread, outcome


def test_an_overrunning_request_gets_its_stack_logged_and_the_exception(caplog):
    watch = RequestTimeout(100)  # the watcher thread never fires: check() is called here
    release = threading.Event()

    def busy_waiting_app():
        while not release.wait(0.01):
            pass
    thread, outcome = run_in_thread(watch, busy_waiting_app)
    with caplog.at_level(logging.ERROR, logger='flupfast.requesttimeout'):
        watch.check(time.monotonic())        # too early: nothing
        assert outcome == []
        watch.check(time.monotonic() + 100)  # over: logged and raised
    thread.join(10)
    release.set()
    assert outcome == ['terminated']
    assert watch.terminated_requests == 1
    [message] = [r.getMessage() for r in caplog.records]
    assert message.startswith('request timeout, ending it: GET /stuck?x=1 running for 10')
    assert '(pid %d, thread %d)' % (os.getpid(), thread.ident) in message
    assert 'in busy_waiting_app' in message and 'release.wait(0.01)' in message


def test_slow_log_and_timeout_share_one_report_shape(caplog):
    """One source of truth: both lines come from describe_request."""
    slow, timeout = ops.SlowLog(100), RequestTimeout(100, end_process=lambda: None)
    release = threading.Event()
    threads = []
    for watch in (slow, timeout):
        threads.append(run_in_thread(watch, lambda: release.wait(10))[0])
    with caplog.at_level(logging.WARNING):
        slow.check(time.monotonic() + 100)
        timeout.check(time.monotonic() + 100)
    release.set()
    for thread in threads:
        thread.join(10)
    first, second = [r.getMessage() for r in caplog.records]
    shape = ' GET /stuck?x=1 running for 100.0 s (pid %d, thread ' % os.getpid()
    assert first.startswith('slow request:' + shape)
    assert second.startswith('request timeout, ending it:' + shape)


def test_a_request_that_ended_is_not_ended():
    ended = []
    watch = RequestTimeout(100, end_process=lambda: ended.append(True))
    token = watch.begin(ENVIRON)
    watch.end(token, None, False)
    watch.check(time.monotonic() + 100)
    assert ended == [] and watch.terminated_requests == 0


def test_a_fork_child_whose_request_ends_while_its_stack_is_written_is_left_alone(monkeypatch):
    """Writing the stack takes milliseconds: a request that ended meanwhile may have been
    followed by the child's next one, which the exit would end with it (found in review)."""
    ended = []
    watch = RequestTimeout(100, end_process=lambda: ended.append(True))
    token = watch.begin(ENVIRON)
    describe = watch.describe

    def the_request_ends_meanwhile(*args):
        watch.end(token, None, False)
        watch.begin(ENVIRON)  # the child's next request
        return describe(*args)
    monkeypatch.setattr(watch, 'describe', the_request_ends_meanwhile)
    watch.check(time.monotonic() + 100)
    assert ended == []


def test_end_process_is_called_once_instead_of_raising(caplog):
    ended = []
    watch = RequestTimeout(100, end_process=lambda: ended.append(True))
    release = threading.Event()
    thread, outcome = run_in_thread(watch, lambda: release.wait(10))
    with caplog.at_level(logging.ERROR, logger='flupfast.requesttimeout'):
        watch.check(time.monotonic() + 100)
        watch.check(time.monotonic() + 200)  # once per request
    release.set()
    thread.join(10)
    assert ended == [True] and outcome == ['finished'] and watch.terminated_requests == 1
    assert 'release.wait(10)' in caplog.records[0].getMessage()


def test_the_main_thread_is_woken_out_of_a_blocking_sleep():
    """The single mode runs requests in the main thread: a blocking call there ends at once."""
    assert threading.current_thread() is threading.main_thread()
    watch = RequestTimeout(100)
    token = watch.begin(ENVIRON)
    timer = threading.Timer(0.2, lambda: watch.check(time.monotonic() + 100))
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(RequestTerminated):
            time.sleep(30)
    finally:
        watch.end(token, None, True)
        timer.join(10)
    assert time.monotonic() - started < 20


def test_a_request_ending_as_it_overruns_is_left_alone():
    """The watcher picked the request (check() took its entry), then it ended before the
    watcher acted: nothing is raised in the thread, which serves the next request by now."""
    watch = RequestTimeout(100)
    token = watch.begin(ENVIRON)
    entry = list(watch._in_flight[token])
    watch.end(token, None, False)
    watch.overran(token, entry, None, time.monotonic() + 100)
    for _ in range(1000):
        pass  # a pending RequestTerminated would raise here
    assert watch.terminated_requests == 0


def test_the_fork_child_exits_with_its_status_and_the_parent_counts_it(caplog):
    pid = os.fork()
    if pid == 0:
        try:
            end_for_request_timeout()
        finally:
            os._exit(1)
    mode = PreforkMode(None)
    mode.keep_going = True
    mode.children[pid] = ChildRecord(pid, None)
    deadline = time.monotonic() + 10
    with caplog.at_level(logging.INFO, logger='flupfast'):
        while mode.children and time.monotonic() < deadline:
            mode.reap_children()
            time.sleep(0.01)
    assert mode.terminated_requests == 1 and not mode.children
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert EXIT_REQUEST_TIMEOUT not in (0, 1)


def test_every_server_takes_request_timeout():
    from flupfast.server import ajp, ajp_fork, fcgi_fork, fcgi_single, scgi, scgi_fork
    app = lambda environ, start_response: []  # noqa: E731
    for module in (fcgi_fork, scgi_fork, ajp_fork):
        module.WSGIServer(app, bindAddress=('127.0.0.1', 0), requestTimeout=3)
        observer = gateway._observer
        assert isinstance(observer, RequestTimeout) and observer.seconds == 3
        assert observer.end_process is end_for_request_timeout  # fork: the child ends
    server = scgi.WSGIServer(app, requestTimeout=2, maxThreads=2)
    try:
        assert gateway._observer.seconds == 2 and gateway._observer.end_process is None
    finally:
        server.shutdown()
    fcgi_single.WSGIServer(app, bindAddress=('127.0.0.1', 0), requestTimeout=1)
    assert gateway._observer.end_process is None
    server = ajp.WSGIServer(app)  # without it: off
    server.shutdown()
    assert gateway._observer is None


def test_request_timeout_flag():
    args = build_parser().parse_args(['--request-timeout', '1.5', '--mode', 'fork'])
    assert server_kwargs(args)['requestTimeout'] == 1.5
    assert 'requestTimeout' not in server_kwargs(build_parser().parse_args([]))
    with pytest.raises(UsageError):
        build_parser().parse_args(['--request-timeout', '0'])


def test_counts_for_the_status_page():
    assert ops.request_counts() == {'slow_requests': 0, 'terminated_requests': 0}
    ops.set_request_timeout(5)
    gateway._observer.terminated_requests = 2
    assert ops.request_counts()['terminated_requests'] == 2


def test_requests_ending_as_they_are_terminated_get_no_exception_afterwards(caplog):
    """A request ending just as the watcher terminates it: the exception raises inside it or
    its ending (it timed out), or never; never once its end() has returned."""
    watch = RequestTimeout(0.004)  # its watcher looks every 1 ms
    outcome = {'terminated': 0, 'ended': 0, 'terminated while ending': 0,
               'raised after the request': 0}

    # The app and the thread's next request are calls, as they are in a server. CPython 3.13
    # can raise an asynchronous exception at a loop's back edge past every try of that loop's
    # own frame (gh-139622): a loop written inline here would end the thread on 3.13.
    def app():
        until = time.monotonic() + 0.004
        while time.monotonic() < until:
            pass

    def next_request():
        for _ in range(1000):
            pass

    def requests():
        for _ in range(300):
            over = False
            try:
                token = watch.begin(ENVIRON)
                try:
                    app()
                    result = 'ended'
                except RequestTerminated:
                    result = 'terminated'
                finally:
                    watch.end(token, None, False)
                over = True
                next_request()
            except RequestTerminated:
                result = 'raised after the request' if over else 'terminated while ending'
            outcome[result] += 1

    with caplog.at_level(logging.CRITICAL, logger='flupfast.requesttimeout'):
        hung = run_side_by_side(requests)
        watch._watcher_pid = None  # its watcher thread ends
    assert not hung
    assert outcome['raised after the request'] == 0, outcome
    assert sum(outcome.values()) == 1200
    assert outcome['terminated'] > 0  # the race was run
