"""Records in flight across reads that outlive their epoch: an epoch that ends with a bridge
after it, or a bridge that ends as the next task of its process begins, leaves them running
(:func:`park`) to what follows in the same process (:func:`adopt_parked`), rather than wait
for them or cancel them and read them again (their callbacks would run twice). What no epoch
of the group adopts within :data:`PARKED_SECONDS` (the next task was another group's, a stop
came, what followed failed) is cancelled: read again from what was committed."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from goka.group.carried import Carried
from goka.group.effects import Message
from goka.processing.epoch_partition import Epoch
from goka.processing.worker import Worker

__all__ = ["PARKED_SECONDS", "Parked", "adopt_parked", "cancel_parked", "park"]

#: Where :func:`park` leaves records in flight for the next epoch of the process.
_PARKED = "parked-flights"
#: How long parked records wait to be adopted before they are cancelled (the next task of
#: a process begins about a second after its bridge, a bridge at once after its epoch).
PARKED_SECONDS = 10.0


@dataclass
class Parked:
    """Records in flight a partition's epoch left to the next one of its process: the
    engine's flight, the records given to it and not given back, and the positions committed
    (where the next one must begin to take them). Claimed once: adopted or cancelled."""

    partition: int
    carried: Carried
    unreleased: deque[Message]
    positions: dict[str, int]
    _claimed: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def claim(self) -> bool:
        """Take it (to adopt or cancel it): False if it was taken already."""
        with self._lock:
            claimed, self._claimed = self._claimed, True
            return not claimed

    def cancel(self) -> None:
        """Cancel its records, unless it was taken already."""
        if self.claim():
            self.carried.abandon()

    def expire(self, seconds: float) -> None:
        """Cancel it in ``seconds`` unless it was taken by then."""
        timer = threading.Timer(seconds, self.cancel)
        timer.daemon = True
        timer.start()


def park(epoch: Epoch, worker: Worker) -> None:
    """Leave ``epoch``'s records in flight across reads, still running, to the next epoch or
    bridge of this process; what they released so far is taken first."""
    epoch.harvest()
    carried = epoch.engine.detach() if epoch.carrying else None
    if carried is not None:
        inputs = {t: epoch.positions[t] for t in epoch.inputs}
        parked = Parked(epoch.partition, carried, epoch.unreleased, inputs)
        epoch.unreleased = deque()
        worker.carry((_PARKED, epoch.graph.group), [parked])
        parked.expire(PARKED_SECONDS)


def cancel_parked(worker: Worker, group: str, keep: Collection[int] = ()) -> None:
    """Cancel the records in flight ``group``'s epochs in this process left, but for the
    partitions of ``keep`` (those may be adopted)."""
    kept = []
    for parked in worker.take_carried((_PARKED, group)):
        if parked.partition in keep:
            kept.append(parked)
        else:
            parked.cancel()
    if kept:
        worker.carry((_PARKED, group), kept)


def adopt_parked(worker: Worker, group: str, epochs: Mapping[int, Epoch]) -> None:
    """Hand the records in flight the last epoch or bridge of ``group`` in this process left
    (:func:`park`) to the ``epochs`` that begin where it committed; cancel the others (read
    again from what was committed, by whoever follows those partitions)."""
    taken = worker.take_carried((_PARKED, group))
    for at, parked in enumerate(taken):
        try:
            epoch = epochs.get(parked.partition)
            begins = None if epoch is None else {t: epoch.positions[t] for t in epoch.inputs}
            if epoch is None or not epoch.carrying or begins != parked.positions:
                parked.cancel()
            elif parked.claim():
                epoch.engine.adopt(parked.carried)
                epoch.unreleased = parked.unreleased
        except BaseException:
            for left in taken[at + 1 :]:
                left.cancel()
            raise
