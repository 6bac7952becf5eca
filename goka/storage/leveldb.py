"""LevelDB storage (plyvel): the default for views and processors.

On-disk layout, one LevelDB directory per storage: ``m<name>`` metadata (table, format),
``o<topic>\\0<partition, 4 bytes big-endian>`` offsets (decimal), ``d<key>`` values,
``x<section>\\0<key>`` rows of sections. The ``d`` prefix keeps values contiguous and in key
order for range scans.

A checkpoint hard-links the table files the manifest names (LevelDB never rewrites one, nor
reuses a live file's number) and copies the manifest's whole records, the logs and ``CURRENT``,
the database open (its writer is the caller); where a compaction changed the manifest meanwhile,
again with the database closed for the copy (no compaction runs) and opened after.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

from goka._optional import missing_extra

try:
    import plyvel
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise missing_extra("plyvel", "view", "LevelDB storage") from exc

from goka.errors import StorageCorruptError, StorageError, StorageLockedError
from goka.storage.base import FORMAT, CheckpointFile, StorageInfo, WriteBatch, prefix_end
from goka.storage.leveldb_files import (
    BackgroundFlush,
    copy_file,
    copy_open,
    kept,
    logged_bytes,
    own,
)
from goka.storage.recent import MISSING, RecentValues

__all__ = ["LevelDBStorage"]

_DATA, _OFFSET, _META, _SECTION = b"d", b"o", b"m", b"x"
#: flush() leaves logs smaller than this alone; its range holds no key (only the memtable moves).
_FLUSH_BYTES, _FLUSH_RANGE = 64 << 10, b"\x00"
_PARTITION = struct.Struct(">I")


def _key(key: str) -> bytes:
    """A key's bytes (goka.keys.key_bytes; plyvel stays the only import here)."""
    return key.encode("utf-8", "surrogateescape")


def _offset_key(topic: str, partition: int) -> bytes:
    return _OFFSET + topic.encode() + b"\x00" + _PARTITION.pack(partition)


