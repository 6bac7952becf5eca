"""The output of a partition processor: its effects and dead letters produced with one
producer, every delivery checked, and the end of each changelog (the group table, timers,
window tables) after its updates.

Under exactly-once (``coalesce``), a commit's changelog rows are held until it is sealed and
each changed key of a changelog is produced once, with its last value (None: a tombstone),
as Kafka Streams' record cache does: a busy key's count, a window updated by many records,
is one row per commit. A commit is one transaction, which a ``read_committed`` replay reads
whole or not at all, so no replay can stop between the rows a coalesced row stands for.
Holding more than :data:`HELD_ROWS` rows produces them into the open transaction at once
(memory stays bounded; a key may then be written twice in a commit). Under at-least-once
every update is produced as it is made: a replay may stop inside a commit.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from goka.errors import DeliveryError, TopicRewoundError
from goka.group.effects import EMIT, FINAL, LOOP, TABLE, TIMER, WINDOW, BatchResult
from goka.kafka.producer import (
    KafkaProducer,
    ProduceError,
    Producer,
    failed_for_good,
    positional_produce,
)
from goka.keys import key_bytes
from goka.processing.applied import SRC_OFFSET, SRC_PARTITION, SRC_TOPIC
from goka.processing.config import TaskConfig
from goka.processing.summary import PartitionSummary
from goka.storage import Storage

__all__ = ["HELD_ROWS", "ORIGINAL_SIZE", "TRUNCATED", "Output", "send_checked"]

log = logging.getLogger(__name__)


#: Effects written to a changelog of the group, in the task's partition, with provenance (the
#: source's topic and offset: two headers; a header costs the producer about 0.4 µs a row).
CHANGELOG_KINDS = (TABLE, TIMER, WINDOW)

#: How many changelog rows a coalescing output holds at most before producing them.
HELD_ROWS = 100_000

#: A held changelog row: value, the message that made it (its provenance headers are made
#: as it is produced), more headers (the stream time).
Held = tuple[bytes | None, Any, Any]


class Generation:
    """The outputs produced between two commits: how many are not acknowledged yet, the
    failures, and where each changelog ended after its last update (its delivery report)."""

    __slots__ = ("ends", "failures", "outstanding", "sealed_at")

    def __init__(self) -> None:
        self.outstanding = 0
        self.failures: list[str] = []
        self.ends: dict[str, int] = {}
        self.sealed_at = 0.0

    def on_delivery(self, error: Any, message: Any) -> None:
        self.outstanding -= 1
        if error is not None:
            self.failures.append(f"{message.topic()}: {error.str()}")

    def on_last_update(self, error: Any, message: Any) -> None:
        self.on_delivery(error, message)
        if error is None:  # one partition, in order: the last one ends the batch's updates
            self.ends[message.topic()] = message.offset() + 1


class Output:
    """Produces a partition's effects and dead letters and checks that each was delivered,
    and that changelog updates land after what ``store`` has of each changelog.

    What is produced between two commits is a :class:`Generation`: a commit seals it
    (:meth:`seal`) and writes its state once it is acknowledged (:meth:`settle`), while the
    next one is produced."""

    def __init__(
        self,
        producer: Producer,
        partition: int,
        config: TaskConfig,
        store: Storage,
        on_failure: Callable[[], object] = lambda: None,
        *,
        coalesce: bool = False,
        held_rows: int = HELD_ROWS,
    ) -> None:
        """``on_failure()`` runs when a generation is found to have failed (before it raises);
        ``coalesce``: hold each changelog's rows until :meth:`seal`, one per key (see the
        module docstring), at most ``held_rows``."""
        self.producer, self.partition, self.config = producer, partition, config
        #: confluent-kafka's produce() takes a changelog row by position (shorter)
        self.positional = isinstance(producer, KafkaProducer) and positional_produce()
        self.on_failure = on_failure
        self.held: dict[tuple[str, Any], Held] | None = {} if coalesce else None
        self.held_rows = held_rows
        self.generation = Generation()
        stored = store.offsets()
        self.stored = {
            t: stored[(t, partition)] for t in config.graph.changelogs() if (t, partition) in stored
        }
        self.errors: list[str] = []
        self.emitted: dict[str, int] = {}  # per output topic

    def send(self, result: BatchResult, summary: PartitionSummary) -> None:
        """Produce ``result``'s effects (and its dead letters) and count them in ``summary``."""
        try:
            self._send(result, summary)
        except DeliveryError as exc:
            self._if_fatal(exc)
            raise

    def _if_fatal(self, exc: DeliveryError) -> None:
        """Run :meth:`on_failure` if ``exc`` is a fatal error of the producer (fenced: a
        transactional producer's then raises :class:`~goka.errors.FencedError`)."""
        cause = exc.__cause__
        if isinstance(cause, ProduceError) and failed_for_good(cause):
            self.on_failure()

    def _send(self, result: BatchResult, summary: PartitionSummary) -> None:
        generation, letters = self.generation, self.config.on_error == "dead-letter"
        generation.outstanding += len(result.failed) if letters else 0
        if self.held is None:
            generation.outstanding += len(result.effects)
            counts = _send_effects(self.producer, result, self.partition, generation.on_delivery,
                                   generation.on_last_update, self.emitted,
                                   positional=self.positional)  # fmt: skip
        else:
            counts = _hold_effects(self.producer, result, self.partition, generation,
                                   self.held, self.emitted)  # fmt: skip
            if len(self.held) >= self.held_rows:
                self._release()
        summary.emitted = json.dumps(self.emitted)
        summary.table_updates += counts[0]
        summary.emits += counts[1]
        summary.loopbacks += counts[2]
        summary.processed += result.processed
        summary.failed += len(result.failed)
        self.errors += [str(error) for error, _ in result.failed[: 20 - len(self.errors)]]
        summary.errors = json.dumps(self.errors)
        for error, _ in result.failed:
            log.warning("%s: %s", self.config.on_error, error)
        if letters:
            summary.dead_letters += _send_dead_letters(
                self.producer, result, self.partition, self.config, generation.on_delivery
            )

    def seal(self) -> Generation:
        """End the current generation (what is produced from now on is the next one), after
        producing the changelog rows held for it."""
        try:
            self._release()
        except DeliveryError as exc:
            self._if_fatal(exc)
            raise
        sealed, self.generation = self.generation, Generation()
        sealed.sealed_at = time.monotonic()
        return sealed

    def _release(self) -> None:
        """Produce the held changelog rows into the current generation."""
        held, generation = self.held, self.generation
        if not held:
            return
        last = {}
        for row in held:  # (the last row of each changelog ends it)
            last[row[0]] = row
        generation.outstanding += len(held)
        produce: Any = self.producer.produce  # (by position: see positional_produce)
        partition, positional = self.partition, self.positional
        on_delivery, on_last_update = generation.on_delivery, generation.on_last_update
        topics = dict[str, tuple[str, bytes]]()
        for row, (data, made_by, more) in held.items():
            topic, key = row
            read = topics.get(made_by[0])
            if read is None:
                read = topics[made_by[0]] = (SRC_TOPIC, made_by[0].encode())
            headers: Any = [read, (SRC_OFFSET, b"%d" % made_by[1]), *(more or ())]
            timestamp = made_by[4]
            callback = on_last_update if last[topic] is row else on_delivery
            try:
                if positional:
                    produce(topic, data, key, partition, callback, None, timestamp, headers)
                else:
                    produce(topic, data, key, partition=partition, on_delivery=callback,
                            headers=headers, timestamp=timestamp)  # fmt: skip
            except (BufferError, UnicodeEncodeError, ProduceError):
                send_checked(self.producer, topic, data, key, callback, headers, timestamp,
                             partition)  # fmt: skip
        held.clear()

    def wait(self) -> None:
        """Wait (up to the flush timeout) until every output so far is acknowledged.

        Raises:
            DeliveryError: the producer failed for good (:meth:`on_failure` may say why
                first: a transactional producer fenced raises ``FencedError`` there).
        """
        self._served(self.producer.flush, self.config.flush_timeout)

    def poll(self) -> None:
        """Take the delivery reports that came (without waiting; :meth:`wait`'s errors)."""
        self._served(self.producer.poll, 0)

    def _served(self, serve: Callable[[float], int], timeout: float) -> None:
        try:
            serve(timeout)
        except (ProduceError, SystemError) as exc:  # a fatal error of the producer (a fenced
            # transactional one); confluent-kafka raises it as a SystemError when it arrives
            # while a delivery report is served
            self.on_failure()
            raise DeliveryError(self.config.graph.table, None, f"partition {self.partition}: "
                                f"the producer failed: {exc}") from exc  # fmt: skip

    def settle(self, generation: Generation, *, waited: bool = False) -> dict[str, int] | None:
        """The end of each changelog after ``generation``'s last update (one not updated is
        left out) once all its outputs are acknowledged; None while some are not (after
        :meth:`wait`: ``waited``, they never will be). Generations are settled in order.

        Raises:
            DeliveryError: a message was refused, failed, or not acknowledged in time.
            TopicRewoundError: updates landed at or before the store's offset of their
                changelog: it was truncated or recreated (nothing may be committed: the
                changelogs are the truth).
        """
        remaining, timeout = generation.outstanding, self.config.flush_timeout
        if remaining > 0 and not waited and time.monotonic() - generation.sealed_at < timeout:
            return None
        if remaining > 0 or generation.failures:
            self.on_failure()
            raise DeliveryError(
                self.config.graph.table,
                None,
                f"partition {self.partition}: {remaining} messages unacknowledged after "
                f"{timeout:g}s, {len(generation.failures)} failed: {generation.failures[:3]}",
            )
        for topic, end in generation.ends.items():
            stored = self.stored.get(topic)
            self.stored[topic] = end
            if stored is not None and end <= stored:
                who = f"group {self.config.graph.group!r} (partition store)"
                raise TopicRewoundError(topic, self.partition, stored, 0, end, reader=who)
        return generation.ends

    def flush(self) -> dict[str, int]:
        """Seal the generation, wait for it and settle it (:meth:`settle`'s errors)."""
        generation = self.seal()
        self.wait()
        ends = self.settle(generation, waited=True)
        assert ends is not None
        return ends


