"""Local table state behind one protocol: LevelDB (default) and memory.

The only package that imports plyvel. See :mod:`goka.storage.base` for the contract.
"""

from goka.storage.base import (
    FORMAT,
    CheckpointFile,
    Storage,
    StorageBuilder,
    StorageInfo,
    WriteBatch,
    move_aside,
)
from goka.storage.leveldb import LevelDBStorage
from goka.storage.memory import MemoryStorage

__all__ = [
    "FORMAT",
    "CheckpointFile",
    "LevelDBStorage",
    "MemoryStorage",
    "Storage",
    "StorageBuilder",
    "StorageInfo",
    "WriteBatch",
    "move_aside",
]
