"""One request served as plain CGI (environment and stdin in, stdout out): the FastCGI servers'
fallback when started by a web server that speaks CGI, and server.cgi. Its variables, its
bounded ``wsgi.input`` and its output stream; no socket, no protocol.
"""
import os
import sys

from flupfast import _impl


class CGIOutput(_impl.PartsWriter):
    """The CGI response's stdout: bytes to ``sys.stdout.buffer``, flushed per write (flup's
    ``fcgi_base.StdoutWrapper``)."""

    def __init__(self, stdout):
        self._file = getattr(stdout, 'buffer', stdout)
        self.dataWritten = False

    def write_parts(self, parts, hold=False):
        for part in parts:
            if part:
                self._file.write(part)
                self.dataWritten = True
        self._file.flush()

    def flush(self):
        self._file.flush()


def cgi_params():
    """The CGI request's variables as WSGI wants them: each byte of the process environment
    as one latin-1 character (PEP 3333 "bytes as str", as the FastCGI params are). flup uses
    ``os.environ``, whose values the locale decodes: a UTF-8 PATH_INFO arrives as text."""
    environb = getattr(os, 'environb', None)
    if environb is None:  # no bytes environment on this platform
        return dict(os.environ)
    return {name.decode('latin-1'): value.decode('latin-1')
            for name, value in environb.items()}


def cgi_stdin(stdin=None, environ=None):
    """``wsgi.input`` of a plain CGI request: binary stdin, ending at CONTENT_LENGTH (flup's
    is text-mode ``sys.stdin``: cgi-server-bytes). Shared by the FastCGI CGI fallback and server.cgi."""
    if stdin is None:
        stdin = getattr(sys.stdin, 'buffer', sys.stdin)
        if stdin is None:  # fd 0 closed: Python has no sys.stdin, and there is no body
            return _impl.InputStream(lambda: b'')
    if environ is None:
        environ = os.environ
    try:
        left = int(environ.get('CONTENT_LENGTH') or 0)
    except ValueError:
        left = 0
    read = getattr(stdin, 'read1', stdin.read)
    state = {'left': left}

    def pull():
        if state['left'] <= 0:
            return b''
        chunk = read(min(state['left'], 65536))
        state['left'] -= len(chunk)
        if not chunk:
            state['left'] = 0
        return chunk
    return _impl.InputStream(pull)