def _send_effects(
    producer: Producer,
    result: BatchResult,
    partition: int,
    on_delivery: Callable[[Any, Any], None],
    on_last_update: Callable[[Any, Any], None],
    emitted: dict[str, int],
    *,
    positional: bool = False,
) -> tuple[int, int, int]:
    """Produce the effects in order; return the counts of table updates, emits (final
    results included), loopbacks, and add the emits per topic to ``emitted`` (``positional``:
    the producer is confluent-kafka's, which takes a changelog row by position:
    :func:`~goka.kafka.producer.positional_produce`)."""
    counts = dict.fromkeys((TABLE, EMIT, LOOP, TIMER, WINDOW, FINAL), 0)
    last = {e[1]: i for i, e in enumerate(result.effects) if e[0] in CHANGELOG_KINDS}
    topics: dict[str, tuple[str, bytes]] = {}
    source: Any = None  # the provenance of the last source, for the rows it made:
    provenance: list[tuple[str, str | bytes | None]] = []
    produce: Any = producer.produce  # (by position: see positional_produce)
    for index, (kind, topic, key, data, headers, made_by) in enumerate(result.effects):
        counts[kind] += 1
        if kind in CHANGELOG_KINDS:
            if made_by is not source:
                source = made_by
                read = topics.get(source[0])
                if read is None:
                    read = topics[source[0]] = (SRC_TOPIC, source[0].encode())
                provenance = [read, (SRC_OFFSET, b"%d" % source[1])]
            if headers:  # a changelog row may say more (goka.time.rows.STREAM_TIME_HEADER)
                provenance = [*provenance, *headers]
                source = None
            callback = on_last_update if last[topic] == index else on_delivery
            try:  # (_send inlined: a call per changelog row; what it handles, it handles)
                if positional:
                    produce(topic, data, key, partition, callback, None, made_by[4], provenance)
                else:
                    produce(topic, data, key, partition=partition, on_delivery=callback,
                            headers=provenance, timestamp=made_by[4])  # fmt: skip
            except (BufferError, UnicodeEncodeError, ProduceError):
                send_checked(producer, topic, data, key, callback, provenance, made_by[4],
                             partition)  # fmt: skip
        else:
            if kind in (EMIT, FINAL):
                emitted[topic] = emitted.get(topic, 0) + 1
            send_checked(producer, topic, data, key, on_delivery, headers, made_by[4], -1)
    return counts[TABLE], counts[EMIT] + counts[FINAL], counts[LOOP]


