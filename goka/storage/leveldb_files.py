"""The files of a LevelDB store directory (:mod:`goka.storage.leveldb`): which LevelDB and
goka-py write, which a copy of the database needs, copying one, the size of the logs."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from goka.errors import StorageError
from goka.storage.base import CheckpointFile
from goka.storage.manifests import STATE_FILE

__all__ = [
    "BackgroundFlush",
    "copy_file",
    "copy_open",
    "kept",
    "live_tables",
    "logged_bytes",
    "own",
]

_TABLE_FILES = (".ldb", ".sst")  # immutable once written
#: Files of a store directory that a copy leaves behind (with LevelDB's own, see kept).
_LEVELDB_EXTRA = frozenset({"LOCK", "LOG", "LOG.old", STATE_FILE})


def own(name: str) -> bool:
    """Files LevelDB or goka-py write in a store directory that a copy leaves behind: its
    lock, its info logs, goka-py's state file, and the temporary file LevelDB writes CURRENT
    through (``NNNNNN.dbtmp``, left by a process killed while creating the database)."""
    return name in _LEVELDB_EXTRA or name.endswith(".dbtmp")


def kept(name: str) -> bool:
    """Files a copy of the database needs (not its lock or its info log)."""
    return (
        name.endswith((*_TABLE_FILES, ".log")) or name == "CURRENT" or name.startswith("MANIFEST-")
    )


def copy_file(entry: os.DirEntry[str], directory: Path) -> CheckpointFile:
    target = directory / entry.name
    if entry.name.endswith(_TABLE_FILES):
        try:
            os.link(entry.path, target)
        except OSError:  # a file system without hard links
            shutil.copyfile(entry.path, target)
        return CheckpointFile(entry.name, True)
    shutil.copyfile(entry.path, target)
    return CheckpointFile(entry.name, False)


def copy_open(path: Path, directory: Path) -> list[CheckpointFile] | None:
    """Copy the open database at ``path`` into ``directory`` (created, empty) without closing
    it, where its writer is the caller (its logs are still meanwhile): the table files its
    manifest names, hard-linked, the manifest's whole records, the logs and ``CURRENT``. None
    (``directory`` then holds a part) where this would not be a consistent copy: the manifest
    changed meanwhile (a compaction or a flush ended: a table named may be gone, a log
    replaced), or is not one this reads; the caller then copies with the database closed.
    Spares the close and the reopen (a new manifest written and fsynced: 5 ms here when the
    disk is idle, 17-45 ms while the broker writes, in ``bench.latency``)."""
    current = (path / "CURRENT").read_bytes()
    manifest = path / current.decode().strip()
    data = manifest.read_bytes()
    try:
        live, end = live_tables(data)
    except (ValueError, IndexError):
        return None
    copied: list[CheckpointFile] = []
    try:
        with os.scandir(path) as entries:
            found = {e.name: e for e in entries}
        for number in sorted(live):
            name = next((n for n in (f"{number:06d}.ldb", f"{number:06d}.sst") if n in found),
                        None)  # fmt: skip
            if name is None:
                return None
            copied.append(copy_file(found[name], directory))
        copied += [copy_file(e, directory) for n, e in found.items() if n.endswith(".log")]
    except FileNotFoundError:
        return None
    if (path / "CURRENT").read_bytes() != current or manifest.stat().st_size != len(data):
        return None
    (directory / manifest.name).write_bytes(data[:end])
    (directory / "CURRENT").write_bytes(current)
    return [*copied, CheckpointFile(manifest.name, False), CheckpointFile("CURRENT", False)]


def logged_bytes(path: Path) -> int:
    """The size of the store's logs. LevelDB's compaction thread deletes an old log while the
    directory is read: a log gone meanwhile counts nothing."""
    total = 0
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name.endswith(".log"):
                try:
                    total += entry.stat().st_size
                except FileNotFoundError:
                    continue
    return total


_BLOCK, _HEADER = 32768, 7  # LevelDB's log format (the manifest is such a log)
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_NEW_FILE, _DELETED_FILE = 7, 6
#: VersionEdit tags whose field is one varint, and those of a length-prefixed string.
_VARINT_TAGS, _SLICE_TAGS = frozenset({2, 3, 4, 9}), frozenset({1})


def live_tables(manifest: bytes) -> tuple[set[int], int]:
    """The numbers of the table files the version in ``manifest`` (a MANIFEST's bytes, maybe
    read while LevelDB appended to it) uses, and how many of its bytes hold whole records: a
    record cut short at the end is left out, as LevelDB's recovery leaves it.

    Raises:
        ValueError: not a manifest LevelDB writes (an unknown record type or edit tag).
    """
    live: set[int] = set()
    record, end, pos = b"", 0, 0
    while True:
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # a block's trailer
            pos += left
            continue
        if pos + _HEADER > len(manifest):
            return live, end
        length = int.from_bytes(manifest[pos + 4 : pos + 6], "little")
        kind = manifest[pos + 6]
        if kind == 0 and length == 0:  # preallocated zeros: nothing more was written
            return live, end
        if pos + _HEADER + length > len(manifest):
            return live, end
        if kind not in (_FULL, _FIRST, _MIDDLE, _LAST):
            raise ValueError(f"unknown record type {kind} at byte {pos}")
        data = manifest[pos + _HEADER : pos + _HEADER + length]
        pos += _HEADER + length
        record = data if kind in (_FULL, _FIRST) else record + data
        if kind in (_FULL, _LAST):
            _apply_edit(record, live)
            end = pos


def _apply_edit(edit: bytes, live: set[int]) -> None:
    pos = 0

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            byte = edit[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def skip_slice() -> None:
        nonlocal pos
        length = varint()  # (first: it moves pos)
        pos += length

    while pos < len(edit):
        tag = varint()
        if tag in _VARINT_TAGS:
            varint()
        elif tag in _SLICE_TAGS:
            skip_slice()
        elif tag == 5:  # a compaction pointer: level, key
            varint()
            skip_slice()
        elif tag == _DELETED_FILE:
            varint()
            live.discard(varint())
        elif tag == _NEW_FILE:
            varint()
            live.add(varint())
            varint()  # size
            skip_slice()  # smallest key
            skip_slice()  # largest key
        else:
            raise ValueError(f"unknown version edit tag {tag}")


class BackgroundFlush:
    """A store's flush on a thread of its own (see ``LevelDBStorage.prepare_checkpoint``),
    kept until :meth:`join` (the checkpoint, or the close: a flush holds the database)."""

    def __init__(self, flush: Callable[[], None], name: str) -> None:
        self._flush, self._name = flush, name
        self._thread: threading.Thread | None = None

    def ready(self, short: bool) -> bool:
        """True once a flush begun here has ended, or if none is needed (``short``: the log
        is short); else begin one (if not begun) and return False."""
        if self._thread is not None:
            return not self._thread.is_alive()
        if short:
            return True
        self._thread = threading.Thread(target=self._run, name=f"goka-flush-{self._name}",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        return False

    def _run(self) -> None:
        with contextlib.suppress(StorageError):  # (the checkpoint's own flush raises it)
            self._flush()

    def join(self) -> None:
        """Wait for a flush begun, and forget it."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
