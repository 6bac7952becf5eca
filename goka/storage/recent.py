"""The values of a store's recently read or written keys, kept in memory in front of it (as
Kafka Streams' record cache serves a busy key's reads): a processor reads each key its
records carry, and a key read once is mostly read again soon (a count, a session, a join).

Write-through: the store's writes update what is kept (after they succeeded), so what is
kept is what the store holds. Bounded by bytes (each entry counts its key, its value and
:data:`ENTRY_BYTES` of Python's own); past the bound the oldest entries go first (insertion
order: a hit does not reorder, so that it costs one dictionary lookup, and a write one
``dict.update``).

Thread-safe: reads take no lock; a read that missed keeps what it read only if no write
came between its read of the store and now (a write's count), under the lock writes take,
so a slow reader cannot put back a value a write replaced.
"""

from __future__ import annotations

import threading

__all__ = ["ENTRY_BYTES", "MISSING", "RecentValues"]

#: What an entry costs beyond its key's and value's bytes (the key's str and the value's
#: bytes objects, the dictionary's slot), measured on CPython 3.11: about 130 bytes.
ENTRY_BYTES = 130
#: What :meth:`RecentValues.get` returns for a key it does not keep (None is a kept absence).
MISSING = object()


class RecentValues:
    """Up to ``limit`` bytes of recent values (see the module docstring)."""

    __slots__ = ("_lock", "_size", "limit", "values", "writes")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: ``{key: value}`` (None: absent from the store); a reader's lookups go here directly
        self.values: dict[str, bytes | None] = {}
        self._size = 0  # an upper bound of what is kept, exact after each shrink
        self._lock = threading.Lock()
        self.writes = 0  # writes so far: a reader takes it before reading the store

    def get(self, key: str) -> object:
        """The value kept for ``key`` (None: absent from the store), or :data:`MISSING`."""
        return self.values.get(key, MISSING)

    def read(self, key: str, value: bytes | None, writes: int) -> None:
        """Keep ``value``, read from the store for ``key`` when :attr:`writes` was ``writes``."""
        with self._lock:
            if self.writes == writes and key not in self.values:
                self.values[key] = value
                self._size += len(key) + ENTRY_BYTES + (len(value) if value is not None else 0)
                if self._size > self.limit:
                    self._shrink()

    def wrote(self, values: dict[str, bytes | None]) -> None:
        """The store now holds ``values`` (None: deleted). Counted as if each key were new (a
        key kept already is counted twice until the next shrink counts exactly): no loop in
        Python per key."""
        with self._lock:
            self.writes += 1
            self.values.update(values)
            self._size += (sum(map(len, values)) + sum(map(len, filter(None, values.values())))
                           + ENTRY_BYTES * len(values))  # fmt: skip
            if self._size > self.limit:
                self._shrink()

    def clear(self) -> None:
        """Forget everything (the store was cleared, or closed)."""
        with self._lock:
            self.writes += 1
            self.values.clear()
            self._size = 0

    def __len__(self) -> int:
        return len(self.values)

    @property
    def size(self) -> int:
        """The bytes counted for what is kept (an upper bound)."""
        return self._size

    def _shrink(self) -> None:
        """Count what is kept exactly; if it is over the bound, drop the oldest entries until a
        quarter of the bound is free (one pass; it runs once per many writes)."""
        values = self.values
        self._size = (sum(map(len, values)) + sum(map(len, filter(None, values.values())))
                      + ENTRY_BYTES * len(values))  # fmt: skip
        excess = self._size - self.limit * 3 // 4
        if self._size <= self.limit:
            return
        dropped, freed = [], 0
        for key, value in values.items():
            dropped.append(key)
            freed += len(key) + ENTRY_BYTES + (len(value) if value is not None else 0)
            if freed >= excess:
                break
        for key in dropped:
            del values[key]
        self._size -= freed
