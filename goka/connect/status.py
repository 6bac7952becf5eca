"""What a running connector says of itself (the monitor page, the REST API and the metrics read
it): its state in Kafka Connect's words, what it counted, where it stands, what went wrong."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ConnectorStatus", "Lifecycle", "State"]

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
