"""The status page (PHP-FPM's ``pm.status_path``): the pool's fields, and with ``?full`` one
entry per worker, as plain text (default), ``?json``, ``?xml`` or ``?html``, with PHP-FPM's
names, order, units and layouts, so its exporters and agents read it unchanged; and the pool's
fields as ``?openmetrics`` (PHP-FPM 8.1's metric names and types), which Prometheus scrapes
directly.

It answers before the app (a WSGI wrapper, as the ping) from a board of ops/workers.py; the
board watches requests through the gateway's observer (``watch``). Nothing here knows a
protocol or a mode.
"""
import html
import json
import time
from urllib.parse import parse_qs

from flupfast import ops
from flupfast.ops.ping import PING_HEADERS
from flupfast.ops.workers import PreforkWorkers, ThreadWorkers

__all__ = ['DEFAULT_POOL', 'POOL_FIELDS', 'PROCESS_FIELDS', 'StatusPage', 'render', 'watch']

# PHP-FPM names its pool after the configuration section; ours is the server.
DEFAULT_POOL = 'flupfast'

# The pool's fields, in PHP-FPM's order.
POOL_FIELDS = ('pool', 'process manager', 'start time', 'start since', 'accepted conn',
               'listen queue', 'max listen queue', 'listen queue len', 'idle processes',
               'active processes', 'total processes', 'max active processes',
               'max children reached', 'slow requests')
# One worker's fields (``?full``), in PHP-FPM's order.
PROCESS_FIELDS = ('pid', 'state', 'start time', 'start since', 'requests', 'request duration',
                  'request method', 'request uri', 'content length', 'user', 'script',
                  'last request cpu', 'last request memory')
_TEXT_TIME = '%d/%b/%Y:%H:%M:%S %z'   # PHP-FPM's text and html time; json and xml: epoch
_LABEL_WIDTH = 22                      # "max active processes: ", PHP-FPM's value column
_PROCESS_SEPARATOR = '\n' + '*' * 24 + '\n'

_CONTENT_TYPES = {'text': 'text/plain', 'json': 'application/json', 'xml': 'text/xml',
                  'html': 'text/html',
                  'openmetrics': 'application/openmetrics-text; version=1.0.0; charset=utf-8'}

# ?openmetrics: each pool field's metric, as PHP-FPM names and types it (its names carry no
# _total suffix; a scraper's queries use these), and what it counts.
_METRICS = (
    ('start since', 'phpfpm_start_since', 'counter', 'Seconds since the pool started.'),
    ('accepted conn', 'phpfpm_accepted_connections', 'counter',
     'Requests the pool has accepted.'),
    ('listen queue', 'phpfpm_listen_queue', 'gauge',
     'Connections waiting in the listening socket\'s queue.'),
    ('max listen queue', 'phpfpm_max_listen_queue', 'counter',
     'The most connections seen waiting in the queue since the pool started.'),
    ('listen queue len', 'phpfpm_listen_queue_length', 'gauge',
     'How many connections the listening socket\'s queue holds.'),
    ('idle processes', 'phpfpm_idle_processes', 'gauge', 'Workers waiting for a request.'),
    ('active processes', 'phpfpm_active_processes', 'gauge', 'Workers serving a request.'),
    ('total processes', 'phpfpm_total_processes', 'gauge', 'Idle and active workers.'),
    ('max active processes', 'phpfpm_max_active_processes', 'counter',
     'The most workers seen active at once since the pool started.'),
    ('max children reached', 'phpfpm_max_children_reached', 'counter',
     'Times every worker the pool may have was busy.'),
    ('slow requests', 'phpfpm_slow_requests', 'counter',
     'Requests that ran past the slow log\'s threshold.'),
)
# The same "never cache" headers as the ping (PHP-FPM sends both with either answer).
_NO_CACHE = PING_HEADERS[1:]


