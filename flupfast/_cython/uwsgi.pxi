# uwsgi codec, compiled: the twin of flupfast/protocols/uwsgi.py (decode_uwsgi_request) with
# the same signature, results and errors. The vars block is scanned in place (no copy), names
# and values go through environ.pxi's str caches and its copy of the last request's environ.
# Included by flupfast/_speedups.pyx after environ.pxi, fastcgi.pxi and scgi.pxi.

from flupfast.limits import MAX_UWSGI_VARS_BYTES
from flupfast.protocols.errors import UWSGIError


cdef inline Py_ssize_t _le16(const unsigned char *p) noexcept:
    return p[0] | (<Py_ssize_t>p[1] << 8)


cdef Py_ssize_t _count_vars(const unsigned char *p, Py_ssize_t end, Py_ssize_t most) noexcept:
    """The pairs the vars block holds (at most ``most``), for the environ's size; a block that
    ends inside a pair counts it (the decoding pass reports it)."""
    cdef Py_ssize_t pos = 0, pairs = 0
    while pos + 2 <= end and pairs < most:
        pos += 2 + _le16(p + pos)
        if pos + 2 > end:
            return pairs + 1
        pos += 2 + _le16(p + pos)
        pairs += 1
    return pairs


cdef Py_ssize_t _vars_pairs(const unsigned char *p, Py_ssize_t end, _Pair *pairs) noexcept:
    """The spans of the vars block's pairs, or -1 for anything _uwsgi_environ would reject
    and for more than ``_TEMPLATE_PAIRS`` pairs."""
    cdef Py_ssize_t pos = 0, count = 0, size
    while pos < end:
        if count == _TEMPLATE_PAIRS or end - pos < 2:
            return -1
        size = _le16(p + pos)
        pos += 2
        if size == 0 or end - pos < size + 2:
            return -1
        pairs[count].name = p + pos
        pairs[count].name_len = size
        pos += size
        size = _le16(p + pos)
        pos += 2
        if end - pos < size:
            return -1
        pairs[count].value = p + pos
        pairs[count].value_len = size
        pos += size
        count += 1
    return count


cdef tuple _uwsgi_vars(const unsigned char *p, Py_ssize_t end, Py_ssize_t max_pairs):
    cdef _Pair pairs[<int>_TEMPLATE_PAIRS]
    cdef Py_ssize_t count = _vars_pairs(p, end, pairs)
    cdef dict environ = None
    cdef str value
    # A copy of the last request's dict where the names are the same (environ.pxi).
    if count <= max_pairs:
        environ = _uwsgi_template.copy_for(pairs, count)
    if environ is None:
        # Sized by the spans counted, or (none: malformed or too many) counted leniently.
        environ = _uwsgi_environ(p, end, max_pairs, count if count >= 0
                                 else _count_vars(p, end, max_pairs))
        _uwsgi_template.remember(environ, pairs, count)
    value = environ.get('CONTENT_LENGTH', '')
    if not value:
        return environ, 0
    if not _all_digits(PyUnicode_1BYTE_DATA(value), PyUnicode_GET_LENGTH(value)):
        raise UWSGIError('invalid CONTENT_LENGTH %r' % value)
    return environ, _content_length(value, UWSGIError)


cdef dict _uwsgi_environ(const unsigned char *p, Py_ssize_t end, Py_ssize_t max_pairs,
                         Py_ssize_t counted):
    # The pure twin's checks, in its order (see _decode_vars there); ``counted`` sizes the dict.
    cdef Py_ssize_t pos = 0, size, pairs = 0
    cdef dict environ = flupfast_dict_presized(counted + FLUPFAST_GATEWAY_KEYS)
    cdef str name, value
    cdef object previous
    cdef bint content_length
    while pos < end:
        if pairs == max_pairs:
            raise UWSGIError('more than %d vars' % max_pairs)
        if end - pos < 2:
            raise UWSGIError('vars block ends inside a key size')
        size = _le16(p + pos)
        pos += 2
        if size == 0:
            raise UWSGIError('empty var name')
        if end - pos < size:
            raise UWSGIError('key of %d bytes runs past the vars block' % size)
        content_length = size == 14 and memcmp(p + pos, b'CONTENT_LENGTH', 14) == 0
        name = _decode_name(p + pos, size)
        pos += size
        if end - pos < 2:
            raise UWSGIError('vars block ends inside the value size of %r' % name)
        size = _le16(p + pos)
        pos += 2
        if end - pos < size:
            raise UWSGIError('value of %d bytes runs past the vars block' % size)
        value = _decode_value(p + pos, size)
        pos += size
        # The last value wins, as in the pure twin; a repeated CONTENT_LENGTH must agree.
        if content_length:
            previous = environ.get(name, value)
            if value != previous:
                raise UWSGIError('conflicting CONTENT_LENGTH %r after %r' % (value, previous))
        environ[name] = value
        pairs += 1
    return environ


def decode_uwsgi_request(data, max_vars=MAX_UWSGI_VARS_BYTES, max_pairs=MAX_PARAMS_PAIRS):
    """Decode the packet header and vars block at the start of ``data`` (any bytes-like).

    Returns None while they are incomplete, else ``(environ, content_length, used)``.
    """
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return _decode_uwsgi_at(<const unsigned char *>view.buf, view.len, max_vars,
                                max_pairs)
    finally:
        PyBuffer_Release(&view)


cdef object _decode_uwsgi_at(const unsigned char *p, Py_ssize_t end, Py_ssize_t cap,
                             Py_ssize_t pairs_cap):
    """decode_uwsgi_request on ``p[:end]``."""
    cdef Py_ssize_t size
    cdef tuple decoded
    if end == 0:
        return None
    if p[0] != 0:
        raise UWSGIError('modifier1 %d is not served (only 0, a WSGI request)' % p[0])
    if end < 4:
        return None
    size = _le16(p + 1)
    if size > cap:
        raise UWSGIError('uwsgi vars block of %d bytes exceeds the %d-byte cap'
                         % (size, cap))
    if end < 4 + size:
        return None
    decoded = _uwsgi_vars(p + 4, size, pairs_cap)
    return decoded[0], decoded[1], 4 + size
