"""docs/security.md is true to the code: every test it names exists, its table of caps lists
each bounding constant of flupfast/limits.py with the value the code has, and the one cap no
other test shows (a silent peer cannot hold an "overloaded" answer past its bound) is shown.
"""
import ast
import os
import re
import socket
import threading

import pytest

from flupfast import connection, limits
from flupfast.server import scgi_base

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, 'docs', 'security.md')
# limits.py constants that size buffers and packets rather than bound a peer; the page names
# them in one sentence instead of the table.
NOT_CAPS = {'DEFAULT_MAXWRITE', 'RECV_BUFFER_SIZE', 'COALESCE_LIMIT', 'MAX_IOVECS',
            'AJP_DEFAULT_PACKET', 'AJP_DEFAULT_MAX_DATA', 'AJP_BODY_AHEAD', 'RELOAD_CHECK_TIMEOUT'}
# The modes' own time bounds (shutdown, pool upkeep, accept back-off) and the pool's shape
# bound no peer: they are documented in limits.py and docs/reliability.md, not in the caps
# table.
MODE_TIMES = {'ACCEPT_BACKOFF', 'THREAD_JOB_GRACE', 'THREAD_POOL_SHUTDOWN_GRACE',
              'FORK_DRAIN_GRACE', 'FORK_INTERRUPT_GRACE', 'FORK_TERM_GRACE', 'FORK_KILL_WAIT',
              'FORK_RETIRE_DELAY', 'FORK_RETIRE_SPACING', 'FORK_SPAWN_BACKOFF',
              'REQUEST_WATCH_INTERVAL', 'MAX_WAITING_LEADERS'}


def doc():
    with open(DOC, encoding='utf-8') as f:
        return f.read()


def defined_names(path):
    with open(os.path.join(ROOT, path), encoding='utf-8') as f:
        tree = ast.parse(f.read())
    return {node.name for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


def test_every_named_test_exists():
    refs = re.findall(r'`((?:tests|compat)/[\w/]+\.py)(?:::(\w+))?`', doc())
    assert len(refs) > 20
    for path, name in refs:
        assert os.path.exists(os.path.join(ROOT, path)), path
        if name:
            assert name in defined_names(path), '%s::%s' % (path, name)


def caps_table():
    rows = re.findall(r'^\| `(\w+)` \| ([\d.]+) \| [^|]+ \| `([^`]+)` \|$', doc(), re.M)
    return {name: (value, test) for name, value, test in rows}


def test_caps_table_matches_limits_py():
    table = caps_table()
    constants = {name for name in vars(limits) if name.isupper()}
    assert set(table) == constants - NOT_CAPS - MODE_TIMES
    for name, (value, _) in table.items():
        assert float(value) == getattr(limits, name), name
    for name in NOT_CAPS:
        assert '`%s`' % name in doc()


def test_a_silent_peer_cannot_hold_an_overloaded_answer(monkeypatch):
    """OVERLOAD_ANSWER_SECONDS: the refusal runs in the accept loop's thread; a peer that sends
    nothing is cut off at the bound (shortened here) and the connection closed."""
    monkeypatch.setattr(connection, 'OVERLOAD_ANSWER_SECONDS', 0.2)
    server = scgi_base.BaseSCGIServer(lambda e, s: [], allowedServers=None)
    ours, theirs = socket.socketpair()
    conn = scgi_base.Connection(theirs, '', server, None)
    refusal = threading.Thread(target=conn.refuse_overloaded, daemon=True)
    refusal.start()
    refusal.join(10)
    assert not refusal.is_alive()
    ours.settimeout(10)
    assert ours.recv(1) == b''  # closed, without waiting for the request
    ours.close()


@pytest.mark.parametrize('needle', [
    'fastcgi_param HTTP_PROXY "";', 'scgi_param HTTP_PROXY "";',
    'RequestHeader unset Proxy early'])
def test_the_deployment_recipes_carry_the_httpoxy_lines(needle):
    with open(os.path.join(ROOT, 'docs', 'deployment.md'), encoding='utf-8') as f:
        assert needle in f.read()
    assert needle in doc()
