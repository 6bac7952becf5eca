"""How the Kafka source plans a micro-batch: one input partition per partition number (or, for
an epoch, per group of them), the ranges a rate limit allows, where an epoch begins."""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition

__all__ = ["EPOCH", "EpochPartition", "KafkaPartition", "Offsets", "limit", "planned_as_epoch"]

#: The key of the epoch counter in the offsets of an epochs source.
EPOCH = "~epoch"

Offsets = dict[str, dict[str, int]]


class KafkaPartition(InputPartition):
    """One partition number: ``{topic: (start, end)}``."""

    def __init__(self, partition: int, ranges: dict[str, tuple[int, int]]) -> None:
        super().__init__(partition)
        self.partition = partition
        self.ranges = ranges


class EpochPartition(InputPartition):
    """Some partition numbers of an epoch: ``{partition: {topic: start}}``. Where the epoch's
    tasks claim their shares (:mod:`goka.processing.claims`), ``shares`` are every task's
    ``starts``, index by index, and ``starts`` only this task's first choice."""

    def __init__(self, index: int, starts: dict[int, dict[str, int]], deadline_ms: int,
                 shares: list[dict[int, dict[str, int]]] | None = None) -> None:  # fmt: skip
        super().__init__(index)
        self.index, self.starts, self.deadline_ms, self.shares = index, starts, deadline_ms, shares


def planned_as_epoch(end: Offsets) -> bool:
    """Was the batch ending at ``end`` planned as an epoch? The source's ``_next_epoch`` marks
    those with :data:`EPOCH`: such a batch ends where the group's commits were, and its tasks
    begin there. A batch a micro-batch run planned, which a continuous run replays after a
    crash, ends where that batch would have ended, which nothing may have processed: it is
    processed as that batch, to its end. (As an epoch its tasks would end at their deadline,
    perhaps before that end, and the next epoch, planned from it, would begin past records
    nobody processed.)"""
    return EPOCH in end


def limit(start: Offsets, end: Offsets, budget: int) -> Offsets:
    """Cut ``end`` so that at most ``budget`` records are read, shared in proportion."""
    available = {(t, p): end[t][p] - start[t][p] for t in end for p in end[t]}
    total = sum(available.values())
    if total <= budget:
        return end
    # (not ``start``'s epoch counter: see planned_as_epoch)
    limited = {t: dict(start[t]) for t in end}
    left = budget
    for (t, p), count in sorted(available.items(), key=lambda item: -item[1]):
        take = min(count, max(1, budget * count // total), left)
        limited[t][p] += take
        left -= take
    return limited
