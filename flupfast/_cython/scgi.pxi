# SCGI codec, compiled: the twin of flupfast/protocols/scgi.py (decode_request) with the same
# signature, results and errors. The header netstring is scanned in place (no copy of the
# block), names and values go through environ.pxi's str caches and its copy of the last
# request's environ. Included by flupfast/_speedups.pyx after environ.pxi and fastcgi.pxi.

from flupfast.limits import MAX_SCGI_HEADER_BYTES
from flupfast.protocols.errors import SCGIError
from flupfast.protocols.scgi import parse_content_length as _scgi_content_length


cdef int _scgi_digits(Py_ssize_t n) noexcept:
    cdef int digits = 1
    while n >= 10:
        n //= 10
        digits += 1
    return digits


cdef bint _all_digits(const unsigned char *p, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] < 0x30 or p[i] > 0x39:
            return False
    return True


cdef object _content_length(str text, error):
    """CONTENT_LENGTH's value, all ASCII digits (the caller checked), as the pure twin's
    parse_content_length gives it: up to 18 digits counted here (below 2**63, no check
    needed), longer ones (leading zeros, or too large: its error) through it."""
    cdef Py_ssize_t i, n = PyUnicode_GET_LENGTH(text)
    cdef const unsigned char *p = PyUnicode_1BYTE_DATA(text)
    cdef long long value = 0
    if n > 18:
        return _scgi_content_length(text, error)
    for i in range(n):
        value = value * 10 + (p[i] - 0x30)
    return value


cdef Py_ssize_t _netstring_fields(const unsigned char *p, const unsigned char *end,
                                  _Pair *pairs) noexcept:
    """The NUL-ended fields of a header block that ends with a NUL, counted; while they are
    at most ``_TEMPLATE_PAIRS`` pairs, the spans of each name and value go to ``pairs``."""
    cdef Py_ssize_t fields = 0
    cdef const unsigned char *nul
    while p < end:
        nul = <const unsigned char *>memchr(p, 0, end - p)
        if fields < 2 * _TEMPLATE_PAIRS:
            if fields & 1:
                pairs[fields >> 1].value = p
                pairs[fields >> 1].value_len = nul - p
            else:
                pairs[fields >> 1].name = p
                pairs[fields >> 1].name_len = nul - p
        fields += 1
        p = nul + 1
    return fields


cdef dict _scgi_environ(const unsigned char *p, const unsigned char *end, Py_ssize_t count):
    """The header block's pairs decoded (it ends with a NUL and holds ``count`` pairs)."""
    cdef dict environ = flupfast_dict_presized(count + FLUPFAST_GATEWAY_KEYS)
    cdef const unsigned char *name = p
    cdef const unsigned char *value
    cdef const unsigned char *nul
    cdef Py_ssize_t name_len, value_len
    cdef str key, text
    while name < end:
        nul = <const unsigned char *>memchr(name, 0, end - name)
        name_len = nul - name
        value = nul + 1
        nul = <const unsigned char *>memchr(value, 0, end - value)
        value_len = nul - value
        if name_len == 0:
            raise SCGIError('empty header name')
        key = _decode_name(name, name_len)
        text = _decode_value(value, value_len)
        # The last value wins, as in the pure twin; a repeated CONTENT_LENGTH must agree.
        if name != p and key == 'CONTENT_LENGTH' and text != environ.get(key, text):
            raise SCGIError('conflicting CONTENT_LENGTH %r after %r' % (text, environ[key]))
        environ[key] = text
        name = nul + 1
    return environ


