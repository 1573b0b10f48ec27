"""FCGI_ABORT_REQUEST mid-body in every mode of ``python -m flupfast`` (thread, fork, single,
and multiplexed), on both backends: END_REQUEST(REQUEST_COMPLETE) comes while the connection
is still open (spec 5.4), and the KEEP_CONN connection serves the next request.
"""
import socket
import time

import pytest

from flupfast.protocols import fastcgi as f
from tests.fcgi_client import read_response, request_bytes
from tests.integration.backend_process import server_factory  # noqa: F401  (a fixture)

# A failure bound only (measured answers take a few ms): without the fix no END_REQUEST comes
# until the web server closes the connection.
ANSWER_BOUND = 5.0
DECLARED = 1 << 20
SENT = 64 << 10


@pytest.mark.parametrize('speedups', ['0', '1'], ids=['py', 'cy'])
@pytest.mark.parametrize('mode', [['--mode', 'thread'], ['--mode', 'fork'],
                                  ['--mode', 'single'], ['--mode', 'thread', '--multiplexed']],
                         ids=['thread', 'fork', 'single', 'multiplexed'])
def test_abort_mid_body_is_answered_and_conn_kept(server_factory, tmp_path, mode, speedups):
    path = str(tmp_path / 'abort.sock')
    server_factory(mode + ['--bind', 'unix:' + path, 'tests.apps.probe:app'], path,
                   env={'FLUPFAST_SPEEDUPS': speedups})
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(ANSWER_BOUND)
        sock.connect(path)
        head, _ = request_bytes('/upload?mode=read65536', body=b'x', keep_conn=True, split=True,
                                params={'CONTENT_LENGTH': str(DECLARED)})
        sock.sendall(head + f.encode_record(f.FCGI_STDIN, 1, b'u' * 32768)
                     + f.encode_record(f.FCGI_STDIN, 1, b'u' * (SENT - 32768)))
        started = time.monotonic()
        sock.sendall(f.encode_record(f.FCGI_ABORT_REQUEST, 1))
        resp = read_response(sock, timeout=ANSWER_BOUND)
        elapsed = time.monotonic() - started
        assert resp.end == (0, f.FCGI_REQUEST_COMPLETE), (resp.records, bytes(resp.stderr))
        assert elapsed < ANSWER_BOUND
        sock.sendall(request_bytes('/', keep_conn=True))
        nxt = read_response(sock, timeout=ANSWER_BOUND)
        assert (nxt.status, nxt.body) == (200, b'Hello world!\n')