def _hold_effects(
    producer: Producer,
    result: BatchResult,
    partition: int,
    generation: Generation,
    held: dict[tuple[str, Any], Held],
    emitted: dict[str, int],
) -> tuple[int, int, int]:
    """As :func:`_send_effects`, but each changelog row goes to ``held`` in place of the
    key's earlier row (a stream time header the earlier one had stays: a replay takes the
    highest any row names); the other effects are produced."""
    counts = dict.fromkeys((TABLE, EMIT, LOOP, TIMER, WINDOW, FINAL), 0)
    for kind, topic, key, data, headers, made_by in result.effects:
        counts[kind] += 1
        if kind in CHANGELOG_KINDS:
            if headers is None:
                earlier = held.get((topic, key))
                headers = None if earlier is None else earlier[2]
            held[topic, key] = (data, made_by, headers)
        else:
            if kind in (EMIT, FINAL):
                emitted[topic] = emitted.get(topic, 0) + 1
            generation.outstanding += 1
            send_checked(producer, topic, data, key, generation.on_delivery, headers,
                         made_by[4], -1)  # fmt: skip
    return counts[TABLE], counts[EMIT] + counts[FINAL], counts[LOOP]


#: Headers of a dead letter whose value was cut to fit under the producer's limit.
TRUNCATED, ORIGINAL_SIZE = "goka-truncated", "goka-original-size"