def pool_fields(board, pool=DEFAULT_POOL, now=None):
    """The board's pool fields and worker entries: (dict in POOL_FIELDS order, list)."""
    counters = board.snapshot()
    queue, queue_len = board.listen_queue()
    now = time.time() if now is None else now
    fields = {
        'pool': pool,
        'process manager': board.process_manager,
        'start time': int(board.start_time),
        'start since': max(0, int(now - board.start_time)),
        'accepted conn': counters.accepted,
        'listen queue': queue,
        'max listen queue': max(counters.max_listen_queue, queue),
        'listen queue len': queue_len,
        'idle processes': counters.idle,
        'active processes': counters.active,
        'total processes': counters.idle + counters.active,
        'max active processes': counters.max_active,
        'max children reached': counters.max_children_reached,
        'slow requests': counters.slow,
    }
    return fields, counters.processes


def _shown(name, value, fmt):
    """A value as PHP-FPM prints it in ``fmt``: times as a date (text, html) or epoch seconds,
    the cpu with two decimals."""
    if name == 'start time' and fmt in ('text', 'html'):
        return time.strftime(_TEXT_TIME, time.localtime(value))
    if name == 'last request cpu':
        return '%.2f' % value
    return str(value)


def render(fields, processes, fmt='text', full=False):
    """The page body (str) for ``fmt`` (text, json, xml, html, openmetrics)."""
    return _RENDERERS[fmt](fields, processes if full else None)


def _render_text(fields, processes):
    lines = ['%-*s%s\n' % (_LABEL_WIDTH, name + ':', _shown(name, fields[name], 'text'))
             for name in POOL_FIELDS]
    for entry in processes or ():
        lines.append(_PROCESS_SEPARATOR)
        for name in PROCESS_FIELDS:
            label = 'request URI' if name == 'request uri' else name  # PHP-FPM's spelling
            lines.append('%-*s%s\n' % (_LABEL_WIDTH, label + ':',
                                       _shown(name, entry[name], 'text')))
    return ''.join(lines)


def _json_value(name, value):
    if isinstance(value, str):
        return json.dumps(value)  # escaped (PHP-FPM before 8.1 did not: a quote broke it)
    return _shown(name, value, 'json')


def _json_object(names, values):
    return '{' + ','.join('%s:%s' % (json.dumps(name), _json_value(name, values[name]))
                          for name in names) + '}'


def _render_json(fields, processes):
    body = _json_object(POOL_FIELDS, fields)
    if processes is None:
        return body
    # PHP-FPM's layout, space included: {...,"slow requests":0, "processes":[{...},{...}]}
    return body[:-1] + ', "processes":[' + ','.join(
        _json_object(PROCESS_FIELDS, entry) for entry in processes) + ']}'


def _xml_name(name):
    return name.replace(' ', '-')


def _render_xml(fields, processes):
    parts = ['<?xml version="1.0" ?>\n<status>\n']
    for name in POOL_FIELDS:
        parts.append('<%s>%s</%s>\n' % (_xml_name(name), html.escape(
            _shown(name, fields[name], 'xml')), _xml_name(name)))
    if processes is None:
        parts.append('</status>')
        return ''.join(parts)
    parts.append('<processes>\n')
    for entry in processes:
        parts.append('<process>' + ''.join(
            '<%s>%s</%s>' % (_xml_name(name), html.escape(_shown(name, entry[name], 'xml')),
                             _xml_name(name)) for name in PROCESS_FIELDS) + '</process>\n')
    parts.append('</processes>\n</status>')
    return ''.join(parts)


_HTML_HEAD = ('<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Strict//EN" '
              '"http://www.w3.org/TR/xhtml1/DTD/xhtml1-strict.dtd">\n'
              '<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">\n'
              '<head><title>PHP-FPM Status Page</title></head>\n<body>\n')


def _render_html(fields, processes):
    parts = [_HTML_HEAD, '<table>\n']
    for name in POOL_FIELDS:
        parts.append('<tr><th>%s</th><td>%s</td></tr>\n' % (
            name, html.escape(_shown(name, fields[name], 'html'))))
    parts.append('</table>\n')
    if processes is None:
        parts.append('</body></html>')
        return ''.join(parts)
    parts.append('<table border="1">\n<tr>' + ''.join(
        '<th>%s</th>' % name for name in PROCESS_FIELDS) + '</tr>\n')
    for entry in processes:
        parts.append('<tr>' + ''.join(
            '<td>%s</td>' % html.escape(_shown(name, entry[name], 'html'))
            for name in PROCESS_FIELDS) + '</tr>\n')
    parts.append('</table></body></html>')
    return ''.join(parts)


