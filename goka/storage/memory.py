"""In-memory storage: for the tester, for small tables, and for tests of storage users."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from bisect import bisect_left
from collections.abc import Iterator
from pathlib import Path

from goka.errors import StorageError
from goka.keys import key_bytes
from goka.storage.base import FORMAT, CheckpointFile, StorageInfo, WriteBatch

_PREFIX = "memory-"

__all__ = ["MemoryStorage"]


class MemoryStorage:
    """A table's state in a dict. Thread-safe (see :mod:`goka.storage.base`); lost on exit.

    Range scans sort the keys once per scan (``O(n log n)``): fine for small tables. A checkpoint
    is one JSON file named by its content's hash; :meth:`at` opens one.
    """

    def __init__(self, table: str) -> None:
        self.table = table
        self._values: dict[str, bytes] = {}
        self._offsets: dict[tuple[str, int], int] = {}
        self._sections: dict[str, dict[str, bytes]] = {}
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def at(cls, path: str | os.PathLike[str], table: str) -> MemoryStorage:
        """Return a storage with the content of the checkpoint in ``path``, or an empty one.

        This is the memory storage's builder (see :data:`goka.storage.StorageBuilder`): the
        directory is read once; nothing is written back to it.

        Raises:
            StorageError: the checkpoint is unreadable or of another table.
        """
        storage = cls(table)
        found = sorted(Path(path).glob(f"{_PREFIX}*.json")) if Path(path).is_dir() else []
        if found:
            storage._load(found[-1])
        return storage

    def _load(self, file: Path) -> None:
        try:
            data = json.loads(file.read_bytes())
            values = {k: bytes.fromhex(v) for k, v in data["values"].items()}
            offsets = {(t, int(p)): int(o) for t, p, o in data["offsets"]}
            sections = {
                name: {k: bytes.fromhex(v) for k, v in rows.items()}
                for name, rows in data.get("sections", {}).items()
            }
            table = data["table"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StorageError(f"memory checkpoint {file} is unreadable: {exc}") from exc
        if table != self.table:
            raise StorageError(f"memory checkpoint {file} holds {table!r}, not {self.table!r}")
        self._values, self._offsets, self._sections = values, offsets, sections

    @property
    def info(self) -> StorageInfo:
        return StorageInfo(self.table, FORMAT, None)

    def get(self, key: str) -> bytes | None:
        return self._values.get(key)

    def has(self, key: str) -> bool:
        return key in self._values

    def items(
        self,
        *,
        start: str | None = None,
        stop: str | None = None,
        prefix: str | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[str, bytes]]:
        return self._items(self._values, start, stop, prefix, reverse)

    def section(self, name: str) -> _Section:
        with self._lock:
            rows = self._sections.setdefault(name, {})
        return _Section(self, rows)

    def _items(
        self, rows: dict[str, bytes], start: str | None, stop: str | None, prefix: str | None,
        reverse: bool,
    ) -> Iterator[tuple[str, bytes]]:  # fmt: skip
        with self._lock:  # a consistent snapshot, as a LevelDB iterator has
            snapshot = dict(rows)
        keys = sorted(snapshot, key=key_bytes)  # byte order, like LevelDB
        encoded = [key_bytes(k) for k in keys]
        low = bisect_left(encoded, max(key_bytes(start or ""), key_bytes(prefix or "")))
        high = len(keys) if stop is None else bisect_left(encoded, key_bytes(stop))
        scope = key_bytes(prefix or "")
        pairs = zip(keys[low:high], encoded[low:high], strict=True)
        selected = [k for k, b in pairs if b.startswith(scope)]
        for key in reversed(selected) if reverse else selected:
            yield key, snapshot[key]

    def offsets(self) -> dict[tuple[str, int], int]:
        with self._lock:
            return dict(self._offsets)

    def write(self, batch: WriteBatch) -> None:
        with self._lock:
            for key, value in batch.values.items():
                if value is None:
                    self._values.pop(key, None)
                else:
                    self._values[key] = value
            self._offsets.update(batch.offsets)
            for name, changes in batch.sections.items():
                rows = self._sections.setdefault(name, {})
                for key, value in changes.items():
                    if value is None:
                        rows.pop(key, None)
                    else:
                        rows[key] = value

    def count(self) -> int:
        return len(self._values)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._offsets.clear()
            for rows in self._sections.values():
                rows.clear()

    def flush(self) -> None:
        """Nothing to do: memory has no log."""

    def checkpoint(self, directory: Path) -> list[CheckpointFile]:
        with self._lock:
            content = {
                "table": self.table,
                "values": {k: v.hex() for k, v in self._values.items()},
                "offsets": [[t, p, o] for (t, p), o in self._offsets.items()],
                "sections": {
                    name: {k: v.hex() for k, v in rows.items()}
                    for name, rows in self._sections.items()
                    if rows
                },
            }
        data = json.dumps(content, sort_keys=True).encode()
        name = f"{_PREFIX}{hashlib.sha256(data).hexdigest()[:32]}.json"
        directory.mkdir(parents=True)
        (directory / name).write_bytes(data)
        return [CheckpointFile(name, True)]

    def close(self) -> None:
        self._closed = True

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._closed

    def __enter__(self) -> MemoryStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryStorage(table={self.table!r}, {len(self._values)} keys)"


class _Section:
    """A section of a memory storage (see :meth:`MemoryStorage.section`)."""

    __slots__ = ("_rows", "_storage")

    def __init__(self, storage: MemoryStorage, rows: dict[str, bytes]) -> None:
        self._storage, self._rows = storage, rows

    def get(self, key: str) -> bytes | None:
        return self._rows.get(key)

    def items(
        self, *, start: str | None = None, stop: str | None = None, prefix: str | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[str, bytes]]:  # fmt: skip
        return self._storage._items(self._rows, start, stop, prefix, reverse)
