"""Records in flight across reads that outlive their epoch: an epoch that ends with a bridge
after it, or a bridge that ends as the next task of its process begins, leaves them running
(:func:`park`) to what follows in the same process (:func:`adopt_parked`), rather than wait
for them or cancel them and read them again (their callbacks would run twice)."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from goka.group.carried import Carried
from goka.group.effects import Message
from goka.processing.epoch_partition import Epoch
from goka.processing.worker import Worker

__all__ = ["Parked", "adopt_parked", "park"]

#: Where :func:`park` leaves records in flight for the next epoch of the process.
_PARKED = "parked-flights"


@dataclass
class Parked:
    """Records in flight a partition's epoch left to the next one of its process: the
    engine's flight, the records given to it and not given back, and the positions committed
    (where the next one must begin to take them)."""

    partition: int
    carried: Carried
    unreleased: deque[Message]
    positions: dict[str, int]


def park(epoch: Epoch, worker: Worker) -> None:
    """Leave ``epoch``'s records in flight across reads, still running, to the next epoch or
    bridge of this process; what they released so far is taken first."""
    epoch.harvest()
    carried = epoch.engine.detach() if epoch.carrying else None
    if carried is not None:
        inputs = {t: epoch.positions[t] for t in epoch.inputs}
        worker.carry((_PARKED, epoch.graph.group),
                     [Parked(epoch.partition, carried, epoch.unreleased, inputs)])  # fmt: skip
        epoch.unreleased = deque()


def adopt_parked(worker: Worker, group: str, epochs: Mapping[int, Epoch]) -> None:
    """Hand the records in flight the last epoch or bridge of ``group`` in this process left
    (:func:`park`) to the ``epochs`` that begin where it committed; cancel the others (read
    again from what was committed, by whoever follows those partitions)."""
    for parked in worker.take_carried((_PARKED, group)):
        epoch = epochs.get(parked.partition)
        begins = None if epoch is None else {t: epoch.positions[t] for t in epoch.inputs}
        if epoch is None or not epoch.carrying or begins != parked.positions:
            parked.carried.abandon()
            continue
        epoch.engine.adopt(parked.carried)
        epoch.unreleased = parked.unreleased
