"""Create and check the topics a Goka application needs, like Go Goka's ``TopicManager``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from goka.errors import ConfigurationError, TopicError
from goka.kafka.admin import KafkaAdmin
from goka.kafka.config import Brokers

if TYPE_CHECKING:
    from goka.group.graph import GroupGraph

__all__ = ["TopicManager", "TopicManagerConfig", "prepare_group"]

log = logging.getLogger(__name__)

Mismatch = Literal["fail", "warn", "ignore"]


@dataclass(frozen=True)
class TopicManagerConfig:
    """How topics are created and checked.

    Attributes:
        partitions: partitions of topics created without an explicit count.
        replication: replication factor of created topics (None: the cluster's
            ``default.replication.factor``; 3 is usual on a real cluster).
        stream_config: settings of created stream topics (e.g. ``{"retention.ms": "86400000"}``).
        table_config: settings of created table topics; ``cleanup.policy=compact`` is always set.
        on_table_not_compacted: what to do when an existing table topic is not compacted.
    """

    partitions: int = 10
    replication: int | None = None
    stream_config: Mapping[str, str] = field(default_factory=dict)
    table_config: Mapping[str, str] = field(default_factory=dict)
    on_table_not_compacted: Mismatch = "fail"

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ConfigurationError(f"partitions must be at least 1, got {self.partitions}")
        if self.replication is not None and self.replication < 1:
            raise ConfigurationError(f"replication must be at least 1, got {self.replication}")
        if self.on_table_not_compacted not in ("fail", "warn", "ignore"):
            raise ConfigurationError(
                "on_table_not_compacted must be 'fail', 'warn' or 'ignore', "
                f"got {self.on_table_not_compacted!r}"
            )


class TopicManager:
    """Ensures stream and table topics exist, and checks co-partitioning.

    Works against any Kafka-protocol cluster. Thread-safe.

    Args:
        brokers: bootstrap servers.
        config: creation defaults and checks.
        admin_builder: creates the admin client (tests may swap it).
        **kafka_config: librdkafka settings (security, timeouts).
    """

    def __init__(
        self,
        brokers: Brokers,
        config: TopicManagerConfig | None = None,
        *,
        admin_builder: Callable[[Brokers, Mapping[str, Any]], KafkaAdmin] = KafkaAdmin,
        **kafka_config: Any,
    ) -> None:
        self.config = config or TopicManagerConfig()
        self._admin = admin_builder(brokers, kafka_config)

    def partitions(self, topic: str) -> int:
        """Return the partition count of ``topic``.

        Raises:
            TopicError: if it does not exist.
        """
        counts = self._admin.topics()
        if topic not in counts:
            raise TopicError(f"topic {topic!r} does not exist")
        return counts[topic]

    def exists(self, topic: str) -> bool:
        """Return True if ``topic`` exists."""
        return topic in self._admin.topics()

    def ensure_stream_exists(
        self, topic: str, partitions: int | None = None, *, retention_ms: int | None = None
    ) -> int:
        """Create stream ``topic`` unless it exists (keeping its records ``retention_ms``, if
        given); return its partition count.

        Raises:
            TopicError: it exists with another partition count than ``partitions``, or creating
                it failed.
        """
        settings = dict(self.config.stream_config)
        if retention_ms is not None:
            settings["retention.ms"] = str(retention_ms)
        return self._ensure(topic, partitions, settings)

    def ensure_table_exists(self, topic: str, partitions: int | None = None) -> int:
        """Create table ``topic`` (compacted) unless it exists; return its partition count.

        An existing table topic that is not compacted is handled as ``on_table_not_compacted``
        says: a non-compacted table topic loses keys when its retention deletes old segments.

        Raises:
            TopicError: partition count mismatch, creation failed, or (``"fail"``) not compacted.
        """
        settings = {**self.config.table_config, "cleanup.policy": "compact"}
        count = self._ensure(topic, partitions, settings)
        self._check_compacted(topic)
        return count

    def ensure_window_exists(self, topic: str, partitions: int | None, retention_ms: int) -> int:
        """Create window table ``topic`` (compacted, and deleted after ``retention_ms``: a
        window's changelog expires on its own) unless it exists; return its partition count.

        Raises:
            TopicError: as :meth:`ensure_table_exists`.
        """
        settings = {**self.config.table_config, "cleanup.policy": "compact,delete",
                    "retention.ms": str(retention_ms)}  # fmt: skip
        count = self._ensure(topic, partitions, settings)
        self._check_compacted(topic)
        return count

    def _ensure(self, topic: str, partitions: int | None, settings: dict[str, str]) -> int:
        wanted = partitions or self.config.partitions
        existing = self._admin.topics().get(topic)
        if existing is None:
            replication = -1 if self.config.replication is None else self.config.replication
            created = self._admin.create_topic(topic, wanted, replication, settings)
            if created:
                log.info("created topic %s (%d partitions, %s)", topic, wanted, settings)
                return wanted
            # made meanwhile by another: a broker of a cluster other than the one that told
            # create_topic may not know it yet (the failover test's cluster said "no such topic")
            existing = self._admin.settled_partitions(topic)
        if partitions is not None and existing != partitions:
            raise TopicError(f"topic {topic!r} has {existing} partitions, expected {partitions}")
        return existing

    def _check_compacted(self, topic: str) -> None:
        behaviour = self.config.on_table_not_compacted
        if behaviour == "ignore":
            return
        policy = self._admin.topic_config(topic).get("cleanup.policy", "delete")
        if "compact" in policy:
            return
        message = (
            f"table topic {topic!r} has cleanup.policy={policy!r}, expected 'compact': "
            "old keys will be deleted by retention"
        )
        if behaviour == "fail":
            raise TopicError(message)
        log.warning(message)

    def ensure_copartitioned(self, topics: Iterable[str]) -> int:
        """Check that all ``topics`` exist with the same partition count; return that count.

        Raises:
            TopicError: naming the missing topics, or every topic with its count when they differ.
        """
        names = list(dict.fromkeys(topics))
        if not names:
            raise ConfigurationError("ensure_copartitioned needs at least one topic")
        counts = self._admin.topics()
        missing = [name for name in names if name not in counts]
        if missing:
            raise TopicError(f"topics do not exist: {', '.join(map(repr, missing))}")
        found = {name: counts[name] for name in names}
        if len(set(found.values())) > 1:
            listing = ", ".join(f"{name!r}: {count}" for name, count in found.items())
            raise TopicError(f"topics are not co-partitioned (partition counts differ): {listing}")
        return found[names[0]]

    def delete(self, topic: str) -> None:
        """Delete ``topic`` (tests and tools)."""
        self._admin.delete_topic(topic)


#: How much longer a window table's changelog keeps a window than the window table does (a
#: restore reads it back after a stop of up to this long).
WINDOW_MARGIN_MS = 86_400_000


def prepare_group(
    manager: TopicManager, graph: GroupGraph, *, dead_letters: bool = False,
    create_outputs: bool = False,
) -> int:  # fmt: skip
    """Check a group's topics, then create its table, timers, window tables, ticks, loop and
    dead-letter (if ``dead_letters``) topics, and its output topics with the group's
    partition count if ``create_outputs``. Nothing is created unless every check passed.

    Returns:
        The partition count.

    Raises:
        TopicError: an input, join, lookup or (unless created) output topic is missing, or
            the topics are not co-partitioned (with counts).
    """
    partitions = manager.ensure_copartitioned([*graph.inputs, *graph.joins])
    lookups = [t for t in graph.lookups if not manager.exists(t)]
    outputs = [t for t in graph.outputs if not manager.exists(t)]
    if lookups:
        raise TopicError(f"group {graph.group!r}: lookup tables do not exist: {lookups}")
    if outputs and not create_outputs:
        raise TopicError(
            f"group {graph.group!r}: output topics do not exist: {outputs}; create them "
            f"with `goka topics create {' '.join(outputs)} --partitions {partitions}`, "
            "or let the processor create them (--create-topics, Processor.create_topics())"
        )
    if graph.persist:
        manager.ensure_table_exists(graph.table, partitions)
    if graph.timed:
        manager.ensure_table_exists(graph.group.timers, partitions)
    if graph.ticking:
        manager.ensure_stream_exists(graph.group.ticks, partitions, retention_ms=3_600_000)
    for edge in graph.windows.values():
        assert edge.spec is not None
        kept = edge.spec.longest + edge.grace + edge.retention + WINDOW_MARGIN_MS
        manager.ensure_window_exists(edge.topic, partitions, kept)
    if graph.loop:
        manager.ensure_stream_exists(graph.loop_topic, partitions)
    if dead_letters:
        manager.ensure_stream_exists(f"{graph.group}-dlq", partitions)
    for topic in outputs:
        manager.ensure_stream_exists(topic, partitions)
    return manager.ensure_copartitioned(graph.copartitioned_topics())
