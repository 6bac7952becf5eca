"""Transactional producers of the fake Kafka that behave as Apache Kafka's do where writers
change: each transactional id has a producer epoch, which every new producer of the id bumps
(fencing the older ones and aborting what the last one left open); a fenced producer's
deliveries fail with INVALID_PRODUCER_EPOCH, after which librdkafka refuses every message
with ``_FATAL``, and its transactional calls raise :class:`~goka.errors.FencedError`; the
records of an open transaction are hidden from ``read_committed`` readers and hold the
partition's stable end back, those of an aborted one stay hidden; a commit writes the group's
offsets and a marker in every partition it wrote to. ``on_init`` runs as a producer starts,
before its epoch is bumped (a zombie committing just before the fence, say).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import confluent_kafka

from goka.errors import FencedError
from goka.kafka.transactions import transactional_id
from goka.partitioner import partition_for

from .fake_kafka import FakeKafka, RecordingProducer
from .fake_producer import FakeError, FakeMessage

__all__ = ["EpochTransactions", "epoch_transactions"]


class _Producer(RecordingProducer):
    """The producer of one :class:`EpochTransactions`: its rows go into the open transaction."""

    owner: EpochTransactions
    fatal = False

    def produce(self, topic: str, value: bytes | None, key: str | bytes | None, *,
                on_delivery: Any, headers: Any = None, timestamp: int = 0,
                partition: int = -1) -> None:  # fmt: skip
        if self.fatal:  # (what librdkafka does once a delivery found the producer fenced)
            raise confluent_kafka.KafkaException(
                confluent_kafka.KafkaError(confluent_kafka.KafkaError._FATAL, "fatal")
            )
        super().produce(topic, value, key, on_delivery=on_delivery, headers=headers,
                        timestamp=timestamp, partition=partition)  # fmt: skip

    def poll(self, timeout: float, *, flushing: bool = False) -> int:
        if self.kafka.unacknowledged or (self.kafka.late and not flushing):
            return 0
        done, self.queued = self.queued, []
        fenced = self.owner.fenced()
        for topic, partition, key, value, headers, timestamp, on_delivery in done:
            if fenced:
                message = FakeMessage(topic, max(partition, 0), -1, key, value, headers, timestamp)
                on_delivery(FakeError("Broker: INVALID_PRODUCER_EPOCH"), message)
                self.fatal = True
                continue
            text = key.decode() if isinstance(key, bytes) else str(key)
            number = partition if partition >= 0 else partition_for(text.encode(),
                                                                    self.kafka.partitions)  # fmt: skip
            self.owner.wrote(topic, number, self.kafka.end(topic, number))  # (hidden first)
            offset = self.kafka.append(topic, text, value, partition=number, headers=headers,
                                       timestamp=timestamp)  # fmt: skip
            self.kafka.events.append(f"deliver {topic}")
            on_delivery(None, FakeMessage(topic, number, offset, key, value, headers, timestamp))
        return len(done)


class EpochTransactions:
    """A transactional producer of one group partition (see the module docstring); the
    interface of :class:`goka.kafka.transactions.Transactions`."""

    def __init__(self, kafka: FakeKafka, config: Mapping[str, Any], group: str, partition: int,
                 timeout: float, *, on_init: Callable[[], object] = lambda: None) -> None:  # fmt: skip
        self.kafka, self.group, self.partition = kafka, group, partition
        self.id = transactional_id(group, partition)
        on_init()
        self.epoch = kafka.epochs.get(self.id, 0) + 1
        kafka.epochs[self.id] = self.epoch
        kafka.events.append(f"init {self.id} epoch {self.epoch}")
        for (topic, part, offset), state in list(kafka.hidden.items()):  # the last writer's
            if state == f"open {self.id}":  # open transaction: aborted
                kafka.hidden[(topic, part, offset)] = "aborted"
        self.producer = _Producer(kafka)
        self.producer.owner = self
        kafka.producers.append(self.producer)
        self.token, self.open, self.commits = uuid.uuid4().hex, False, 0
        self._offsets: dict[str, int] = {}
        self._wrote: set[tuple[str, int]] = set()

    def fenced(self) -> bool:
        return self.kafka.epochs[self.id] != self.epoch

    def wrote(self, topic: str, partition: int, offset: int) -> None:
        self.kafka.hidden[(topic, partition, offset)] = f"open {self.id}"
        self._wrote.add((topic, partition))

    def _check(self) -> None:
        if self.fenced():
            self.open = False
            raise FencedError(self.group, self.partition, self.id,
                              f"epoch {self.epoch} < {self.kafka.epochs[self.id]}")  # fmt: skip

    def begin(self) -> None:  # (local, as librdkafka's: a fenced producer learns it later)
        self.open, self._offsets, self._wrote = True, {}, set()

    def send_offsets(self, offsets: Mapping[str, int]) -> None:
        assert self.open, "offsets without begin"
        self._check()
        self._offsets = dict(offsets)

    def commit(self, offsets: Mapping[str, int] | None = None) -> None:
        assert self.open and not len(self.producer), "committed with outputs not delivered"
        self._check()
        for topic, offset in (offsets or self._offsets).items():
            self.kafka.committed[(self.group, topic, self.partition)] = (offset, "")
        for key, state in list(self.kafka.hidden.items()):
            if state == f"open {self.id}":
                del self.kafka.hidden[key]
        for topic, partition in self._wrote:
            self.kafka.mark(topic, partition)
        self.kafka.events.append(f"commit {self.id} epoch {self.epoch}")
        self.open, self.commits = False, self.commits + 1

    def abort(self) -> None:
        if not self.open:
            return
        self.open = False
        self._check()  # (a fenced producer's abort fails: the broker aborted it already)
        for key, state in list(self.kafka.hidden.items()):
            if state == f"open {self.id}":
                self.kafka.hidden[key] = "aborted"

    def close(self) -> None:
        with contextlib.suppress(FencedError):
            self.abort()


def epoch_transactions(kafka: FakeKafka, on_init: Callable[[int], object] = lambda p: None
                       ) -> Callable[..., EpochTransactions]:  # fmt: skip
    """A transactions builder of :class:`EpochTransactions` (``on_init(partition)`` runs as
    each starts)."""

    def build(config: Mapping[str, Any], group: str, partition: int,
              timeout: float) -> EpochTransactions:  # fmt: skip
        return EpochTransactions(kafka, config, group, partition, timeout,
                                 on_init=lambda: on_init(partition))  # fmt: skip

    return build
