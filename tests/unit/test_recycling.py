"""Prefork recycling (serving/prefork/policy.py, recycle.py): maxRequests with jitter
(gunicorn's meaning) and a per-child memory limit read from /proc/self/statm; plus a real pool:
a child whose RSS passes maxMemory is replaced after its request, and jittered children each
get their own limit.
"""
import os
import random

import pytest

from flupfast.serving.job import END, WAIT
from flupfast.serving.prefork.policy import child_request_limit, rss_over_limit
from flupfast.serving.prefork.recycle import MemoryWatch


def test_jitter_adds_randint_0_to_jitter_to_each_child():
    seen = {child_request_limit(100, 10, random.Random(seed).randint) for seed in range(200)}
    assert seen == set(range(100, 111))
    assert child_request_limit(100, 0, random.randint) == 100
    assert child_request_limit(0, 10, random.randint) == 0  # unlimited stays unlimited


def test_rss_over_limit_reads_the_resident_field_in_pages():
    assert rss_over_limit(b'5000 300 100 1 0 200 0\n', 299)
    assert not rss_over_limit(b'5000 300 100 1 0 200 0\n', 300)
    assert not rss_over_limit(b'', 0)


class FakeJob:
    max_requests = None

    def __init__(self):
        self.on_idle = lambda job, parkable: WAIT
        self.ran = 0

    def run(self):
        self.ran += 1
        return 3


def test_a_watched_job_under_the_limit_runs_as_it_is():
    watch = MemoryWatch(1 << 50)
    job = FakeJob()
    wrapped = watch.wrap(lambda client, addr: job)(None, '')
    wrapped.max_requests = 7
    assert job.max_requests == 7 and wrapped.run() == 3
    assert job.on_idle(job, True) is WAIT


def test_over_the_limit_a_kept_connection_ends_and_the_child_exits_after_its_job():
    watch = MemoryWatch(1)  # one byte: any process is over
    job = FakeJob()
    wrapped = watch.wrap(lambda client, addr: job)(None, '')
    assert job.on_idle(job, True) is END
    with pytest.raises(SystemExit) as exc:
        wrapped.run()
    assert exc.value.code == 0 and job.ran == 1


def test_the_watch_reads_this_process():
    with open('/proc/self/statm') as statm:
        resident = int(statm.read().split()[1]) * os.sysconf('SC_PAGE_SIZE')
    assert MemoryWatch(resident // 2).over()
    assert not MemoryWatch(resident * 4).over()


def test_the_rss_is_read_every_few_requests_and_over_stays_over():
    watch = MemoryWatch(1 << 50)
    reads = []
    watch.over = lambda: reads.append(1) or len(reads) >= 2
    results = [watch.due() for _ in range(1 + 2 * 4)]
    assert len(reads) == 2  # the first call, then every fourth
    assert results[0] is False and results[4] is True and all(results[5:])
