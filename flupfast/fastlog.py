"""The per-request log line, written as the ``logging`` module would write it, without the
module's per-call cost when the configuration is the stock one.

flup's SCGI and AJP servers log one INFO line per request; through ``Logger.info`` that line
costs more than the rest of a small request (a LogRecord with ~20 fields, a walk up the stack
for the caller, ``strftime``, two lock round trips). ``info`` below produces the same bytes on
the same streams when every handler on the logger's chain is a plain ``logging.StreamHandler``
with a stock ``logging.Formatter`` in %-style whose fields it knows; anything else (filters,
other handler or formatter classes, a record factory, caller fields such as ``%(lineno)d``)
goes through ``Logger.info`` unchanged. The configuration is re-checked on every call (a
handful of attribute reads), so changing it at any time takes effect at once.
"""
import logging
import os
import re
import threading
import time

__all__ = ['info', 'readable']

_INFO = logging.INFO
_FIELD = re.compile(r'%\((\w+)\)')
# Record fields this module can fill without building a LogRecord.
_KNOWN = frozenset(('name', 'levelname', 'levelno', 'message', 'asctime', 'msecs', 'created',
                    'process', 'thread', 'threadName', 'relativeCreated'))
_LEVEL_NAME = logging.getLevelName(_INFO)
# fmt string -> (fields it uses) or None when it needs a field we do not fill.
_fields_cache = {}
# (datefmt or default_time_format, whole second) -> strftime text, for the current second.
# Replaced as a whole (one assignment), so threads never see a key with another's text.
_time_cache = (None, None)


def readable(value):
    """An environ value as a log line should show it: environ strings are bytes decoded as
    latin-1 (PEP 3333), so a UTF-8 path such as /café arrives as /cafÃ©; re-decoded as UTF-8
    (undecodable bytes as \\x escapes). ASCII, the common case, is returned as is."""
    if value.isascii():
        return value
    return value.encode('latin-1', 'replace').decode('utf-8', 'backslashreplace')


def _fields(fmt):
    fields = _fields_cache.get(fmt)
    if fields is None and fmt not in _fields_cache:
        names = frozenset(_FIELD.findall(fmt))
        # '%%(' would be a literal; such rare formats take the slow path.
        fields = names if names <= _KNOWN and '%%' not in fmt else None
        _fields_cache[fmt] = fields
    return fields


def _handlers(logger):
    """The handlers ``Logger.callHandlers`` would reach for an INFO record, or None when any
    part of the chain is not stock (then the caller uses ``Logger.info``)."""
    if logging.getLogRecordFactory() is not logging.LogRecord:
        return None
    found = []
    c = logger
    while c is not None:
        if c.filters or c.disabled or type(c) not in (logging.Logger, logging.RootLogger):
            return None
        for h in c.handlers:
            if _INFO < h.level:
                continue
            if type(h) is not logging.StreamHandler or h.filters:
                return None
            f = h.formatter
            if f is None or type(f) is not logging.Formatter \
                    or type(f._style) is not logging.PercentStyle \
                    or f.converter is not time.localtime or f._style._defaults \
                    or _fields(f._style._fmt) is None:
                return None
            found.append(h)
        if not c.propagate:
            break
        c = c.parent
    if not found:
        return None  # logging.lastResort's business
    return found


def _asctime(formatter, created, msecs):
    datefmt = formatter.datefmt or formatter.default_time_format
    global _time_cache
    key = (datefmt, int(created))
    cached_key, text = _time_cache
    if cached_key != key:
        text = time.strftime(datefmt, time.localtime(created))
        _time_cache = (key, text)
    if formatter.datefmt or not formatter.default_msec_format:
        return text
    return formatter.default_msec_format % (text, msecs)


def info(logger, msg, *args):
    """``logger.info(msg, *args)``, the same line on the same streams, cheaper."""
    if not logger.isEnabledFor(_INFO):
        return
    handlers = _handlers(logger)
    if handlers is None:
        logger.info(msg, *args)
        return
    created = time.time()
    message = msg % args if args else msg
    msecs = int((created - int(created)) * 1000) + 0.0
    for h in handlers:
        f = h.formatter
        fields = _fields(f._style._fmt)
        values = {'message': message}
        for field in fields:
            if field == 'name':
                values['name'] = logger.name
            elif field == 'levelname':
                values['levelname'] = _LEVEL_NAME
            elif field == 'levelno':
                values['levelno'] = _INFO
            elif field == 'asctime':
                values['asctime'] = _asctime(f, created, msecs)
            elif field == 'msecs':
                values['msecs'] = msecs
            elif field == 'created':
                values['created'] = created
            elif field == 'process':
                values['process'] = os.getpid() if logging.logProcesses else None
            elif field == 'thread':
                values['thread'] = threading.get_ident() if logging.logThreads else None
            elif field == 'threadName':
                values['threadName'] = (threading.current_thread().name
                                        if logging.logThreads else None)
            elif field == 'relativeCreated':
                values['relativeCreated'] = (created - logging._startTime) * 1000
        h.acquire()
        try:
            try:
                h.stream.write(f._style._fmt % values + h.terminator)
                h.flush()
            except RecursionError:
                raise
            except Exception:
                h.handleError(logger.makeRecord(logger.name, _INFO, '(unknown file)', 0,
                                                msg, args, None))
        finally:
            h.release()
