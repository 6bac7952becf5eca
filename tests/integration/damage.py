"""Ways to damage a LevelDB store's files, as a crash, a full disk or a bad sector would: the
corrupt-store tests of views and of partition stores do each of them."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

__all__ = ["DAMAGE", "flip_bits", "one", "table_file", "truncate"]


def table_file(store: Path) -> Path:
    return max(store.glob("*.ldb"), key=lambda f: f.stat().st_size)


def flip_bits(store: Path, seed: int, count: int, *, byte: bool = False) -> None:
    target = table_file(store)
    data = bytearray(target.read_bytes())
    rng = random.Random(seed)
    for _ in range(count):
        position = rng.randrange(len(data))
        data[position] ^= rng.randrange(1, 256) if byte else 1 << rng.randrange(8)
    target.write_bytes(bytes(data))


def truncate(file: Path) -> None:
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def one(store: Path, pattern: str) -> Path:
    (found,) = store.glob(pattern)
    return found


DAMAGE: dict[str, Callable[[Path], None]] = {
    **{f"bit flip {i}": (lambda s, i=i: flip_bits(s, seed=i, count=1)) for i in range(10)},
    "20 flipped bytes": lambda s: flip_bits(s, seed=99, count=20, byte=True),
    "truncated table file": lambda s: truncate(table_file(s)),
    "truncated log": lambda s: truncate(one(s, "*.log")),
    "deleted table file": lambda s: table_file(s).unlink(),
    "garbage CURRENT": lambda s: (s / "CURRENT").write_bytes(b"\x00\xffgarbage\n"),
    "missing CURRENT": lambda s: (s / "CURRENT").unlink(),
    "garbage MANIFEST": lambda s: one(s, "MANIFEST-*").write_bytes(b"\x13" * 300),
    "missing MANIFEST": lambda s: one(s, "MANIFEST-*").unlink(),
    "empty directory": lambda s: [f.unlink() for f in s.iterdir()],
}
