"""Local table state behind one protocol: LevelDB (default) and memory.

The only package that imports plyvel. See :mod:`goka.storage.base` for the contract.
"""

from collections.abc import Callable

from goka.storage.base import FORMAT, Storage, StorageInfo, WriteBatch
from goka.storage.leveldb import LevelDBStorage
from goka.storage.memory import MemoryStorage

__all__ = [
    "FORMAT",
    "LevelDBStorage",
    "MemoryStorage",
    "Storage",
    "StorageBuilder",
    "StorageInfo",
    "WriteBatch",
]

#: Builds the storage of a table: ``builder(table) -> Storage``; how tests swap in memory.
StorageBuilder = Callable[[str], Storage]
