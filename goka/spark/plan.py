"""How the Kafka source plans a micro-batch: one input partition per partition number (or, for
an epoch, per group of them), the ranges a rate limit allows, where an epoch begins."""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition

__all__ = ["EPOCH", "EpochPartition", "KafkaPartition", "Offsets", "epoch_starts", "limit"]

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


def epoch_starts(start: Offsets, end: Offsets) -> Offsets:
    """Where an epoch's tasks begin: an epoch planned as one ends where the group's commits
    were (processed: the source's ``_next_epoch`` marks it with :data:`EPOCH`); a batch
    planned by a micro-batch run that a continuous run replays after a crash ends where that
    batch would have ended, which nothing may have processed: it begins at its start. (Tasks
    then begin where the group committed if that is further.)"""
    return end if EPOCH in end else start


def limit(start: Offsets, end: Offsets, budget: int) -> Offsets:
    """Cut ``end`` so that at most ``budget`` records are read, shared in proportion."""
    available = {(t, p): end[t][p] - start[t][p] for t in end for p in end[t]}
    total = sum(available.values())
    if total <= budget:
        return end
    limited = {t: dict(start[t]) for t in end}  # not ``start``'s epoch counter: see epoch_starts
    left = budget
    for (t, p), count in sorted(available.items(), key=lambda item: -item[1]):
        take = min(count, max(1, budget * count // total), left)
        limited[t][p] += take
        left -= take
    return limited
