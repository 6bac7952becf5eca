"""Local table state behind one protocol: LevelDB (default) and memory.

The only package that imports plyvel. See :mod:`goka.storage.base` for the contract.
"""

from goka.storage.base import FORMAT, Storage, StorageInfo, WriteBatch
from goka.storage.leveldb import LevelDBStorage
from goka.storage.memory import MemoryStorage

__all__ = [
    "FORMAT",
    "LevelDBStorage",
    "MemoryStorage",
    "Storage",
    "StorageInfo",
    "WriteBatch",
]
