"""How the Kafka source plans: where an epoch begins, and what a rate limit allows."""

from __future__ import annotations

from goka.spark.plan import EPOCH, limit, planned_as_epoch


def test_only_a_plan_made_as_an_epoch_is_run_as_one() -> None:
    planned_as_an_epoch = {"clicks": {"0": 838, "1": 40}, EPOCH: {"n": 7}}  # the group's commits
    planned_as_a_batch = {"clicks": {"0": 838, "1": 90}}  # where a micro-batch would have ended
    assert planned_as_epoch(planned_as_an_epoch)
    assert not planned_as_epoch(planned_as_a_batch)  # replayed by a continuous run: a batch


def test_a_rate_limit_is_shared_in_proportion_and_reaches_every_partition_with_records() -> None:
    start = {"a": {"0": 0, "1": 100}, "b": {"0": 5, "1": 0}}
    end = {"a": {"0": 1000, "1": 101}, "b": {"0": 5, "1": 300}}
    limited = limit(start, end, 200)
    taken = {(t, p): limited[t][p] - start[t][p] for t in start for p in start[t]}
    assert sum(taken.values()) <= 200
    assert taken[("a", "1")] == 1 and taken[("b", "0")] == 0  # 1 record, none
    assert taken[("a", "0")] > taken[("b", "1")] > 0  # in proportion to what is there
    assert all(limited[t][p] <= end[t][p] for t in end for p in end[t])
    assert limit(start, end, 10_000) is end  # all of it fits


def test_a_rate_limited_batch_after_an_epoch_is_not_planned_as_an_epoch() -> None:
    """A micro-batch run after a continuous one starts from an epoch's offsets (with its
    counter); the batch it plans must not look like an epoch, or a continuous run replaying
    it after a crash would run it as an epoch: its tasks would end at their deadline, and the
    next epoch begin at its end, skipping records nobody processed."""
    start = {"clicks": {"0": 100, "1": 40}, EPOCH: {"n": 3}}
    end = {"clicks": {"0": 900, "1": 800}}
    limited = limit(start, end, 100)
    assert EPOCH not in limited
    assert not planned_as_epoch(limited)
