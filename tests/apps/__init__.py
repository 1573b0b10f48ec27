"""WSGI applications used by the integration tests and the benchmarks."""
