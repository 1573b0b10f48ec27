"""send_buffers, both twins: every buffer in order, whole sends, partial sends resumed without
copying, big lists past MAX_IOVECS, a full socket buffer (the compiled twin's GIL-held
MSG_DONTWAIT try must fall back to a blocking send), errors as sock.sendmsg raises them."""
import socket
import threading

import pytest

from flupfast.limits import MAX_IOVECS


def _drain(sock, total, into):
    got = 0
    while got < total:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        into.append(chunk)
        got += len(chunk)


@pytest.mark.parametrize('shape', ['small', 'many', 'huge', 'mixed'])
def test_everything_arrives_in_order(backend, shape):
    if shape == 'small':
        buffers = [b'head', b'', b'body', bytes(8)]
    elif shape == 'many':
        buffers = [bytes([i % 256]) * (i % 7 + 1) for i in range(MAX_IOVECS * 2 + 5)]
    elif shape == 'huge':  # far more than a socket buffer: partial sends and blocking
        buffers = [bytes([i]) * (1 << 20) for i in range(1, 5)]
    else:
        buffers = [bytearray(b'x' * 3000), memoryview(b'y' * 70000), b'z' * 5]
    expected = b''.join(bytes(b) for b in buffers)
    a, b = socket.socketpair()
    received = []
    reader = threading.Thread(target=_drain, args=(b, len(expected), received))
    reader.start()
    try:
        backend.send_buffers(a, list(buffers))
    finally:
        reader.join(30)
        a.close()
        b.close()
    assert b''.join(received) == expected


def test_empty_list_sends_nothing(backend):
    a, b = socket.socketpair()
    try:
        backend.send_buffers(a, [])
        b.setblocking(False)
        with pytest.raises(BlockingIOError):
            b.recv(1)
    finally:
        a.close()
        b.close()


def test_peer_gone_raises_broken_pipe(backend):
    a, b = socket.socketpair()
    b.close()
    try:
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            backend.send_buffers(a, [b'x' * 10])
    finally:
        a.close()


def test_closed_socket_raises_oserror(backend):
    a, b = socket.socketpair()
    a.close()
    try:
        with pytest.raises(OSError):
            backend.send_buffers(a, [b'x'])
    finally:
        b.close()


def test_timeout_socket_full_buffer_times_out(backend):
    """With a timeout set, a peer that reads nothing makes the blocking fallback time out."""
    a, b = socket.socketpair()
    a.settimeout(0.2)
    try:
        with pytest.raises((socket.timeout, TimeoutError)):
            backend.send_buffers(a, [bytes(1 << 20)] * 16)
    finally:
        a.close()
        b.close()


def test_rejects_non_buffer(backend):
    a, b = socket.socketpair()
    try:
        with pytest.raises(TypeError):
            backend.send_buffers(a, ['text'])
    finally:
        a.close()
        b.close()
