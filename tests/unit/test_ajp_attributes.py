"""AJP13 request attributes become environ keys only as flup 1.0.3 makes them (docs/security.md):
each attribute code under flup's name (flup ajp_base.py:116-128, decodeAttribute, addAttribute),
a req_attribute (0x0A: Apache's AJP_* variables, the web server's word) under its own name;
the secret and the stored method never; and no attribute can replace a wsgi.* key.
"""
import pytest

from flupfast import gateway
from tests import ajp_client as client

flup_ajp = pytest.importorskip('flup.server.ajp_base')

ATTRIBUTES = [('context', '/ctx'), ('servlet_path', '/srv'), ('remote_user', 'alice'),
              ('auth_type', 'Basic'), ('query_string', 'a=1'), ('route', 'w1'),
              ('ssl_cert', 'CERT'), ('ssl_cipher', 'AES'), ('ssl_session', 'S1'),
              (0x0A, ('AJP_REMOTE_PORT', '4711')), (0x0B, 256)]


def flups_keys(attributes):
    """{name: value} flup's decodeAttribute + addAttribute make of ``attributes``."""
    data = b''.join(client.attribute(n, v) for n, v in attributes) + b'\xff'
    out, pos = {}, 0
    while True:
        name, value, pos = flup_ajp.decodeAttribute(data, pos)
        if name is None:
            return out
        value = value.decode('latin-1') if isinstance(value, bytes) else value
        out[name.decode('latin-1')] = value


def our_environ(backend, attributes, method='GET'):
    payload = client.forward_request(method=method, attributes=attributes)
    return backend.decode_forward_request(payload)[0]


def test_attributes_take_flups_names(backend):
    base = our_environ(backend, [])
    environ = our_environ(backend, ATTRIBUTES)
    added = {k: v for k, v in environ.items() if k not in base}
    assert added == flups_keys(ATTRIBUTES)
    assert added['REMOTE_USER'] == 'alice' and added['SSL_KEY_SIZE'] == '256'


def test_secret_and_stored_method_are_never_keys(backend):
    """flup has no name for them (its table stops at 0x0B); we use them and expose neither."""
    base = our_environ(backend, [])
    environ = our_environ(backend, [('secret', 'pw'), ('query_string', 'q')], method='PATCH')
    assert environ['REQUEST_METHOD'] == 'PATCH'
    assert set(environ) - set(base) == {'QUERY_STRING'}
    assert 'pw' not in environ.values()


def test_a_req_attribute_cannot_replace_wsgi_keys(backend):
    environ = our_environ(backend, [(0x0A, ('wsgi.url_scheme', 'https')),
                                    (0x0A, ('wsgi.input', 'x'))])
    gateway.build_environ(environ, None, 'stdin', 'stderr', True, False, False)
    assert (environ['wsgi.url_scheme'], environ['wsgi.input']) == ('http', 'stdin')
