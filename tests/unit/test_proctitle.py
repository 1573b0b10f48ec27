"""Process titles without a server: the master and worker titles, the per-request busy/idle
switch, and that everything is a no-op when titles are off or setproctitle is missing."""
import pytest

from flupfast import gateway, ops
from flupfast.ops import proctitle
from tests.conftest import install_backend


@pytest.fixture
def titles(monkeypatch):
    seen = []
    monkeypatch.setattr(proctitle, '_set_title', seen.append)
    yield seen
    proctitle.disable()
    ops.put_on_duty('title', None)


def test_master_then_worker_busy_and_idle(titles, backend, monkeypatch):
    """On both backends: the compiled WorkerTitle is the pure one's twin."""
    install_backend(monkeypatch, backend)
    assert proctitle.enable('site.wsgi:app')
    ops.become_worker(3)
    observer = gateway._observer
    observer.end(observer.begin({'REQUEST_METHOD': 'POST', 'REQUEST_URI': '/form?x=1'}),
                 None, False)
    assert titles == ['flupfast: master [site.wsgi:app]',
                      'flupfast: worker 3 [site.wsgi:app] idle',
                      'flupfast: worker 3 [site.wsgi:app] busy POST /form?x=1',
                      'flupfast: worker 3 [site.wsgi:app] idle']
    assert type(observer) is backend.WorkerTitle
    observer.begin({'PATH_INFO': '/p'})
    assert titles[-1] == 'flupfast: worker 3 [site.wsgi:app] busy - /p'


def test_off_means_no_observer_and_no_title(titles):
    ops.become_worker(1)
    assert gateway._observer is None and titles == []


def test_without_setproctitle_nothing_happens(monkeypatch):
    monkeypatch.setattr(proctitle, '_set_title', None)
    assert not proctitle.enable('app') and not proctitle.enabled()
    assert proctitle.become_worker(1) is None
