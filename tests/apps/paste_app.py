"""A Paste Deploy app factory for tests/unit/test_paste_factory.py: the probe app, with an
``X-Paste-Greeting`` response header taken from the ini file's ``greeting`` (to show the ini's
values reached the app)."""
from tests.apps import probe


def make_app(global_conf, greeting='none'):
    def app(environ, start_response):
        def start(status, headers, exc_info=None):
            return start_response(status, list(headers) + [('X-Paste-Greeting', greeting)],
                                  exc_info)
        return probe.app(environ, start)
    return app
