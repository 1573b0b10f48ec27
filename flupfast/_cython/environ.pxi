# The variables every codec decodes (FastCGI's PARAMS, SCGI's header netstring, uwsgi's vars
# block), compiled: the str caches of their names and values, and the environ each codec keeps
# from its last request to copy. No twin of its own: the codecs' results are their pure twins'.
# Included by flupfast/_speedups.pyx before the codecs.

from sys import intern as _sys_intern


# Names repeat from request to request (REQUEST_METHOD, HTTP_HOST...): a small direct-mapped
# cache of their str objects saves an allocation and the str hash (cached inside the object) per
# pair. Keyed by the raw bytes and checked with memcmp, so a collision only costs a miss.
cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* _PyDict_NewPresized: CPython's own (BUILD_MAP), exported by 3.9-3.14; else grow. */
    #if defined(PYPY_VERSION) || defined(Py_LIMITED_API) || PY_VERSION_HEX >= 0x030F0000
    #define flupfast_dict_presized(n) PyDict_New()
    #else
    #define flupfast_dict_presized(n) ((n) <= 8 ? PyDict_New() : _PyDict_NewPresized(n))
    #endif
    /* The environ a codec builds gets the gateway's keys next (wsgi.version, input, errors,
       multithread, multiprocess, run_once, url_scheme, file_wrapper; PATH_INFO,
       QUERY_STRING...): room for them, so that those inserts do not resize it again. */
    #define FLUPFAST_GATEWAY_KEYS 12

    /* The name cache's slot for p[:n] (1 <= n): a hash of the length and the first and last
       words, in constant time; its quality only affects the hit rate. */
    static inline size_t flupfast_name_slot(const unsigned char *p, Py_ssize_t n, size_t mask) {
        uint64_t a, b;
        if (n >= 8) {
            memcpy(&a, p, 8);
            memcpy(&b, p + n - 8, 8);
        } else if (n >= 4) {
            uint32_t x, y;
            memcpy(&x, p, 4);
            memcpy(&y, p + n - 4, 4);
            a = x;
            b = y;
        } else {
            a = p[0];
            b = ((uint64_t)p[n - 1] << 8) | p[n / 2];
        }
        a = (a ^ (uint64_t)n) * 0x9E3779B97F4A7C15ULL;
        b = b * 0xC2B2AE3D27D4EB4FULL;
        return (size_t)((a ^ b ^ (a >> 29)) >> 32) & mask;
    }
    """
    dict flupfast_dict_presized(Py_ssize_t n)
    Py_ssize_t FLUPFAST_GATEWAY_KEYS
    size_t flupfast_name_slot(const unsigned char *p, Py_ssize_t n, size_t mask) noexcept nogil

cdef enum:
    _NAME_CACHE_SLOTS = 256     # a power of two (pairs of ways); fronts send 20-60 names
    _NAME_CACHE_MAX_LEN = 40    # longer names (and values) are rare and get a fresh str

# Owned references to 1-byte-kind str, or NULL. Names repeat from request to request, and so
# do most values (SERVER_PROTOCOL, GATEWAY_INTERFACE, SERVER_SOFTWARE, REMOTE_ADDR, HTTP_HOST,
# the methods...): one cache each, so that a value that changes every request (REMOTE_PORT)
# evicts only values, never a name.
cdef PyObject *_name_cache[_NAME_CACHE_SLOTS]
cdef PyObject *_value_cache[_NAME_CACHE_SLOTS]

# The names servers and apps look up by a constant of their code, which CPython interns: a
# cached name that is that very object is found by identity, where an equal copy costs a string
# comparison at every lookup (about 250 instructions). Not sys.intern on whatever a client
# sends: 3.12 made interned strings immortal, and a client's made-up names would pile up.
cdef dict _well_known_names = {_sys_intern(name): _sys_intern(name) for name in (
    'AUTH_TYPE', 'CONTENT_LENGTH', 'CONTENT_TYPE', 'DOCUMENT_ROOT', 'DOCUMENT_URI',
    'GATEWAY_INTERFACE', 'HTTPS', 'PATH_INFO', 'PATH_TRANSLATED', 'QUERY_STRING',
    'REDIRECT_STATUS', 'REMOTE_ADDR', 'REMOTE_HOST', 'REMOTE_PORT', 'REMOTE_USER',
    'REQUEST_METHOD', 'REQUEST_SCHEME', 'REQUEST_URI', 'SCGI', 'SCRIPT_FILENAME', 'SCRIPT_NAME',
    'SERVER_ADDR', 'SERVER_NAME', 'SERVER_PORT', 'SERVER_PROTOCOL', 'SERVER_SOFTWARE',
    'UWSGI_SCHEME', 'WSGI_SCRIPT_NAME', 'HTTP_ACCEPT', 'HTTP_ACCEPT_ENCODING',
    'HTTP_ACCEPT_LANGUAGE', 'HTTP_AUTHORIZATION', 'HTTP_CONNECTION', 'HTTP_CONTENT_LENGTH',
    'HTTP_CONTENT_TYPE', 'HTTP_COOKIE', 'HTTP_HOST', 'HTTP_IF_MODIFIED_SINCE',
    'HTTP_IF_NONE_MATCH', 'HTTP_ORIGIN', 'HTTP_REFERER', 'HTTP_USER_AGENT',
    'HTTP_X_FORWARDED_FOR', 'HTTP_X_FORWARDED_HOST', 'HTTP_X_FORWARDED_PROTO',
    'HTTP_X_REQUESTED_WITH')}


cdef inline str _cached_str(PyObject **cache, const unsigned char *p, Py_ssize_t n,
                            dict canonical):
    """``p[:n]`` decoded latin-1, the same str object as last time when its slot of ``cache``
    still holds these bytes (a str is immutable: sharing it is invisible); at a miss,
    ``canonical``'s object for that text when it has one."""
    cdef size_t slot
    cdef PyObject *cached
    cdef PyObject *older
    cdef str text
    if n > _NAME_CACHE_MAX_LEN or n < 2:  # CPython already shares '' and 1-char strings
        return PyUnicode_DecodeLatin1(<char *>p, n, NULL)
    # Two ways per slot pair: two names of one slot (nginx's uwsgi_params have DOCUMENT_ROOT
    # and REMOTE_PORT) would otherwise evict each other at every request.
    slot = flupfast_name_slot(p, n, _NAME_CACHE_SLOTS - 1) & ~(<size_t>1)
    cached = cache[slot]
    if _holds(cached, p, n):
        return <str>cached
    older = cache[slot + 1]
    if _holds(older, p, n):
        return <str>older
    text = PyUnicode_DecodeLatin1(<char *>p, n, NULL)
    if canonical is not None:
        text = canonical.get(text, text)
    # The newcomer takes the first way, whose entry moves to the second; the older one goes.
    Py_INCREF(text)
    cache[slot] = <PyObject *>text
    cache[slot + 1] = cached
    Py_XDECREF(older)  # a str: its deallocation runs no Python code
    return text