class LevelDBStorage:
    """A table's state in a LevelDB directory. Thread-safe (see :mod:`goka.storage.base`).

    Args:
        path: the directory; created if missing.
        table: the table it holds; a directory holding another table is refused.
        sync: fsync every write (slower; the table topic can rebuild a lost tail anyway).
        cache_mb: LevelDB block cache size.
        max_open_files: table files LevelDB keeps open (its default is 1000; a worker holding
            many partition stores wants fewer).
        write_buffer_mb: how much is written to memory (and the log) before it goes to a table
            file (LevelDB's default: 4). A store written at a high rate (a processor's: a
            windowed group writes rows for each record) wants more: fewer files to read
            through, less compaction (a memory bound: up to twice this while one is written
            out; a restart replays up to this much of log).
        recent_mb: keep the values of recently read and written keys in memory, up to this
            much, in front of LevelDB (:mod:`goka.storage.recent`; 0, the default: none). A
            processor's store wants it: each record reads its key.

    Raises:
        StorageLockedError: the directory is open in another storage (this or another process).
        StorageError: the directory is corrupt, not a LevelDB, not written by goka-py, of
            another table or of another format.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        table: str,
        *,
        sync: bool = False,
        cache_mb: int = 64,
        max_open_files: int = 1000,
        write_buffer_mb: int = 4,
        recent_mb: int = 0,
    ) -> None:
        self.path = Path(path)
        self.recent = RecentValues(recent_mb << 20) if recent_mb > 0 else None
        self.table = table
        self.sync = sync
        self._options = {
            "lru_cache_size": cache_mb << 20,
            "write_buffer_size": write_buffer_mb << 20,
            "max_open_files": max_open_files,
            "bloom_filter_bits": 10,
            "paranoid_checks": True,  # a damaged file fails at open or read, not in silence
        }
        self._refuse_foreign_directory()
        self._flusher = BackgroundFlush(self.flush, self.path.name)  # prepare_checkpoint's
        self._db = self._open()
        try:
            self._check_metadata()
        except StorageError:
            self._db.close()
            raise

    def _refuse_foreign_directory(self) -> None:
        names = {p.name for p in self.path.iterdir()} if self.path.is_dir() else set()
        if names and "CURRENT" not in names:
            if all(kept(n) or own(n) for n in names):  # a creation or copy cut short
                raise StorageCorruptError(
                    f"LevelDB at {self.path} is corrupt (its files are there but not CURRENT); "
                    "delete the directory to rebuild it from the table topic",
                    path=str(self.path),
                )
            raise StorageError(
                f"{self.path} is not empty and not a LevelDB directory (no CURRENT file); "
                f"refusing to write storage for table {self.table!r} into it"
            )
        if self.path.exists() and not self.path.is_dir():
            raise StorageError(f"{self.path} exists and is not a directory")

    def _open(self) -> plyvel.DB:
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            return plyvel.DB(str(self.path), create_if_missing=True, **self._options)
        except plyvel.IOError as exc:
            if "IO error: lock " in _reason(exc):
                raise StorageLockedError(
                    f"LevelDB at {self.path} is open in another storage: {_reason(exc)}"
                ) from exc
            raise self._failed("opening", exc) from exc
        except plyvel.Error as exc:
            raise self._failed("opening", exc) from exc

    def _check_metadata(self) -> None:
        try:
            found_table = self._db.get(_META + b"table", verify_checksums=True)
            found_format = self._db.get(_META + b"format", verify_checksums=True)
            anything = next(self._db.iterator(include_value=False), None)
        except plyvel.Error as exc:
            raise self._failed("opening", exc) from exc
        if found_table is None:
            if anything is not None:
                raise StorageError(
                    f"LevelDB at {self.path} was not written by goka-py (no metadata); "
                    f"refusing to use it for table {self.table!r}"
                )
            with self._db.write_batch(sync=True) as batch:
                batch.put(_META + b"table", self.table.encode())
                batch.put(_META + b"format", FORMAT.encode())
            return
        if found_table.decode() != self.table:
            raise StorageError(
                f"LevelDB at {self.path} holds table {found_table.decode()!r}, not {self.table!r}"
            )
        if found_format is None or found_format.decode() != FORMAT:
            raise StorageError(
                f"LevelDB at {self.path} has format {found_format!r}, expected {FORMAT!r}; "
                "delete it to rebuild from the table topic"
            )

    @property
    def info(self) -> StorageInfo:
        return StorageInfo(self.table, FORMAT, str(self.path))

    def get(self, key: str) -> bytes | None:
        recent = self.recent
        if recent is not None:
            found = recent.values.get(key, MISSING)
            if found is not MISSING:
                return found  # type: ignore[return-value]
            writes = recent.writes
        try:
            value: bytes | None = self._db.get(
                _DATA + key.encode("utf-8", "surrogateescape"), verify_checksums=True
            )
        except plyvel.Error as exc:
            raise self._failed("reading", exc) from exc
        if recent is not None:
            recent.read(key, value, writes)
        return value

    def has(self, key: str) -> bool:
        return self.get(key) is not None

    def _failed(self, doing: str, exc: Exception) -> StorageError:
        """The error to raise for a plyvel error while ``doing`` something."""
        reason = _reason(exc)
        damaged_file = str(self.path) in reason and "Permission denied" not in reason
        if isinstance(exc, plyvel.CorruptionError) or damaged_file:
            return StorageCorruptError(
                f"LevelDB at {self.path} is corrupt ({doing}: {_reason(exc)}); it is rebuilt "
                "from its table topic (views and processors do so themselves; else delete "
                "the directory)",
                path=str(self.path),
            )
        return StorageError(f"{doing} LevelDB at {self.path} failed: {_reason(exc)}")

    def items(
        self,
        *,
        start: str | None = None,
        stop: str | None = None,
        prefix: str | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[str, bytes]]:
        return self._items(_DATA, start, stop, prefix, reverse)

    def section(self, name: str) -> _Section:
        return _Section(self, _SECTION + name.encode() + b"\x00")

    def _get(self, key: bytes) -> bytes | None:
        try:
            value: bytes | None = self._db.get(key, verify_checksums=True)
        except plyvel.Error as exc:
            raise self._failed("reading", exc) from exc
        return value

    def _items(
        self, space: bytes, start: str | None, stop: str | None, prefix: str | None,
        reverse: bool,
    ) -> Iterator[tuple[str, bytes]]:  # fmt: skip
        low = space + _key(start or "")
        high = space + _key(stop) if stop is not None else prefix_end(space)
        skip = len(space)
        if prefix:
            scoped = space + _key(prefix)
            low = max(low, scoped)
            end = prefix_end(scoped)
            high = end if high is None else min(high, end) if end is not None else high
        last: bytes | None = None  # the last key yielded: where to go on after a checkpoint
        while True:
            db = self._db
            if last is None:
                iterator = db.iterator(start=low, stop=high, reverse=reverse,
                                       verify_checksums=True)  # fmt: skip
            elif reverse:
                iterator = db.iterator(start=low, stop=last, include_stop=False, reverse=True,
                                       verify_checksums=True)  # fmt: skip
            else:
                iterator = db.iterator(start=last, include_start=False, stop=high,
                                       verify_checksums=True)  # fmt: skip
            try:
                with iterator:
                    for key, value in iterator:
                        last = key
                        yield key[skip:].decode("utf-8", "surrogateescape"), value
                return
            except RuntimeError:  # plyvel: "Database or iterator is closed"
                if self._db is db or self._db.closed:
                    raise
                # :meth:`checkpoint` closed and reopened the database meanwhile: go on after
                # the last key in the reopened one (rows written since may be seen)
            except plyvel.Error as exc:
                raise self._failed("reading", exc) from exc

    def offsets(self) -> dict[tuple[str, int], int]:
        found = {}
        try:
            for key, value in self._db.iterator(prefix=_OFFSET, verify_checksums=True):
                topic, partition = key[1:-5], key[-4:]  # topic, NUL, 4-byte partition
                found[(topic.decode(), _PARTITION.unpack(partition)[0])] = int(value)
        except plyvel.Error as exc:
            raise self._failed("reading offsets of", exc) from exc
        return found

    def write(self, batch: WriteBatch) -> None:
        try:
            with self._db.write_batch(sync=self.sync) as wb:
                put, delete = wb.put, wb.delete
                for key, value in batch.values.items():
                    if value is None:
                        delete(_DATA + key.encode("utf-8", "surrogateescape"))
                    else:
                        put(_DATA + key.encode("utf-8", "surrogateescape"), value)
                for (topic, partition), offset in batch.offsets.items():
                    put(_offset_key(topic, partition), b"%d" % offset)
                for name, rows in batch.sections.items():
                    space = _SECTION + name.encode() + b"\x00"
                    for key, value in rows.items():  # (_key inlined: a row per window)
                        if value is None:
                            delete(space + key.encode("utf-8", "surrogateescape"))
                        else:
                            put(space + key.encode("utf-8", "surrogateescape"), value)
        except plyvel.Error as exc:
            raise self._failed("writing to", exc) from exc
        if self.recent is not None and batch.values:
            self.recent.wrote(batch.values)

    def count(self) -> int:
        try:
            iterator = self._db.iterator(prefix=_DATA, include_value=False, verify_checksums=True)
            return sum(1 for _ in iterator)
        except plyvel.Error as exc:
            raise self._failed("counting", exc) from exc

    def clear(self) -> None:
        try:  # offsets first: a store without offsets is rebuilt, never taken as current
            for prefix in (_OFFSET, _DATA, _SECTION):
                with self._db.write_batch() as wb:
                    for key in self._db.iterator(prefix=prefix, include_value=False):
                        wb.delete(key)
        except plyvel.Error as exc:
            raise self._failed("clearing", exc) from exc
        finally:  # (after: a read meanwhile keeps nothing it read before)
            if self.recent is not None:
                self.recent.clear()

    def flush(self) -> None:
        """Write the log's recent writes into a table file if the log holds at least 64 KiB
        (LevelDB replays its log when opened: about 0.1 s per 4 MB). Runs without the GIL."""
        try:
            if logged_bytes(self.path) >= _FLUSH_BYTES:
                self._db.compact_range(start=_FLUSH_RANGE, stop=_FLUSH_RANGE)  # flushes memtable
        except (OSError, plyvel.Error) as exc:
            raise StorageError(f"flushing LevelDB at {self.path} failed: {exc}") from exc

    def prepare_checkpoint(self) -> bool:
        """Whether a :meth:`checkpoint` now would be quick: the log is short, or a flush
        begun here has ended since the last checkpoint. Otherwise begin that flush on a thread
        of its own (a table file written, fsynced, without the GIL: 5-200 ms here) and return
        False: the writer goes on, and a checkpoint then flushes only what it wrote since."""
        return self._flusher.ready(logged_bytes(self.path) < _FLUSH_BYTES)

    def checkpoint(self, directory: Path) -> list[CheckpointFile]:
        self._flusher.join()
        directory.mkdir(parents=True)
        self.flush()  # a short log: a small copy, and a fast open of the copy (and of the store)
        try:
            if (files := copy_open(self.path, directory)) is not None:
                return files
            shutil.rmtree(directory)  # (a compaction ended meanwhile)
            directory.mkdir()
            self._db.close()  # waits for compactions: the files are quiescent until reopened
            try:
                return [copy_file(e, directory) for e in os.scandir(self.path) if kept(e.name)]
            finally:
                self._db = self._open()
        except OSError as exc:
            raise StorageError(f"cannot checkpoint LevelDB at {self.path}: {exc}") from exc

    def close(self) -> None:
        self._flusher.join()  # (a flush holds the database)
        if self.recent is not None:
            self.recent.clear()
        if not self._db.closed:
            self._db.close()

    @property
    def closed(self) -> bool:
        """True once closed."""
        return bool(self._db.closed)

    def __enter__(self) -> LevelDBStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LevelDBStorage({str(self.path)!r}, table={self.table!r})"


class _Section:
    """A section of a LevelDB storage (see :meth:`LevelDBStorage.section`)."""

    __slots__ = ("_space", "_storage")

    def __init__(self, storage: LevelDBStorage, space: bytes) -> None:
        self._storage, self._space = storage, space

    def get(self, key: str) -> bytes | None:
        return self._storage._get(self._space + key.encode("utf-8", "surrogateescape"))  # _key

    def items(
        self, *, start: str | None = None, stop: str | None = None, prefix: str | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[str, bytes]]:  # fmt: skip
        return self._storage._items(self._space, start, stop, prefix, reverse)


def _reason(exc: Exception) -> str:
    """plyvel's message (its errors carry bytes)."""
    first = exc.args[0] if exc.args else exc
    return first.decode(errors="replace") if isinstance(first, bytes) else str(first)
