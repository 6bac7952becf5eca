"""The group's offsets in Kafka: how far the consumer group ``<group>`` got in each input of
a partition, as lag tools, Spark's plans, a task's start and a Go processor taking the group
over read them. The stores' offsets are the truth of what was applied; these follow them.

Under at-least-once a partition tells them after its store's write (asynchronously, as Go
Goka does), at most every :data:`GROUP_COMMIT_SECONDS`; what it held back goes as the task
ends, or once the partition idled :data:`IDLE_GROUP_COMMIT_SECONDS` (its lag goes to 0).
Under exactly-once they go in each commit's transaction (:mod:`goka.processing.exactly_once`),
and only there: a plain commit carries no producer epoch, so a writer fenced since could move
them back, and its successor would begin behind what was committed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping

from goka.kafka.reader import RecordReader

__all__ = ["GROUP_COMMIT_SECONDS", "IDLE_GROUP_COMMIT_SECONDS", "GroupOffsets"]

#: How often at most a partition's commits also commit the group's offsets to Kafka: a commit
#: interval of 0.1 s does not send ten OffsetCommits a second per partition. A partition that
#: caught up (a commit found nothing new) commits them once :data:`IDLE_GROUP_COMMIT_SECONDS`
#: passed: lag tools (and the benches) see it caught up then.
GROUP_COMMIT_SECONDS, IDLE_GROUP_COMMIT_SECONDS = 1.0, 0.25


class GroupOffsets:
    """The group's offsets of one partition's ``inputs`` (see the module docstring), told
    through ``reader()``'s consumer of the group; ``transactional``: under exactly-once
    (nothing is told here). Not thread-safe."""

    def __init__(self, reader: Callable[[], RecordReader], group: str, partition: int,
                 inputs: Iterable[str], *, transactional: bool) -> None:  # fmt: skip
        self.reader, self.group, self.partition = reader, group, partition
        self.inputs, self.transactional = frozenset(inputs), transactional
        self._at = -GROUP_COMMIT_SECONDS  # when they were last committed
        self._behind: Mapping[str, int] | None = None  # the store's, not committed yet

    def written(self, positions: Mapping[str, int], *, wait: bool = False) -> bool:
        """The store was written up to ``positions``: commit them if ``wait`` (waiting for
        the broker) or if due, else hold them back; return whether they were committed."""
        if self.transactional:
            return False
        if wait or time.monotonic() - self._at >= GROUP_COMMIT_SECONDS:
            self.commit(positions, wait=wait)
            return True
        self._behind = dict(positions)
        return False

    def catch_up(self, *, due: bool = False) -> None:
        """Commit what was held back: as a task ends, or (``due``: a partition whose records
        stopped coming) once :data:`IDLE_GROUP_COMMIT_SECONDS` passed."""
        if self._behind is None:
            return
        if not due or time.monotonic() - self._at >= IDLE_GROUP_COMMIT_SECONDS:
            self.commit(self._behind)

    def commit(self, positions: Mapping[str, int], *, wait: bool = False) -> bool:
        """Tell Kafka how far the group got in its inputs and loop (not in joined tables,
        which no group consumes); ``wait`` for the broker (a stopped processor has left its
        offsets). Return False if a commit ``wait``-ed for failed. Under exactly-once,
        nothing (see the module docstring)."""
        if self.transactional:
            return True
        self._at, self._behind = time.monotonic(), None
        note = json.dumps({"time": round(time.time(), 3)})
        inputs = {t: o for t, o in positions.items() if t in self.inputs}
        return self.reader().commit(self.group, self.partition, inputs, note, wait=wait)