def _render_openmetrics(fields, processes):
    """The pool's fields as OpenMetrics text; no worker entries (PHP-FPM shows none there
    either, ``full`` or not)."""
    lines = ['# HELP phpfpm_up Whether pool %s (%s process manager) answers.\n'
             % (fields['pool'], fields['process manager']),
             '# TYPE phpfpm_up gauge\n', 'phpfpm_up 1\n']
    for field, name, kind, text in _METRICS:
        lines.append('# HELP %s %s\n# TYPE %s %s\n%s %d\n'
                     % (name, text, name, kind, name, fields[field]))
    lines.append('# EOF\n')
    return ''.join(lines)


_RENDERERS = {'text': _render_text, 'json': _render_json, 'xml': _render_xml,
              'html': _render_html, 'openmetrics': _render_openmetrics}


def parse_query(query):
    """(format, full) from a query string such as ``json&full``; PHP-FPM looks for html, then
    xml, then json, then openmetrics, else text."""
    keys = parse_qs(query or '', keep_blank_values=True)
    fmt = next((name for name in ('html', 'xml', 'json', 'openmetrics') if name in keys),
               'text')
    return fmt, 'full' in keys


class StatusPage:
    """A WSGI app: ``path`` (matched against SCRIPT_NAME + PATH_INFO, as the ping) answers the
    status of ``board``; anything else goes to ``app``."""

    def __init__(self, app, path, board, pool=DEFAULT_POOL):
        if not path.startswith('/'):
            raise ValueError('the status path is a path such as /fpm-status, not %r' % path)
        self.app = app
        self.path = path
        self.board = board
        self.pool = pool

    def __call__(self, environ, start_response):
        if environ.get('SCRIPT_NAME', '') + environ.get('PATH_INFO', '') != self.path:
            return self.app(environ, start_response)
        fmt, full = parse_query(environ.get('QUERY_STRING'))
        fields, processes = pool_fields(self.board, self.pool)
        body = render(fields, processes, fmt, full).encode('utf-8')
        start_response('200 OK', [('Content-Type', _CONTENT_TYPES[fmt])] + _NO_CACHE
                       + [('Content-Length', str(len(body)))])
        return [b'' if environ.get('REQUEST_METHOD') == 'HEAD' else body]


def board_for(mode, min_spare, max_spare, max_workers, pool=None):
    """A board for ``mode`` ('fork', 'thread' or 'single') and its limits (``pool``: the
    thread mode's ThreadPool). The process manager, in PHP-FPM's words: a pool that keeps
    max_spare >= max workers never grows or shrinks ("static"); else it keeps spare workers
    between min and max ("dynamic"); single mode has its one worker ("static")."""
    manager = 'static' if mode == 'single' or max_spare >= max_workers else 'dynamic'
    if mode == 'fork':
        return PreforkWorkers(max_workers, min_spare, manager)
    return ThreadWorkers(pool, max_workers if pool is not None else 1, manager)


def watch(board, listen_sock=None):
    """Make ``board`` watch this process's requests (on duty in flupfast.ops beside the access
    and slow logs; an earlier board is replaced) and read ``listen_sock``'s queue. It shows the
    slow log's count."""
    old = ops.on_duty('status')
    if isinstance(old, ThreadWorkers):
        old.watching = False  # its sampler ends
    board.slow_log = ops.on_duty('slow')
    if board.slow_log is not None and isinstance(board, PreforkWorkers):
        board.slow_log.on_slow = board.on_slow
    board.listen_sock = listen_sock
    ops.put_on_duty('status', board)
    if isinstance(board, ThreadWorkers):
        board.watching = True
        if board.pool is not None:  # thread mode; single mode has no thread of its own
            board.start_sampler()
