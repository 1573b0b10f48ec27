"""--request-timeout behind real nginx (FastCGI), thread and fork mode: a request running past
it leaves its Python stack (the app's function) in the log, nginx answers an error, and the
next request is served; fork mode replaces the child without reporting a failure.
"""
import http.client
import re

import pytest

from tests.integration.peers import IO_TIMEOUT
from tests.integration.test_ops import WAIT, stack_fixture
from tests.waiting import wait_until

pytestmark = pytest.mark.peer

APP = 'tests.apps.stuck:app'


stack = stack_fixture(APP)


# What each mode answers: the thread mode's 500 error page (the app raised RequestTerminated
# before a byte was sent); in fork mode the child is gone, and nginx answers 502 for an
# upstream that closed without an answer.
EXPECTED = {'thread': 500, 'fork': 502}


@pytest.mark.parametrize('mode', ['thread', 'fork'])
def test_a_request_past_the_timeout_is_ended_with_its_stack_logged(stack, mode):
    one = stack(mode, '--request-timeout', '1')
    assert one.get('/stuck?s=0.01')[0] == 200      # quick: untouched
    status, _, _ = one.get('/stuck?s=30')
    assert status == EXPECTED[mode]
    assert one.get('/')[2] == b'hello\n'           # the next request is served
    wait_until(lambda: 'request timeout' in one.log(), WAIT)
    log = one.log()
    assert log.count('request timeout, ending it: ') == 1, log
    assert re.search(r'request timeout, ending it: GET /stuck\?s=30 running for 1\.\d s '
                     r'\(pid \d+, thread \d+\)', log), log
    assert 'in sleep_in_steps' in log and 'in app' in log, log  # the app's frames
    if mode == 'fork':
        wait_until(lambda: 'ended by the request timeout' in one.log(), WAIT)
        assert 'exited with status' not in one.log()   # replaced, not reported as a crash


def test_thread_mode_truncates_a_response_already_begun(stack):
    """The response had begun: the connection is cut (the truncated-response signalling), so
    the client cannot take the half response for a whole one."""
    one = stack('thread', '--request-timeout', '1')
    conn = http.client.HTTPConnection('127.0.0.1', one.port, timeout=IO_TIMEOUT)
    try:
        conn.request('GET', '/stuck-after?s=30', headers={'Host': 'localhost'})
        # nginx buffers the first chunk, so it closes the client's connection unanswered
        # (or, unbuffered, mid-body): never a whole response.
        with pytest.raises((http.client.RemoteDisconnected, http.client.IncompleteRead)):
            conn.getresponse().read()
    finally:
        conn.close()
    wait_until(lambda: 'request timeout, ending it: GET /stuck-after' in one.log(), WAIT)
    assert one.get('/')[2] == b'hello\n'
