"""fastlog.info writes what Logger.info writes, and defers to it for anything not stock."""
import io
import logging
import time

import pytest

from flupfast import fastlog

FORMATS = [
    ('%(asctime)s : %(message)s', '%Y-%m-%d %H:%M:%S'),          # flup's console handler
    ('%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s', None),  # python -m flupfast
    ('%(levelno)d %(threadName)s %(msecs)03d|%(message)s', None),
    ('%(message)s', None),
]


@pytest.fixture
def logger(request):
    name = 'test-fastlog.%s' % request.node.name
    log = logging.getLogger(name)
    log.propagate = False
    log.setLevel(logging.INFO)
    yield log
    for h in list(log.handlers):
        log.removeHandler(h)


def _handler(fmt, datefmt=None, level=logging.NOTSET):
    stream = io.StringIO()
    h = logging.StreamHandler(stream)
    h.setLevel(level)
    h.setFormatter(logging.Formatter(fmt, datefmt))
    return h, stream


@pytest.fixture
def frozen_time(monkeypatch):
    """One instant for both writers, so their lines can be compared byte for byte."""
    now = time.time()
    monkeypatch.setattr(time, 'time', lambda: now)
    monkeypatch.setattr(time, 'time_ns', lambda: int(now * 1e9))
    return now


@pytest.mark.parametrize('fmt,datefmt', FORMATS)
def test_same_line_as_logging(logger, frozen_time, fmt, datefmt):
    h, stream = _handler(fmt, datefmt)
    logger.addHandler(h)
    logger.info('%s %s%s', 'GET', '/app', '/x')
    fastlog.info(logger, '%s %s%s', 'GET', '/app', '/x')
    fastlog.info(logger, 'no args %s')
    logger.info('no args %s')
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4
    assert lines[0] == lines[1]
    assert lines[2] == lines[3]
    assert lines[0].endswith('GET /app/x')


def test_level_disabled_writes_nothing(logger):
    h, stream = _handler('%(message)s')
    logger.addHandler(h)
    logger.setLevel(logging.WARNING)
    fastlog.info(logger, 'x %s', 1)
    h.setLevel(logging.WARNING)
    logger.setLevel(logging.INFO)
    fastlog.info(logger, 'y %s', 2)
    assert stream.getvalue() == ''


def test_propagates_to_parent_handlers(frozen_time):
    parent = logging.getLogger('test-fastlog-parent')
    child = logging.getLogger('test-fastlog-parent.child')
    parent.propagate = False
    h1, s1 = _handler('%(name)s %(message)s')
    h2, s2 = _handler('%(levelname)s %(message)s')
    parent.addHandler(h1)
    child.addHandler(h2)
    child.setLevel(logging.INFO)
    try:
        fastlog.info(child, 'hello %d', 5)
    finally:
        parent.removeHandler(h1)
        child.removeHandler(h2)
    assert s1.getvalue() == 'test-fastlog-parent.child hello 5\n'
    assert s2.getvalue() == 'INFO hello 5\n'


class Marker(logging.Filter):
    def filter(self, record):
        record.msg = 'filtered ' + record.msg
        return True


@pytest.mark.parametrize('what', ['filter', 'lineno', 'handler_class', 'formatter_class'])
def test_anything_not_stock_goes_through_logging(logger, what):
    stream = io.StringIO()
    fmt = '%(lineno)d %(message)s' if what == 'lineno' else '%(message)s'
    h = (logging.StreamHandler if what != 'handler_class' else type(
        'Sub', (logging.StreamHandler,), {}))(stream)
    h.setFormatter((logging.Formatter if what != 'formatter_class' else type(
        'F', (logging.Formatter,), {'format': lambda self, r: 'custom ' + r.getMessage()}))(fmt))
    if what == 'filter':
        h.addFilter(Marker())
    logger.addHandler(h)
    fastlog.info(logger, 'm %s', 1)
    out = stream.getvalue()
    expected = {'filter': 'filtered m 1\n', 'handler_class': 'm 1\n',
                'formatter_class': 'custom m 1\n'}
    if what == 'lineno':
        assert out.endswith(' m 1\n') and out.split()[0].isdigit()
    else:
        assert out == expected[what]


def test_write_error_reported_like_logging(logger, monkeypatch):
    class Broken(io.StringIO):
        def write(self, s):
            raise OSError('disk full')
    h = logging.StreamHandler(Broken())
    h.setFormatter(logging.Formatter('%(message)s'))
    logger.addHandler(h)
    seen = []
    monkeypatch.setattr(h, 'handleError', lambda record: seen.append(record.getMessage()))
    fastlog.info(logger, 'GET %s', '/x')
    assert seen == ['GET /x']


@pytest.mark.parametrize('raw, shown', [
    ('/hello', '/hello'),
    ('/caf\u00c3\u00a9', '/caf\u00e9'),        # UTF-8 bytes of /café, as PEP 3333 gives them
    ('/bad\u00ff', '/bad\\xff'),              # not UTF-8: escaped, never mojibake or an error
])
def test_readable_shows_utf8_paths_as_sent(raw, shown):
    assert fastlog.readable(raw) == shown
