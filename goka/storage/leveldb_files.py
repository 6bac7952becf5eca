"""The files of a LevelDB store directory (:mod:`goka.storage.leveldb`): which LevelDB and
goka-py write, which a copy of the database needs, copying one, the size of the logs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from goka.storage.base import CheckpointFile
from goka.storage.manifests import STATE_FILE

__all__ = ["copy_file", "kept", "logged_bytes", "own"]

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
