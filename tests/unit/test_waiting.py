"""tests/waiting.py, the suite's one poll-until helper: wait_until returns the predicate's
value, and a wait that times out fails naming what it awaited and the last value seen;
wait_at_most gives the last value back instead."""
import time

import pytest

from tests.waiting import wait_at_most, wait_until


def test_returns_the_first_true_value():
    calls = []

    def third_time():
        calls.append(1)
        return len(calls) >= 3 and ['ready']
    assert wait_until(third_time, 10, interval=0.001) == ['ready']
    assert len(calls) == 3


def test_a_timeout_fails_naming_what_and_the_last_value():
    with pytest.raises(AssertionError, match=r"after 0\.05 s waiting for the moon \(last value: "
                                             r"\[\]\)"):
        wait_until(lambda: [], 0.05, what='the moon')


def test_what_may_be_computed_only_when_the_wait_fails():
    described = []

    def describe():
        described.append(1)
        return 'the log'
    assert wait_until(lambda: 1, 0.05, what=describe) == 1
    assert described == []
    with pytest.raises(AssertionError, match='waiting for the log'):
        wait_until(lambda: 0, 0.05, what=describe)


def test_by_default_a_lambda_is_named_by_its_source():
    with pytest.raises(AssertionError, match=r"waiting for lambda: 1 > 2"):
        wait_until(lambda: 1 > 2, 0.05)


def test_a_zero_bound_still_asks_once():
    calls = []
    with pytest.raises(AssertionError):
        wait_until(lambda: calls.append(1), 0, interval=0.001)
    assert calls == [1]


def test_a_predicate_that_raises_ends_the_wait_at_once():
    def exited():
        raise RuntimeError('the server exited')
    with pytest.raises(RuntimeError, match='exited'):
        wait_until(exited, 10)


def test_wait_at_most_gives_the_last_value_back_after_its_bound():
    values = iter([0, '', None, [], (), {}] * 1000)
    started = time.monotonic()
    assert wait_at_most(lambda: next(values), 0.05, interval=0.001) in (0, '', None, [], (), {})
    assert time.monotonic() - started >= 0.05


def test_wait_at_most_returns_as_soon_as_the_value_is_true():
    calls = []
    assert wait_at_most(lambda: calls.append(1) or len(calls) == 2 and 'yes', 10,
                        interval=0.001) == 'yes'
    assert len(calls) == 2
