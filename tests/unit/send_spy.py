"""What a connection sends, call by call: a spy on _impl.send_buffers for the connection tests
that check a response leaves in one send."""
from flupfast import _impl

try:
    from flupfast import _speedups
except ImportError:
    _speedups = None


def spy_sends(monkeypatch):
    """Record the bytes of each send_buffers call that carries any (a flush may send none);
    the calls still go out."""
    sends = []
    real = _impl.send_buffers

    def spy(sock, buffers):
        data = b''.join(bytes(b) for b in buffers)
        if data:
            sends.append(data)
        return real(sock, buffers)
    monkeypatch.setattr(_impl, 'send_buffers', spy)
    if _speedups is not None:  # the compiled SCGI stream calls its module's own by name
        monkeypatch.setattr(_speedups, 'send_buffers', spy)
    return sends


def cut_a_send_short(monkeypatch, chosen, keep):
    """The first send whose bytes ``chosen(data)`` picks puts only ``keep(data)`` on the wire,
    then raises RequestTerminated, as the request timeout does during a send that waits on a
    slow web server (on both backends' send_buffers). Returns the list that gets the bytes
    sent."""
    from flupfast.deadline import RequestTerminated
    real = _impl.send_buffers
    sent = []

    def cut_short(sock, buffers):
        data = b''.join(bytes(b) for b in buffers)
        if not sent and chosen(data):
            sent.append(keep(data))
            sock.sendall(sent[0])
            raise RequestTerminated()
        return real(sock, buffers)
    monkeypatch.setattr(_impl, 'send_buffers', cut_short)
    if _speedups is not None:
        monkeypatch.setattr(_speedups, 'send_buffers', cut_short)
    return sent
