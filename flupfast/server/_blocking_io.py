"""flup's blocking socket helpers (``recvall``/``_recvall`` and ``_sendall`` of scgi_base,
fcgi_base.Record and ajp_base.Packet), once, for the flup-named adapters that read or write
one unit from a socket. The servers themselves never use them (see connection.py).
"""
import select


def recvall(sock, length):
    """Receive up to ``length`` bytes, blocking as needed (the socket may be non-blocking);
    returns ``(data, received)``, short only at EOF (flup's signature)."""
    parts = []
    received = 0
    while received < length:
        try:
            data = sock.recv(length - received)
        except BlockingIOError:
            select.select([sock], [], [])
            continue
        if not data:
            break
        parts.append(data)
        received += len(data)
    return b''.join(parts), received


def recv_exactly(sock, length):
    """``length`` bytes, or EOFError when the peer closes (or the socket fails) first, as
    flup's Record.read and Packet.read report it."""
    try:
        data, received = recvall(sock, length)
    except OSError:
        raise EOFError from None
    if received < length:
        raise EOFError
    return data


def sendall(sock, data):
    """Send all of ``data``, waiting when a non-blocking socket is full; what is left is a
    memoryview slice, never a copy (flup's ``data = data[sent:]`` is quadratic)."""
    view = memoryview(data)
    while view:
        try:
            sent = sock.send(view)
        except BlockingIOError:
            select.select([], [sock], [])
            continue
        view = view[sent:]
