"""What a running connector says of itself (the monitor page, the REST API and the metrics read
it): its state in Kafka Connect's words, what it counted, where it stands, what went wrong;
and the status topic where connectors note it for the processors' monitor pages."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "STATUS_TOPIC",
    "ConnectorBoard",
    "ConnectorStatus",
    "Lifecycle",
    "State",
    "StatusPublisher",
]

#: Kafka Connect's connector states: not started yet, running, stopped, failed.
State = Literal["UNASSIGNED", "RUNNING", "STOPPED", "FAILED"]


@dataclass
class ConnectorStatus:
    """One connector's status (a copy: it does not change under its reader).

    Attributes:
        name: the connector's name.
        type: ``sink`` or ``source``.
        kind: its declaration's class (``PostgresSink``, ``FileSource``...).
        state: see :data:`State`.
        target: where it writes (sinks) or reads (sources).
        topics: the topics it reads (sinks) or writes (sources).
        counts: records read, written, left out... (counts of the job's run).
        positions: each ``topic/partition``'s position as text (a sink: the next offset it
            wrote; a source: the last record's position when the run began).
        position: a source's position now (the last record given to the producer).
        last_commit: when the last batch or flush committed (epoch seconds; 0: none yet).
        errors: the last errors (bad records a policy took, or why it failed).
        failure: why it failed (FAILED), else None.
    """

    name: str
    type: Literal["sink", "source"]
    kind: str
    state: State
    target: str
    topics: list[str]
    counts: dict[str, int] = field(default_factory=dict)
    positions: dict[str, str] = field(default_factory=dict)
    position: str | None = None
    last_commit: float = 0.0
    errors: list[str] = field(default_factory=list)
    failure: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The status as JSON-ready values."""
        return {"name": self.name, "type": self.type, "kind": self.kind, "state": self.state,
                "target": self.target, "topics": list(self.topics), "counts": dict(self.counts),
                "positions": dict(self.positions), "position": self.position,
                "last_commit": self.last_commit, "errors": list(self.errors),
                "failure": self.failure}  # fmt: skip


class Lifecycle:
    """A job's state as it runs (thread-safe enough: one writer, readers copy)."""

    def __init__(self) -> None:
        self.state: State = "UNASSIGNED"
        self.failure: str | None = None
        self.last_commit = 0.0

    def running(self) -> None:
        self.state, self.failure = "RUNNING", None

    def committed(self) -> None:
        self.last_commit = time.time()

    def ended(self, error: BaseException | None) -> None:
        if error is None:
            self.state = "STOPPED"
        else:
            self.state, self.failure = "FAILED", f"{type(error).__name__}: {error}"


#: Where every ``goka connect run`` notes its connectors' statuses, like Kafka Connect's status
#: topic (compacted, one partition): key the connector's name, value the status as its monitor
#: samples it (JSON, with ``worker``, ``url`` and ``at``: the sample's time). A processor's
#: monitor page reads it (:class:`ConnectorBoard`).
STATUS_TOPIC = "goka-connect-status"


class StatusPublisher:
    """Notes connectors' statuses in :data:`STATUS_TOPIC` (made if missing).

    Args:
        brokers: bootstrap servers.
        worker: how the statuses name this process.
        url: its monitor's address (None: no HTTP port).
        kafka_config: librdkafka settings.
    """

    def __init__(self, brokers: str, worker: str, url: str | None = None,
                 kafka_config: dict[str, Any] | None = None) -> None:  # fmt: skip
        from goka.codec import JsonCodec
        from goka.emitter import Emitter
        from goka.topic_manager import TopicManager

        config = dict(kafka_config or {})
        TopicManager(brokers, **config).ensure_table_exists(STATUS_TOPIC, 1)
        self.worker, self.url = worker, url
        self._emitter = Emitter(brokers, STATUS_TOPIC, JsonCodec(), **config)

    def publish(self, connectors: list[dict[str, Any]]) -> None:
        """Note each connector's status (sampled by its monitor: a dict with ``name``)."""
        now = time.time()
        for status in connectors:
            noted = {**status, "worker": self.worker, "url": self.url, "at": now}
            self._emitter.emit(status["name"], noted)

    def close(self) -> None:
        """Deliver what was noted, and let go of the producer."""
        self._emitter.close()


class ConnectorBoard:
    """The statuses of the connectors that read or write ``topics``, as :data:`STATUS_TOPIC`
    says (followed by a view in memory once the topic exists; looked for every
    ``look_every`` seconds until then). A connector not heard of for ``silent_after`` seconds
    while running is shown as ``SILENT`` (killed, or its process stuck).

    Args:
        brokers: bootstrap servers.
        topics: a processor's topics.
        kafka_config: librdkafka settings.
    """

    def __init__(self, brokers: str, topics: set[str], *,
                 kafka_config: dict[str, Any] | None = None, silent_after: float = 10.0,
                 look_every: float = 30.0) -> None:  # fmt: skip
        self.brokers, self.topics = brokers, set(topics)
        self.silent_after, self.look_every = silent_after, look_every
        self._config = dict(kafka_config or {})
        self._view: Any = None
        self._manager: Any = None
        self._looked = -look_every

    def connectors(self) -> list[dict[str, Any]]:
        """The statuses (with ``silent_for``: seconds since the last one), by name."""
        view = self._follow()
        if view is None:
            return []
        now, found = time.time(), []
        for _, status in view.items():
            if not isinstance(status, dict) or not self.topics & set(status.get("topics", ())):
                continue
            silent = max(0.0, now - float(status.get("at", 0)))
            if status.get("state") == "RUNNING" and silent > self.silent_after:
                status = {**status, "state": "SILENT"}
            found.append({**status, "silent_for": round(silent, 1)})
        return sorted(found, key=lambda s: str(s.get("name")))

    def _follow(self) -> Any:
        if self._view is not None or time.monotonic() - self._looked < self.look_every:
            return self._view
        from goka.codec import JsonCodec
        from goka.storage.memory import MemoryStorage
        from goka.topic_manager import TopicManager
        from goka.view import View

        self._looked = time.monotonic()
        if self._manager is None:  # (one admin client, not one per look)
            self._manager = TopicManager(self.brokers, **self._config)
        if self._manager.exists(STATUS_TOPIC):
            memory = MemoryStorage(STATUS_TOPIC)
            self._view = View(self.brokers, STATUS_TOPIC, JsonCodec(), storage=memory, quiet=True,
                              allow_stale_reads=True, **self._config).start()  # fmt: skip
        return self._view

    def close(self) -> None:
        if self._view is not None:
            self._view.close()