cdef inline bint _holds(PyObject *cached, const unsigned char *p, Py_ssize_t n) noexcept:
    return (cached != NULL and PyUnicode_GET_LENGTH(<object>cached) == n
            and memcmp(PyUnicode_1BYTE_DATA(<object>cached), p, n) == 0)


cdef str _decode_name(const unsigned char *p, Py_ssize_t n):
    return _cached_str(_name_cache, p, n, _well_known_names)


cdef str _decode_value(const unsigned char *p, Py_ssize_t n):
    return _cached_str(_value_cache, p, n, None)


# A front sends the same names in the same order from request to request (nginx's
# fastcgi_params, scgi_params and uwsgi_params, then the client's headers), and most values too:
# a copy of the last request's dict (one block copy of its table, CPython's PyDict_Copy) with
# the values that differ set again costs a fraction of decoding and inserting every pair.

ctypedef struct _Pair:
    const unsigned char *name
    Py_ssize_t name_len
    const unsigned char *value
    Py_ssize_t value_len

cdef enum:
    _TEMPLATE_PAIRS = 96  # nginx's *_params and a browser's headers: 20-60 pairs
    # Names sent again that a template follows: nginx's stock params, then a location's own
    # SCRIPT_NAME or PATH_INFO. Each repeat is looked for among the names before it.
    _TEMPLATE_REPEATS = 8


