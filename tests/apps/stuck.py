"""A WSGI app whose requests get stuck on purpose, for --request-timeout and the process
titles: it owns the routes below and imports nothing but the standard library.

  /stuck?s=N            runs Python for N seconds (short sleeps: a thread can be interrupted
                        between them) in ``sleep_in_steps``, then answers ``done``
  /stuck-after?s=N      sends a first chunk, then the same
  /hold?dir=D           creates D/arrived-PID, then waits (blocking, no polling) until a line
                        can be read from the FIFO D/release, then answers ``released``
  anything else         ``hello``
"""
import os
import time
from urllib.parse import parse_qs

FIRST_CHUNK = b'first chunk\n'


def sleep_in_steps(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.02)


def hold(folder):
    with open(os.path.join(folder, 'arrived-%d' % os.getpid()), 'w'):
        pass
    with open(os.path.join(folder, 'release')) as fifo:  # blocks until the test writes
        fifo.readline()


def app(environ, start_response):
    path = environ.get('PATH_INFO', '')
    query = {k: v[0] for k, v in parse_qs(environ.get('QUERY_STRING', '')).items()}
    headers = [('Content-Type', 'text/plain')]
    if path == '/stuck':
        sleep_in_steps(float(query.get('s', '10')))
        start_response('200 OK', headers)
        return [b'done\n']
    if path == '/stuck-after':
        start_response('200 OK', headers)

        def body():
            yield FIRST_CHUNK
            sleep_in_steps(float(query.get('s', '10')))
            yield b'done\n'
        return body()
    if path == '/hold':
        hold(query['dir'])
        start_response('200 OK', headers)
        return [b'released\n']
    start_response('200 OK', headers)
    return [b'hello\n']
