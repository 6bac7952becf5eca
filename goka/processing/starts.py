"""What an epoch's start asks the broker (:mod:`goka.processing.epoch`): the watermarks of
its inputs (and, for a store opened afresh, of its table) and the offsets its group committed,
asked in a thread while its stores are leased; nothing for partitions this process followed
until just now (an epoch and the bridge after it, a bridge and the next task here) whose
stores are where that left them: the watermarks the last reads answered stand in (a fetch
beyond the end or below the start fails the tail anyway), and the group's offsets are the
stores' (the group committed up to there as the last one ended; no other process took the
partition meanwhile: it would have taken the stores, or, on another machine, its task would
have been this one).

Where another process of the machine holds the stores (Spark ran this task in another
Python worker), that process's bridge left the same as it ended (:func:`leave_note`, a file
beside the store: as it let go of them, or as its next task began and its holder kept them):
the start does not ask for those partitions in advance, and is told what the note says
(:func:`take_notes`); a partition without a note is asked about as it begins."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Mapping, Set
from pathlib import Path

from goka.kafka.reader import RecordReader
from goka.processing.stores import PartitionStores
from goka.processing.worker import Worker

__all__ = [
    "Asking",
    "followed",
    "forget_followed",
    "leave_note",
    "take_followed",
    "take_notes",
    "tell",
]

#: How long what a process followed stands in for asking the broker as the next epoch or
#: bridge begins there (at an epoch boundary: milliseconds).
FOLLOWED_SECONDS = 2.0
_FOLLOWED = "followed"  # (the worker carries it under this and the group)

#: ``{partition: (where it ended {topic: offset}, {(topic, partition): (first, high)})}``.
Followed = Mapping[int, tuple[Mapping[str, int], Mapping[tuple[str, int], tuple[int, int]]]]


def followed(
    worker: Worker, group: str, ends: Mapping[int, Mapping[str, int]],
    marks: Mapping[tuple[str, int], tuple[int, int]],
) -> None:  # fmt: skip
    """Note that this process followed the partitions of ``ends`` up to there (committed),
    and the watermarks its last reads answered."""
    now = time.monotonic()
    worker.carry((_FOLLOWED, group), [
        (p, dict(positions), {tp: m for tp, m in marks.items() if tp[1] == p}, now)
        for p, positions in ends.items()
    ])  # fmt: skip


def take_followed(worker: Worker, group: str, starts: Mapping[int, object]) -> Followed:
    """The partitions of ``starts`` this process followed until just now (an epoch or bridge
    that ended at most :data:`FOLLOWED_SECONDS` ago): where they ended, and the watermarks
    their last reads answered."""
    now, found = time.monotonic(), {}
    for partition, positions, marks, at in worker.take_carried((_FOLLOWED, group)):
        if partition in starts and now - at <= FOLLOWED_SECONDS:
            found[partition] = (positions, marks)
    return found


def forget_followed(worker: Worker, group: str) -> None:
    """Forget what :func:`followed` noted of ``group`` (it ended otherwise than by the next
    task here: a stop, another process asked for its stores)."""
    worker.take_carried((_FOLLOWED, group))


def leave_note(stores: PartitionStores, ended: Mapping[str, int],
               marks: Mapping[tuple[str, int], tuple[int, int]]) -> None:  # fmt: skip
    """Leave beside the partition's store, for a process of this machine that takes it next,
    where this process followed the partition up to (committed: the stores and the group's
    offsets) and the watermarks its last reads answered."""
    path = _note_file(stores.leases["partition"].path)
    temporary = path.with_name(f"{path.name}-{os.getpid()}")
    with contextlib.suppress(OSError):  # (a store without a directory: no note, it asks)
        temporary.write_text(json.dumps({
            "at": time.time(), "ended": dict(ended),
            "marks": [[t, p, low, high] for (t, p), (low, high) in marks.items()],
        }))  # fmt: skip
        os.replace(temporary, path)


def take_notes(leased: Mapping[int, PartitionStores], expected: Set[int]) -> Followed:
    """The notes left by the process that held the stores of ``expected`` partitions
    (:func:`leave_note`) at most :data:`FOLLOWED_SECONDS` ago; every note found is removed."""
    found = {}
    for partition in expected:
        path = _note_file(leased[partition].leases["partition"].path)
        try:
            note = json.loads(path.read_text())
            path.unlink()
        except (OSError, ValueError):
            continue
        if time.time() - note["at"] <= FOLLOWED_SECONDS:
            marks = {(t, p): (low, high) for t, p, low, high in note["marks"]}
            found[partition] = (note["ended"], marks)
    return found


def _note_file(store: Path) -> Path:
    return store.with_name(f"{store.name}.followed")


def tell(
    reader: RecordReader, group: str, leased: Mapping[int, PartitionStores], known: Followed,
    noted: Set[int] = frozenset(),
) -> None:  # fmt: skip
    """Give ``reader`` the answers for the partitions followed until just now whose stores
    are where that left them (still open here, or ``noted``: opened after another process's
    note): the watermarks their last reads answered, and the group's offsets as the stores'
    (and, to a store opened afresh, the table's end as the store's: the process that held
    it wrote the table up to there). The others were not asked about in advance: they are
    asked as they begin, one answer at a time."""
    for partition, (positions, marks) in known.items():
        stores = leased[partition]
        fresh = stores.fresh
        if (fresh and partition not in noted) or stores.applied(
            list(positions)
        ).offsets != positions:
            continue
        inputs = stores.graph.input_topics()
        answers = dict(marks)
        table = (stores.graph.table, partition)
        end = stores.store.offsets().get(table, -1)
        if fresh and stores.graph.persist and end >= 0:
            answers[table] = (min(answers.get(table, (end, end))[0], end), end)
        reader.tell(answers, {(group, t, partition): (o, "") for t, o in positions.items()
                              if t in inputs})  # fmt: skip


class Asking:
    """Asks the broker for what an epoch's start checks, in a thread (see the module
    docstring): the watermarks of ``partitions`` and the offsets ``group`` committed there."""

    def __init__(self, reader: RecordReader, partitions: list[tuple[str, int]], group: str):
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._ask, args=(reader, partitions, group),
                                        name=f"goka-ask-{group}", daemon=True)  # fmt: skip
        self._thread.start()

    def _ask(self, reader: RecordReader, partitions: list[tuple[str, int]], group: str) -> None:
        try:
            reader.prefetch(partitions, group)
        except BaseException as exc:  # raised where the answers are waited for
            self._error = exc

    def wait(self, *, quiet: bool = False) -> None:
        """Wait for the answers (the reader has them).

        Raises:
            BrokerError: the broker did not answer (unless ``quiet``).
        """
        self._thread.join()
        if self._error is not None and not quiet:
            raise self._error