def _send_dead_letters(
    producer: Producer,
    result: BatchResult,
    partition: int,
    config: TaskConfig,
    on_delivery: Callable[[Any, Any], None],
) -> int:
    """Write each failed message's raw record to the dead-letter topic; return how many.

    A record too large for the producer keeps its key and headers and as much of its value
    as fits, with the headers :data:`TRUNCATED` and :data:`ORIGINAL_SIZE`: the policy meant
    to keep the group running must not stop it on a refused dead letter."""
    for error, (source, offset, key, value, timestamp, headers) in result.failed:
        details = [("goka-error", str(error).encode()[:4096]), (SRC_TOPIC, source.encode()),
                   (SRC_PARTITION, b"%d" % partition), (SRC_OFFSET, b"%d" % offset)]  # fmt: skip
        found = [*(headers or []), *details]
        room = config.max_message_bytes - len(key or b"") - sum(len(k) + len(v) for k, v in found)
        if value is not None and len(value) > room:
            log.warning("dead letter of %s partition %d offset %d cut from %d to %d bytes",
                        source, partition, offset, len(value), max(room, 0))  # fmt: skip
            found += [(TRUNCATED, b"true"), (ORIGINAL_SIZE, b"%d" % len(value))]
            value = value[: max(room, 0)]
        send_checked(producer, config.dlq_topic, value, key, on_delivery, found, timestamp, -1)
    return len(result.failed)


def send_checked(
    producer: Producer,
    topic: str,
    value: bytes | None,
    key: str | bytes | None,
    on_delivery: Callable[[Any, Any], None],
    headers: Any,
    timestamp: int,
    partition: int,
) -> None:
    """Produce one message, waiting while the producer's queue is full and encoding a key
    that is not UTF-8 as its bytes (partition -1: the partitioner's).

    Raises:
        DeliveryError: the producer refused it (too large; the producer failed for good).
    """
    while True:
        try:
            producer.produce(
                topic, value, key, partition=partition, on_delivery=on_delivery,
                headers=headers, timestamp=timestamp,
            )  # fmt: skip
            return
        except BufferError:
            producer.poll(0.05)
        except UnicodeEncodeError:  # a key with bytes that are not UTF-8 (surrogate escapes)
            key = key_bytes(key) if isinstance(key, str) else key
        except ProduceError as exc:  # refused at once, e.g. larger than message.max.bytes
            raise DeliveryError(topic, key, f"refused by the producer: {exc}") from exc
