"""How the Kafka source plans: where an epoch begins, and what a rate limit allows."""

from __future__ import annotations

from goka.spark.plan import EPOCH, epoch_starts, limit


def test_an_epoch_begins_at_its_plan_s_end_only_if_it_was_planned_as_an_epoch() -> None:
    start = {"clicks": {"0": 805, "1": 40}}
    planned_as_epoch = {"clicks": {"0": 838, "1": 40}, EPOCH: {"n": 7}}  # the group's commits
    planned_as_batch = {"clicks": {"0": 838, "1": 90}}  # where a micro-batch would have ended
    assert epoch_starts(start, planned_as_epoch) is planned_as_epoch
    assert epoch_starts(start, planned_as_batch) is start  # replayed by a continuous run


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
    it after a crash would begin at its end, skipping records nobody processed."""
    start = {"clicks": {"0": 100, "1": 40}, EPOCH: {"n": 3}}
    end = {"clicks": {"0": 900, "1": 800}}
    limited = limit(start, end, 100)
    assert EPOCH not in limited
    assert epoch_starts(start, limited) is start
