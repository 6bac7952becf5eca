"""A section as a batch sees it: the committed rows with the batch's changes on top, and the
journal that undoes a failed record's changes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

__all__ = ["ABSENT", "Journal", "Overlay", "Section", "rollback"]


class Section(Protocol):
    """What the time state reads of a committed section (a :class:`~goka.storage.Storage`
    is one)."""

    def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None."""
        ...

    def items(
        self, *, start: str | None = None, stop: str | None = None, prefix: str | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[str, bytes]]:  # fmt: skip
        """``(key, value)`` in key order."""
        ...


#: What undoes a change: ``(mapping, key, previous value or ABSENT)``.
Journal = list[tuple[dict[str, Any], str, Any]]
ABSENT: Any = object()


def rollback(journal: Journal) -> None:
    """Undo the changes ``journal`` recorded, newest first; empty it."""
    for mapping, key, previous in reversed(journal):
        if previous is ABSENT:
            mapping.pop(key, None)
        else:
            mapping[key] = previous
    journal.clear()


class Overlay:
    """A section as a batch sees it: the committed rows with the batch's changes on top.
    Changes are recorded in ``journal`` (if given), to be undone."""

    def __init__(self, section: Section, journal: Journal | None = None) -> None:
        self.section = section
        self.changes: dict[str, bytes | None] = {}
        self._journal = journal
        # what a batch reads below its changes does not change during the batch; over a
        # PendingView, its layers are read directly (a hot path: a read per window update)
        self._pending: dict[str, bytes | None]
        self._committed: dict[str, bytes | None]
        self._read: Callable[[str], bytes | None]
        layers = getattr(section, "layers", None)  # a PendingView (goka.time.pending_rows)
        if layers is not None:
            self._pending, self._committed, self._read = layers()
        else:
            self._pending, self._committed, self._read = {}, {}, section.get

    def get(self, key: str) -> bytes | None:
        """The row's value as of now in the batch."""
        changes = self.changes
        if key in changes:
            return changes[key]
        pending = self._pending
        if key in pending:
            return pending[key]
        committed = self._committed
        if key in committed:
            return committed[key]
        value = committed[key] = self._read(key)
        return value

    def put(self, key: str, value: bytes | None) -> None:
        """Change a row (None: delete it)."""
        if self._journal is not None:
            self._journal.append((self.changes, key, self.changes.get(key, ABSENT)))
        self.changes[key] = value

    def items(self, prefix: str) -> list[tuple[str, bytes]]:
        """Rows under ``prefix`` as of now, in key order. (A record in flight reads its
        key's rows while records released before it write others': their changes are read
        as one copy.)"""
        found = dict(self.section.items(prefix=prefix))
        for key, value in self.changes.copy().items():
            if key.startswith(prefix):
                if value is None:
                    found.pop(key, None)
                else:
                    found[key] = value
        return sorted(found.items())
