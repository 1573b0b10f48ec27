"""bench/scenarios/duel.py's plan and summary (the cells themselves need nginx: not run here)."""
import pytest

from bench.base import rotated
from bench.scenarios import duel


def test_a_cell_names_a_peer_its_settings_and_a_checkout():
    assert duel.parse_cell("uwsgi-scgi:processes=2") == ("uwsgi-scgi", {"processes": 2}, None)
    assert duel.parse_cell("flupfast-fcgi-fork:max_children=4,max_spare=4@/tmp/before") == (
        "flupfast-fcgi-fork", {"max_children": 4, "max_spare": 4}, "/tmp/before")
    assert duel.parse_cell("flupfast-scgi-fork") == ("flupfast-scgi-fork", {}, None)


@pytest.mark.parametrize("text", ["nobody-fork", "uwsgi-scgi:processes", "uwsgi-scgi:processes=x"])
def test_a_cell_that_names_nothing_known_is_an_error(text):
    with pytest.raises(ValueError):
        duel.parse_cell(text)


def test_each_round_starts_one_cell_later():
    # bench.base.rotated: the order of every interleaved run (duel, cells.interleaved, the
    # fronts' rounds, ops_cost)
    assert [rotated(range(3), r) for r in range(4)] == [
        [0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    # over as many rounds as cells, every cell runs once in every place
    places = [rotated("abc", r) for r in range(3)]
    assert all(sorted(column) == ["a", "b", "c"] for column in zip(*places))
    assert rotated([], 5) == []


def test_the_summary_sets_each_round_against_the_same_rounds_of_the_last_cell():
    mine = [{"rps": 110, "server_us": 20, "p99_ms": 1.5}, {"rps": 90, "server_us": 22},
            {"rps": 200, "server_us": 21, "p99_ms": 2.5}]
    theirs = [{"rps": 100, "server_us": 19}, {"rps": 100, "server_us": 18},
              {"rps": 100, "server_us": 17}]
    row, base = duel.summarize(["mine", "theirs"], [mine, theirs])
    assert row["rps"] == 110 and row["rounds"] == 3
    assert row["round_ratio"] == pytest.approx(1.1)  # of 1.1, 0.9, 2.0
    assert row["median_ratio"] == pytest.approx(1.1)
    assert row["server_us"] == 21 and row["nginx_us"] is None and row["p99_ms"] == 2.0
    assert (base["round_ratio"], base["median_ratio"]) == (1.0, 1.0)


def test_a_failed_round_counts_in_neither_ratio():
    mine = [{"rps": 120}, {"rps": None, "error": "wrk did not finish"}, {"rps": 80}]
    theirs = [{"rps": 100}, {"rps": 100}, {"rps": 100}]
    row = duel.summarize(["mine", "theirs"], [mine, theirs])[0]
    assert row["rounds"] == 2
    assert row["round_ratio"] == pytest.approx(1.0)  # of 1.2 and 0.8
