# cython: language_level=3
# cython: auto_pickle=False
# cython: embedsignature=True
# cython: cdivision=True
"""The compiled twins of flupfast's hot path, one extension built from per-concern .pxi files.

Each public name here has a pure-Python twin with the same name, signature, results and errors
(protocols/fastcgi.py, protocols/scgi.py, protocols/uwsgi.py, protocols/ajp.py, body.py,
scgi_body.py, output.py, sockio.py, gateway.py, ops/proctitle.py, scgi_connection.py,
fastcgi_connection.py, serving/prefork/child.py, serving/leader.py; the list is _impl.TWINS);
only flupfast._impl picks between them, and tests run both.
Errors and constants are imported from the pure modules, never redefined.
"""
# cdivision: the only divisions are of non-negative sizes by positive ones.
# boundscheck and wraparound stay at their safe defaults: the hot loops index no Python objects
# or typed memoryviews but raw pointers, each access guarded by an explicit length check beside
# it (and covered by the byte-at-a-time and fuzz tests), so the checks cost nothing there.
# The classes built at every request or connection (the request path's input streams, body
# sources and responses, FastCGI's parser and chain) keep their freed objects for reuse
# (``cython.freelist``): no allocator and collector calls for them (section 18 of
# bench/profile-new-connection.md). A cdef subclass's deallocation hands over to its base's,
# which keeps only objects of its own size: the output streams (PartsWriter's subclasses, which
# add fields) have no list, and Python subclasses (heap types) never use one.

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport (
    PyByteArray_AS_STRING, PyByteArray_FromStringAndSize, PyByteArray_GET_SIZE,
    PyByteArray_Resize)
from cpython.dict cimport PyDict_Copy, PyDict_Next
from cpython.exc cimport PyErr_CheckSignals, PyErr_SetFromErrno
from cpython.bytes cimport (
    PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize,
    PyBytes_GET_SIZE)
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.memoryview cimport PyMemoryView_FromObject, PyMemoryView_GET_BUFFER
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport (
    PyUnicode_1BYTE_DATA, PyUnicode_DecodeLatin1, PyUnicode_GET_LENGTH)
from libc.string cimport memchr, memcmp, memcpy, memset


cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX
    # Declared here rather than cimported from cpython.number: with exc=NULL an int too large
    # for Py_ssize_t saturates instead of raising, as Python's own size arguments do.
    Py_ssize_t PyNumber_AsSsize_t(object o, PyObject *exc) except? -1
    object PyNumber_Index(object o)


include "_cython/environ.pxi"
include "_cython/fastcgi.pxi"
include "_cython/scgi.pxi"
include "_cython/uwsgi.pxi"
include "_cython/ajp.pxi"
include "_cython/body.pxi"
include "_cython/prefork.pxi"
include "_cython/leader.pxi"
include "_cython/output.pxi"
include "_cython/sockio.pxi"
include "_cython/gateway.pxi"
include "_cython/proctitle.pxi"
include "_cython/state.pxi"
include "_cython/scgi_serve.pxi"
include "_cython/connection.pxi"
include "_cython/fastcgi_serve.pxi"