@cython.final
cdef class _EnvironTemplate:
    """One codec's last environ, kept to be copied, and the names of the pairs it came from.

    The kept dict is never handed out, only copies of it, so its str objects (which ``names``
    and ``values`` borrow from it) stay as they were when kept. A name may come more than once:
    the dict holds its last value at its first place, so only a name's last pair has a value
    to compare (``values[i]`` is NULL for the others)."""
    cdef dict environ
    cdef Py_ssize_t count  # 0: nothing kept
    cdef PyObject *names[<int>_TEMPLATE_PAIRS]
    cdef PyObject *values[<int>_TEMPLATE_PAIRS]

    cdef dict copy_for(self, const _Pair *pairs, Py_ssize_t count):
        """A new environ of these ``count`` pairs when their names are the kept pairs' names
        in the kept order; None otherwise."""
        cdef Py_ssize_t i, j, changed = 0
        cdef Py_ssize_t differ[<int>_TEMPLATE_PAIRS]
        cdef PyObject *changed_names[<int>_TEMPLATE_PAIRS]  # borrowed from kept
        cdef dict environ
        # Held here: the copy's allocation may run a collection (up to 3.11), whose finalizers
        # (or another thread they hand the GIL to) may decode and replace this template; the
        # dict it keeps, and the names borrowed from it, stay as they are while held.
        cdef dict kept = self.environ
        if count != self.count or count <= 0:
            return None
        for i in range(count):
            if not _holds(self.names[i], pairs[i].name, pairs[i].name_len):
                return None
            if self.values[i] != NULL and \
                    not _holds(self.values[i], pairs[i].value, pairs[i].value_len):
                differ[changed] = i
                changed_names[changed] = self.names[i]
                changed += 1
        environ = PyDict_Copy(kept)
        for j in range(changed):
            i = differ[j]
            environ[<str>changed_names[j]] = _decode_value(pairs[i].value, pairs[i].value_len)
        return environ

    cdef int remember(self, dict environ, const _Pair *pairs, Py_ssize_t count) except -1:
        """Keep a copy of ``environ``, which a codec has just decoded from these ``count``
        pairs (``count`` < 0: more than a template holds). Not with more than
        ``_TEMPLATE_REPEATS`` repeats, nor a repeated CONTENT_LENGTH (the codecs check that
        its values agree)."""
        cdef Py_ssize_t i, k, keys = 0, position = 0
        cdef PyObject *name = NULL
        cdef PyObject *value = NULL
        cdef PyObject *key_names[<int>_TEMPLATE_PAIRS]
        cdef PyObject *key_values[<int>_TEMPLATE_PAIRS]
        cdef Py_ssize_t key_of[<int>_TEMPLATE_PAIRS]
        cdef unsigned char seen[<int>_TEMPLATE_PAIRS]
        cdef dict kept
        self.count = 0  # until the end, the arrays may point into a dict about to go
        if count <= 0 or count > _TEMPLATE_PAIRS or \
                not 0 <= count - len(environ) <= _TEMPLATE_REPEATS:
            return 0
        kept = PyDict_Copy(environ)
        while PyDict_Next(kept, &position, &name, &value):
            key_names[keys] = name
            key_values[keys] = value
            keys += 1
        # Each pair's key: the next one where its name comes the first time, else an earlier
        # one (the dict's order is the first times').
        k = 0
        for i in range(count):
            if k < keys and _holds(key_names[k], pairs[i].name, pairs[i].name_len):
                key_of[i] = k
                k += 1
                continue
            key_of[i] = -1
            for position in range(k):
                if _holds(key_names[position], pairs[i].name, pairs[i].name_len):
                    key_of[i] = position
                    break
            if key_of[i] < 0 or <str>key_names[key_of[i]] == 'CONTENT_LENGTH':
                return 0
        if k != keys:
            return 0
        # A key's value is its last pair's: the last pair of each key compares it.
        memset(seen, 0, keys)
        for i in range(count - 1, -1, -1):
            k = key_of[i]
            self.names[i] = key_names[k]
            self.values[i] = NULL if seen[k] else key_values[k]
            seen[k] = 1
        self.environ = kept  # the one it replaces goes only now: nothing above borrowed from it
        self.count = count
        return 0


cdef _EnvironTemplate _fcgi_template = _EnvironTemplate()
cdef _EnvironTemplate _scgi_template = _EnvironTemplate()
cdef _EnvironTemplate _uwsgi_template = _EnvironTemplate()
