"""Recent values kept in front of a LevelDB store (goka.storage.recent): what a read returns is
what the store holds, through writes, deletes, clears and evictions; memory stays bounded; a
kept value is read without LevelDB; a read racing a write keeps nothing stale."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from goka.storage import LevelDBStorage, WriteBatch
from goka.storage.recent import ENTRY_BYTES, MISSING, RecentValues


def kept_bytes(recent: RecentValues) -> int:
    return sum(len(k) + ENTRY_BYTES + len(v or b"") for k, v in recent.values.items())


@pytest.mark.parametrize("seed", range(3))
def test_reads_equal_a_reference_through_writes_deletes_clears_and_evictions(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    store = LevelDBStorage(tmp_path / "db", "t", recent_mb=1)
    assert store.recent is not None
    store.recent.limit = 20_000  # about a hundred entries: evictions all the time
    reference: dict[str, bytes] = {}
    evictions = 0
    for step in range(3_000):
        roll = rng.random()
        if roll < 0.6:
            key = f"k{rng.randrange(300)}"
            assert store.get(key) == reference.get(key), (step, key)
        elif roll < 0.995:
            values: dict[str, bytes | None] = {}
            for _ in range(rng.randrange(1, 40)):
                key = f"k{rng.randrange(300)}"
                values[key] = None if rng.random() < 0.2 else bytes(rng.randrange(200))
            before = len(store.recent)
            store.write(WriteBatch(values=dict(values)))
            evictions += len(store.recent) < before  # (a write adds: fewer means evicted)
            for key, value in values.items():
                reference.pop(key, None) if value is None else reference.__setitem__(key, value)
        else:
            store.clear()
            reference.clear()
            assert len(store.recent) == 0
        assert kept_bytes(store.recent) <= store.recent.size <= store.recent.limit
    assert evictions > 10
    assert all(store.get(k) == v for k, v in reference.items())
    assert store.recent.writes > 0 and len(store.recent) > 0
    store.close()


def test_a_kept_value_is_read_without_leveldb(tmp_path: Path) -> None:
    store = LevelDBStorage(tmp_path / "db", "t", recent_mb=1)
    store.write(WriteBatch(values={"written": b"1"}))
    assert store.get("read") is None  # an absence is kept too

    class Refusing:
        def get(self, *args: object, **kwargs: object) -> None:
            raise AssertionError("LevelDB was read")

        closed = False

        def close(self) -> None: ...

    real, store._db = store._db, Refusing()
    try:
        assert store.get("written") == b"1" and store.get("read") is None
        with pytest.raises(AssertionError, match="LevelDB was read"):
            store.get("unknown")
    finally:
        store._db = real
    store.close()
    assert len(store.recent or ()) == 0  # closing forgets


def test_a_read_that_raced_a_write_keeps_nothing() -> None:
    recent = RecentValues(1 << 20)
    writes = recent.writes  # a reader takes the count, then reads the store: the old value
    recent.wrote({"k": b"new"})  # a write lands meanwhile
    recent.read("k", b"old", writes)
    assert recent.get("k") == b"new"
    recent.wrote({"k": None})
    recent.read("other", b"old", writes)  # (any key: the count moved)
    assert recent.get("k") is None and recent.get("other") is MISSING


def test_memory_stays_bounded_and_the_oldest_go_first() -> None:
    recent = RecentValues(100_000)
    for batch in range(50):
        recent.wrote({f"{batch}-{i}": bytes(100) for i in range(100)})
        assert kept_bytes(recent) <= recent.size <= recent.limit
    assert recent.get("49-99") == bytes(100) and recent.get("0-0") is MISSING
    assert len(recent) >= 0.7 * 100_000 // (ENTRY_BYTES + 104)  # evictions leave most kept
    same = RecentValues(100_000)
    for _ in range(1_000):  # rewriting kept keys over and over: counted twice, then recounted
        same.wrote({f"k{i}": bytes(100) for i in range(100)})
    assert len(same) == 100 and kept_bytes(same) <= same.size <= same.limit
