"""Local table state behind one protocol: LevelDB (default) and memory.

The only package that imports plyvel. See :mod:`goka.storage.base` for the contract.
"""

from typing import TYPE_CHECKING, Any

from goka.storage.base import (
    FORMAT,
    CheckpointFile,
    Storage,
    StorageBuilder,
    StorageInfo,
    WriteBatch,
    move_aside,
)
from goka.storage.memory import MemoryStorage

if TYPE_CHECKING:
    from goka.storage.leveldb import LevelDBStorage

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


def __getattr__(name: str) -> Any:
    """LevelDBStorage loads plyvel (the ``view`` extra) only when first used."""
    if name == "LevelDBStorage":
        from goka.storage.leveldb import LevelDBStorage

        return LevelDBStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
