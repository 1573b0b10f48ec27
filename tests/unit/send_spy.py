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
