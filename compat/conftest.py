"""compat/: the ``differs`` marker (a differential scenario's known_differences keys)."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "differs(*keys): the scenario depends on these compat/known_differences.py "
        "entries (flup's behaviour there is recorded, flupfast's asserted)")
