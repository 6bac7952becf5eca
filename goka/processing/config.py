"""What a task is given: :class:`TaskConfig`, the processor's settings and what the driver
adds (pickled with the task)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from goka.group.graph import GroupGraph
from goka.kafka.config import scoped
from goka.processing.settings import ProcessorSettings

__all__ = ["TaskConfig"]


#: Bytes of a produced message's size kept for its key, headers and record framing.
MESSAGE_OVERHEAD = 8 * 1024


@dataclass(frozen=True)
class TaskConfig(ProcessorSettings):
    """What every partition processor of a group needs: the processor's settings (see
    :class:`~goka.processing.settings.ProcessorSettings`) and what the driver adds; pickled
    with the task.

    Attributes:
        graph: the group.
        brokers: bootstrap servers.
        flush_timeout: seconds to wait for a task's outputs to be acknowledged.
        store_timeout: seconds to wait for a store another task or process holds.
        stop_url: a file (path or fsspec URL) whose existence asks the tasks of an epoch to
            end early (see :class:`~goka.processing.signals.StopSignal`).
        board_url: a directory (path or fsspec URL) where tasks say what their partitions
            are doing (see :class:`~goka.processing.signals.PartitionBoard`); None: nowhere.
    """

    graph: GroupGraph
    brokers: str
    flush_timeout: float = 120.0
    store_timeout: float = 120.0
    stop_url: str | None = None
    board_url: str | None = None

    @property
    def max_message_bytes(self) -> int:
        """The most bytes a produced value may have: the producer's ``message.max.bytes``
        (librdkafka's default 1,000,000) less room for the key, headers and framing (8 KiB,
        or a quarter of a smaller limit)."""
        settings = {**scoped(self.kafka_config, "producer."), **self.producer_config}
        limit = int(settings.get("message.max.bytes", 1_000_000))
        return limit - min(MESSAGE_OVERHEAD, limit // 4)

    def store_path(self, name: str, partition: int) -> Path:
        """Where the store ``name`` (``partition``, ``join-<table>``) of ``partition`` lives."""
        return Path(self.state_dir) / self.graph.group / f"{name}-{partition}"

    @property
    def dlq_topic(self) -> str:
        """Where dead letters go: ``<group>-dlq``."""
        return f"{self.graph.group}-dlq"