cdef tuple _scgi_headers(const unsigned char *p, Py_ssize_t n, Py_ssize_t max_pairs):
    # The pure twin's checks, in its order (see _decode_headers there).
    cdef const unsigned char *end = p + n
    cdef const unsigned char *value
    cdef Py_ssize_t fields, name_len, value_len, count
    cdef dict environ
    cdef object length_text, scgi
    cdef _Pair pairs[<int>_TEMPLATE_PAIRS]
    if n == 0:
        raise SCGIError('missing CONTENT_LENGTH (empty header block)')
    if p[n - 1] != 0:
        raise SCGIError('header block does not end with NUL')
    fields = _netstring_fields(p, end, pairs)
    if fields % 2:
        raise SCGIError('header block has a name without a value')
    if fields // 2 > max_pairs:  # (2 * max_pairs may not fit)
        raise SCGIError('more than %d headers' % max_pairs)
    # A copy of the last request's dict where the names are the same (environ.pxi).
    count = fields // 2 if fields <= 2 * _TEMPLATE_PAIRS else -1
    environ = _scgi_template.copy_for(pairs, count)
    if environ is None:
        environ = _scgi_environ(p, end, fields // 2)
        _scgi_template.remember(environ, pairs, count)
    # The first pair: p[0:14] is its name when it is CONTENT_LENGTH.
    name_len = (<const unsigned char *>memchr(p, 0, n)) - p
    if name_len != 14 or memcmp(p, b'CONTENT_LENGTH', 14) != 0:
        if 'CONTENT_LENGTH' in environ:
            raise SCGIError('CONTENT_LENGTH is not the first header')
        raise SCGIError('missing CONTENT_LENGTH')
    length_text = environ['CONTENT_LENGTH']
    value = p + 15
    value_len = (<const unsigned char *>memchr(value, 0, end - value)) - value
    if value_len == 0 or not _all_digits(value, value_len):
        raise SCGIError('invalid CONTENT_LENGTH %r' % length_text)
    scgi = environ.get('SCGI')
    # nginx sends SCGI=1 only through the stock scgi_params, so a site's own scgi_param list
    # may lack it: accepted, as flup does (compat/known_differences.py scgi-netstring-strict).
    if scgi is not None and scgi != '1':
        raise SCGIError('unsupported SCGI version %r' % scgi)
    return environ, _content_length(length_text, SCGIError)


def decode_request(data, max_header=MAX_SCGI_HEADER_BYTES, max_pairs=MAX_PARAMS_PAIRS):
    """Decode the header netstring at the start of ``data`` (any bytes-like).

    Returns None while the netstring is incomplete, else ``(environ, content_length, used)``.
    """
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return _decode_scgi_at(<const unsigned char *>view.buf, view.len, max_header,
                               max_pairs)
    finally:
        PyBuffer_Release(&view)


cdef object _decode_scgi_at(const unsigned char *p, Py_ssize_t end, Py_ssize_t cap,
                            Py_ssize_t pairs_cap):
    """decode_request on ``p[:end]``."""
    cdef Py_ssize_t pos = 0, length = 0, start, stop
    cdef int max_digits = _scgi_digits(cap)
    cdef bint over = False  # the digits say more than a Py_ssize_t holds (a cap near its max)
    cdef tuple decoded
    while pos < end and 0x30 <= p[pos] <= 0x39:
        if length > (PY_SSIZE_T_MAX - 9) // 10:
            over = True
        else:
            length = length * 10 + (p[pos] - 0x30)
        pos += 1
        if pos > max_digits:
            raise SCGIError('netstring length has more than %d digits (header block cap '
                            '%d bytes)' % (max_digits, cap))
    if pos > 1 and p[0] == 0x30:
        raise SCGIError('invalid netstring length %r: leading zero'
                        % PyBytes_FromStringAndSize(<char *>p, pos))
    if over or length > cap:
        raise SCGIError('SCGI header block of %d bytes exceeds the %d-byte cap'
                        % (int(PyBytes_FromStringAndSize(<char *>p, pos)), cap))
    if pos == end:
        return None
    if p[pos] != 0x3A:
        raise SCGIError('invalid netstring length: expected digits then ":", got %r'
                        % PyBytes_FromStringAndSize(<char *>p, min(pos + 1, 16)))
    if pos == 0:
        raise SCGIError('invalid netstring length: empty')
    start = pos + 1
    stop = start + length
    if end <= stop:
        return None
    if p[stop] != 0x2C:
        raise SCGIError('netstring not terminated by ","')
    decoded = _scgi_headers(p + start, length, pairs_cap)
    return decoded[0], decoded[1], stop + 1
