"""ThreadPool: flup's semantics (spares, limits, refusal, die-off), its bugs fixed (initial
count above maxThreads, swallowed exceptions, deprecated APIs, unbounded shutdown)."""
import logging
import sys
import threading
import time

import pytest

from flupfast.serving.threadpool import ThreadPool
from flupfast.server import threadpool as facade
from tests.waiting import wait_until

WAIT = 10.0  # generous bound for wait_until


class BlockingJob:
    """Runs until released; records that it started."""

    def __init__(self):
        self.started = threading.Event()
        self.release = threading.Event()
        self.thread = None

    def run(self):
        self.thread = threading.current_thread()
        self.started.set()
        self.release.wait(WAIT)


@pytest.fixture
def pools():
    made = []

    def make(cls=ThreadPool, *args, **kw):
        pool = cls(*args, **kw)
        made.append(pool)
        return pool

    yield make
    for pool in made:
        pool.shutdown(timeout=WAIT)


def test_starts_max_spare_threads_at_construction(pools):
    pool = pools(min_spare=1, max_spare=3)
    assert pool.worker_count == 3
    wait_until(lambda: pool.idle_count == 3, WAIT)


def test_initial_threads_never_above_max_threads(pools):
    # flup starts maxSpare threads even when maxThreads is lower; maxThreads is a cap from the
    # first thread on.
    pool = pools(min_spare=1, max_spare=5, max_threads=2)
    assert pool.worker_count == 2
    assert pool.max_threads == 2


def test_max_threads_is_at_least_min_spare(pools):
    pool = pools(min_spare=3, max_spare=3, max_threads=1)
    assert pool.max_threads == 3  # flup threadpool.py:47
    assert pool.worker_count == 3


def test_grows_to_keep_min_spare_idle(pools):
    pool = pools(min_spare=1, max_spare=2)
    jobs = [BlockingJob() for _ in range(6)]
    try:
        for job in jobs:
            assert pool.add_job(job, allow_queuing=False)
        for job in jobs:
            assert job.started.wait(WAIT)
        # Six jobs run at once, each in its own thread: threads are added on demand, when a
        # job arrives and fewer than min_spare are free (flup threadpool.py:93-101).
        assert len({job.thread for job in jobs}) == 6
        assert pool.worker_count == 6
        assert pool.idle_count == 0
    finally:
        for job in jobs:
            job.release.set()


def test_burst_grows_instead_of_queuing_behind_busy_threads(pools):
    # flup counted a thread idle until it dequeued its job, so jobs added in a burst queued
    # behind busy threads; with kept-alive connections they could wait forever.
    pool = pools(min_spare=1, max_spare=1)
    jobs = [BlockingJob() for _ in range(20)]
    try:
        with pool._cond:  # hold the workers back: every add sees a stale "idle" thread
            for job in jobs:
                assert pool.add_job(job, allow_queuing=False)
        for job in jobs:
            assert job.started.wait(WAIT)
        assert len({job.thread for job in jobs}) == 20
    finally:
        for job in jobs:
            job.release.set()


def test_refuses_without_queuing_when_full(pools):
    pool = pools(min_spare=1, max_spare=2, max_threads=2)
    jobs = [BlockingJob(), BlockingJob()]
    try:
        for job in jobs:
            assert pool.add_job(job, allow_queuing=False)
            assert job.started.wait(WAIT)
        extra = BlockingJob()
        assert pool.add_job(extra, allow_queuing=False) is False
        assert pool.worker_count == 2
        # With queuing allowed (the default) it waits for a free thread.
        assert pool.add_job(extra) is True
        assert not extra.started.wait(0.05)
        jobs[0].release.set()
        assert extra.started.wait(WAIT)
        extra.release.set()
    finally:
        for job in jobs:
            job.release.set()


def test_worker_exits_after_job_when_max_spare_idle(pools):
    pool = pools(min_spare=1, max_spare=2)
    jobs = [BlockingJob() for _ in range(5)]
    try:
        for job in jobs:
            assert pool.add_job(job)
            assert job.started.wait(WAIT)
        assert pool.worker_count == 5
    finally:
        for job in jobs:
            job.release.set()
    # Extra threads leave once max_spare are idle (flup threadpool.py:143-151).
    wait_until(lambda: pool.worker_count == 2 and pool.idle_count == 2, WAIT)


def test_job_exception_is_logged_with_traceback(pools, caplog):
    class Boom:
        def run(self):
            raise RuntimeError("kaboom")

    pool = pools(min_spare=1, max_spare=1)
    with caplog.at_level(logging.ERROR, logger="flupfast"):
        assert pool.add_job(Boom())
        wait_until(lambda: any("kaboom" in (r.exc_text or "") or r.exc_info
                               for r in caplog.records), WAIT)
    record = caplog.records[0]
    assert record.name == "flupfast"
    assert record.exc_info and record.exc_info[0] is RuntimeError
    # The worker survived.
    job = BlockingJob()
    assert pool.add_job(job)
    assert job.started.wait(WAIT)
    job.release.set()


def test_shutdown_is_bounded_and_stops_idle_workers():
    pool = ThreadPool(min_spare=1, max_spare=3)
    job = BlockingJob()
    try:
        assert pool.add_job(job)
        assert job.started.wait(WAIT)
        started = time.monotonic()
        pool.shutdown(timeout=0.2)
        assert time.monotonic() - started < WAIT
        assert pool.worker_count == 1  # only the busy one is left
        assert pool.add_job(BlockingJob()) is False  # stopped pools refuse
    finally:
        job.release.set()
    wait_until(lambda: pool.worker_count == 0, WAIT)
    assert job.thread.daemon


def test_shutdown_waits_for_running_job_within_bound():
    pool = ThreadPool(min_spare=1, max_spare=1)
    job = BlockingJob()
    assert pool.add_job(job)
    assert job.started.wait(WAIT)
    threading.Timer(0.05, job.release.set).start()
    assert pool.shutdown(timeout=WAIT) == []
    assert pool.worker_count == 0
    assert not job.thread.is_alive()


def test_no_deprecation_warnings(recwarn):
    pool = ThreadPool(min_spare=1, max_spare=2)
    job = BlockingJob()
    pool.add_job(job)
    assert job.started.wait(WAIT)
    job.release.set()
    pool.shutdown(timeout=WAIT)
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]


# -- the flup-named facade ------------------------------------------------------------------------

def test_facade_signature_and_add_job(pools):
    pool = pools(facade.ThreadPool, minSpare=1, maxSpare=2, maxThreads=2)
    job = BlockingJob()
    assert pool.addJob(job, allowQueuing=False) is True
    assert job.started.wait(WAIT)
    job2 = BlockingJob()
    assert pool.addJob(job2, False) is True
    assert job2.started.wait(WAIT)
    assert pool.addJob(BlockingJob(), allowQueuing=False) is False
    job.release.set()
    job2.release.set()


def test_facade_defaults_and_unknown_keyword():
    import inspect
    signature = inspect.signature(facade.ThreadPool)
    assert [(p.name, p.default) for p in signature.parameters.values()] == [
        ("minSpare", 1), ("maxSpare", 5), ("maxThreads", sys.maxsize)]
    with pytest.raises(TypeError):
        facade.ThreadPool(timeout=3)
