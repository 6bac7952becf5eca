"""What the engine reads and what it leaves: messages, effects and a batch's result.

A message is a plain tuple (the hot path makes millions); what a callback causes is an
*effect*, a tuple whose first item is its kind: a table update, an emitted message, a
loopback, a row of the timers changelog, a row of a window changelog, or a window's final
result (an emit that must be produced exactly once). The drivers (the tester, the partition
runtime) produce effects in order and commit a batch's state changes
(:meth:`BatchResult.changes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from goka.errors import ProcessingError

__all__ = [
    "EMIT", "FINAL", "LOOP", "MISSING", "NOT_SAVED", "TABLE", "TIMER", "WINDOW", "BatchResult",
    "Effect", "Headers", "Message", "restore",
]  # fmt: skip

#: Headers of a message, as a list of (name, value) pairs; emit() also takes a dict.
Headers = list[tuple[str, bytes]]

#: A key the state cache does not hold; a message whose callback saved nothing.
MISSING: Any = object()
NOT_SAVED: Any = object()


def restore(cache: dict[str, Any], key: str, saved: Any) -> None:
    """Put back the state ``key`` had before a failed message changed it (``saved``:
    ``MISSING`` if the cache held none)."""
    if saved is MISSING:
        cache.pop(key, None)
    else:
        cache[key] = saved


#: Kinds of effects (see the module docstring).
TABLE, EMIT, LOOP, TIMER, WINDOW, FINAL = 0, 1, 2, 3, 4, 5

#: An input message: ``(topic, offset, key, value, timestamp_ms, headers)``.
Message = tuple[str, int, bytes | None, bytes | None, int, Headers | None]

#: What a message caused, in order: ``(kind, topic, key, value, headers, source message)`` where
#: kind is ``context.TABLE``, ``EMIT`` or ``LOOP``; a None value is a tombstone.
Effect = tuple[int, str, str, bytes | None, Headers | None, Message]


@dataclass
class Flight:
    """How a call's records were in flight together (:mod:`goka.group.concurrent`): the
    ``most`` at once, the ``longest`` one record was (seconds), the ``seconds`` of all records
    added up (over the call's time: the average in flight), the most finished records
    ``held`` in memory at once behind an earlier record not finished (their effects wait for
    it: released in offset order), and the records that ``waited`` behind an earlier record
    of their key, per key."""

    most: int = 0
    held: int = 0
    longest: float = 0.0
    seconds: float = 0.0
    waited: dict[str, int] = field(default_factory=dict)


@dataclass
class BatchResult:
    """What processing a batch of messages produced.

    Attributes:
        effects: table updates, emits and loopbacks, in the order the callbacks made them.
        failed: messages skipped under the ``skip``/``dead-letter`` policies, with their errors;
            their effects and state changes were rolled back.
        processed: messages in the batch (including failed ones).
        consumed: how many of the messages passed were handled: fewer than all when what
            was due hit the engine's ``fire_budget`` (:attr:`Engine.backlog`); the caller
            commits, then passes the rest again.
        late: records dropped as late for a window (those sent to the dead-letter topic are
            in ``failed``).
        windows: each window table's section rows the batch changed (``w<window key>``: the
            last value, None: deleted; with the close index rows of windows created or
            deleted), by changelog topic (a timed group's; for the partition's pending rows:
            :meth:`goka.time.pending_rows.PendingRows.apply_windows`).
    """

    effects: list[Effect] = field(default_factory=list)
    failed: list[tuple[ProcessingError, Message]] = field(default_factory=list)
    processed: int = 0
    consumed: int = 0
    late: int = 0
    windows: dict[str, dict[str, bytes | None]] = field(default_factory=dict)
    flight: Flight | None = None  # records in flight together (a group with concurrency)

    def changes(self) -> dict[str, bytes | None]:
        """Return the final raw state of each changed key (None: deleted), to commit."""
        return {key: data for kind, _, key, data, _, _ in self.effects if kind == TABLE}
