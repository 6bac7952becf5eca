"""The storage protocol shared by views and processors, and what both implementations share.

A storage holds one table's values (string keys, byte values) and the Kafka offsets its content
reflects, per (topic, partition). Values and offsets change together in one atomic
:class:`WriteBatch`, so after a crash a storage is exactly at the offsets it records.

Concurrency contract (both implementations): many threads may read (``get``, ``has``, ``items``,
``offsets``) while one thread writes (``write``). A read sees each batch entirely or not at all;
an iteration sees the storage as it was when the iteration started. ``checkpoint`` and ``clear``
must not run concurrently with ``write``.

A *storage builder* (:data:`StorageBuilder`) opens the storage of a table at a path; processors
take one, so tests and users can swap LevelDB for memory, as Go Goka's storage builders allow.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

__all__ = [
    "FORMAT",
    "CheckpointFile",
    "SectionReader",
    "Storage",
    "StorageBuilder",
    "StorageInfo",
    "WriteBatch",
    "move_aside",
    "prefix_end",
]

log = logging.getLogger(__name__)

#: Version of the on-disk layout; a storage written with another one is refused.
FORMAT = "goka-py-1"


@dataclass
class WriteBatch:
    """Changes to apply atomically: values (None deletes), offsets, and rows of sections.

    Build it, then hand it to :meth:`Storage.write`. Later changes to a key win.
    """

    values: dict[str, bytes | None] = field(default_factory=dict)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    sections: dict[str, dict[str, bytes | None]] = field(default_factory=dict)

    def section(self, name: str) -> dict[str, bytes | None]:
        """The changes to section ``name`` (add to it)."""
        return self.sections.setdefault(name, {})

    def set(self, key: str, value: bytes) -> None:
        """Set ``key`` to ``value``."""
        self.values[key] = value

    def delete(self, key: str) -> None:
        """Delete ``key``."""
        self.values[key] = None

    def set_offset(self, topic: str, partition: int, offset: int) -> None:
        """Record that the content reflects ``topic``/``partition`` up to ``offset`` (exclusive:
        the next offset to read)."""
        self.offsets[(topic, partition)] = offset

    def __len__(self) -> int:
        return len(self.values) + len(self.offsets) + sum(map(len, self.sections.values()))


@dataclass(frozen=True)
class StorageInfo:
    """What a storage says about itself."""

    table: str
    format: str
    path: str | None


class CheckpointFile(NamedTuple):
    """A file of a checkpoint: its name, and whether that name always means the same content
    for this storage (LevelDB's table files) or may be rewritten (its log, manifest, CURRENT)."""

    name: str
    immutable: bool


class SectionReader(Protocol):
    """Reads one section of a storage: rows kept beside the table's values (a processor
    keeps its timers and window tables there), written with them by :meth:`Storage.write`."""

    def get(self, key: str) -> bytes | None:
        """Return the value of ``key``, or None."""
        ...

    def items(
        self, *, start: str | None = None, stop: str | None = None, prefix: str | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[str, bytes]]:  # fmt: skip
        """Yield ``(key, value)`` in key order (as :meth:`Storage.items`)."""
        ...


class Storage(Protocol):
    """One table's local state. See the module docstring for the concurrency contract.

    Keys are ``str`` in :mod:`goka.keys`'s form: stored as the key's bytes (surrogate escapes
    back to the bytes they stand for), ordered and prefix-matched by those bytes. Besides the
    table's values a storage holds named *sections* of rows (:meth:`section`), which
    :meth:`count` and :meth:`items` leave out and :meth:`clear` and :meth:`checkpoint` include.
    """

    @property
    def info(self) -> StorageInfo:
        """The table this storage belongs to, its format and location."""
        ...

    def get(self, key: str) -> bytes | None:
        """Return the value of ``key``, or None."""
        ...

    def has(self, key: str) -> bool:
        """Return True if ``key`` has a value."""
        ...

    def items(
        self,
        *,
        start: str | None = None,
        stop: str | None = None,
        prefix: str | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[str, bytes]]:
        """Yield ``(key, value)`` in key order (UTF-8 byte order).

        Args:
            start: first key (inclusive).
            stop: last key (exclusive).
            prefix: only keys starting with this; combines with ``start``/``stop``.
            reverse: from the last key to the first.
        """
        ...

    def offsets(self) -> dict[tuple[str, int], int]:
        """Return the recorded ``{(topic, partition): next offset}``."""
        ...

    def section(self, name: str) -> SectionReader:
        """A reader of section ``name`` (empty if never written); it sees later writes."""
        ...

    def write(self, batch: WriteBatch) -> None:
        """Apply ``batch`` atomically (values and offsets together)."""
        ...

    def count(self) -> int:
        """Return the number of keys (a full scan on LevelDB)."""
        ...

    def clear(self) -> None:
        """Delete every value and offset (keeping the table name). Interrupted anywhere (a
        crash), it leaves a storage that records no offsets: never offsets without the values
        they stand for."""
        ...

    def flush(self) -> None:
        """Move recent writes into the storage's long-term form if that makes reopening it
        faster (a no-op where it would not). Thread-safe with reads and writes, not with close.

        Raises:
            StorageError: the storage failed.
        """
        ...

    def checkpoint(self, directory: Path) -> list[CheckpointFile]:
        """Write a consistent copy of the storage into ``directory`` (created; must not exist),
        hard-linking files that never change. The builder of this storage opens a copy moved
        to a storage path. The storage stays usable, and so do iterations of :meth:`items`
        begun before (of the storage and its sections): they go on after the last key they
        yielded, and may see rows written since.

        A storage may also offer ``prepare_checkpoint() -> bool`` (LevelDB does): begin, in
        the background, what a checkpoint would otherwise do in the caller's thread; True
        once a checkpoint now is quick. A processor's loop asks it before it stages a
        snapshot.

        Raises:
            StorageError: the copy could not be written.
        """
        ...

    def close(self) -> None:
        """Release the storage. Idempotent."""
        ...


#: Opens (creating if missing) the storage of ``table`` at ``path``; may raise StorageError.
StorageBuilder = Callable[[Path, str], Storage]


def prefix_end(prefix: bytes) -> bytes | None:
    """Return the smallest byte string greater than every string starting with ``prefix``."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


#: Damaged stores kept for inspection per store directory (older ones are deleted).
KEPT_DAMAGED = 2


def move_aside(path: Path, reason: str) -> Path | None:
    """Move a damaged store's directory aside, beside it as ``<name>.damaged-<time>``, for a
    person to inspect; keep the newest :data:`KEPT_DAMAGED` of them. Return where it went
    (None: there was nothing at ``path``). A rename: a crash leaves it here or there."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    aside = path.with_name(f"{path.name}.damaged-{stamp}-{secrets.token_hex(2)}")
    try:
        path.rename(aside)
    except FileNotFoundError:
        return None
    log.warning("store %s is damaged (%s): moved to %s, to be rebuilt", path, reason, aside)
    for old in sorted(path.parent.glob(f"{path.name}.damaged-*"))[:-KEPT_DAMAGED]:
        shutil.rmtree(old, ignore_errors=True)
    return aside
