"""Ticks for wall-clock timers: a record in every partition of ``<group>-ticks`` every tick
interval, while a processor runs, so a partition that gets no records still fires its wall
timers (and wall TTLs) on time: within a trigger interval in micro-batches, within the tick
interval in continuous epochs. A tick is an input record like any other, so what its timers
do commits with it, exactly once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from goka.group.graph import GroupGraph
from goka.kafka.config import Brokers, producer_config
from goka.kafka.producer import Producer, kafka_producer
from goka.processing.values import trigger_seconds as parse_trigger

__all__ = ["Ticker", "trigger_seconds"]


log = logging.getLogger(__name__)


class Ticker:
    """Ticks the partitions of a group (see the module docstring); :meth:`tick` once, or
    :meth:`start` a thread that ticks until :meth:`stop`.

    Args:
        graph: the group (it must tick: :attr:`GroupGraph.ticking`).
        brokers, kafka_config: where and how to produce.
        partitions: the group's partition count.
        interval: seconds between ticks.
        builder: builds the producer.
    """

    def __init__(
        self, graph: GroupGraph, brokers: Brokers, kafka_config: Mapping[str, Any],
        partitions: int, interval: float,
        builder: Callable[[dict[str, Any]], Producer] = kafka_producer,
    ) -> None:  # fmt: skip
        self.topic, self.partitions, self.interval = graph.group.ticks, partitions, interval
        self._producer = builder(producer_config(brokers, {"linger.ms": 5, **kafka_config}))
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self, *, wait: bool = False) -> None:
        """Produce one tick in every partition (delivery is awaited only if ``wait``: ticks
        are hints that time passed; a lost one is made up by the next)."""
        for partition in range(self.partitions):
            try:
                self._producer.produce(self.topic, b"", None, on_delivery=_logged,
                                       partition=partition)  # fmt: skip
            except BufferError:
                break  # the broker is behind: the next interval ticks again
        if wait:
            self._producer.flush(5.0)
        else:
            self._producer.poll(0)

    def start(self, active: Callable[[], bool]) -> None:
        """Tick every interval on a thread while ``active()`` and until :meth:`stop`."""
        self._stopped.clear()
        self._thread = threading.Thread(target=self._run, args=(active,), name="goka-ticker",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    def _run(self, active: Callable[[], bool]) -> None:
        while not self._stopped.wait(self.interval) and active():
            self.tick()
        self._producer.flush(5.0)

    def stop(self) -> None:
        """Stop ticking and deliver what was produced (at most a few seconds). Idempotent."""
        self._stopped.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._producer.flush(5.0)


def trigger_seconds(trigger: str) -> float:
    """The seconds of a micro-batch trigger (``"200 milliseconds"``, ``"1 second"``, checked
    at declaration), at least 0.1 (1 for ``"available-now"``)."""
    if trigger.strip() == "available-now":
        return 1.0
    return max(parse_trigger(trigger), 0.1)


def _logged(error: Any, message: Any) -> None:
    if error is not None:
        log.debug("a tick was not delivered: %s", error)
