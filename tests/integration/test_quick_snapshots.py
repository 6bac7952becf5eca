"""A continuous loop's snapshot does not stall it for LevelDB's flush: the store writes its
memtable out on a thread of its own first (``prepare_checkpoint``), the loop goes on writing,
and the checkpoint taken afterwards copies a short log. Real LevelDB."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from goka.processing.uploads import stage_due
from goka.storage import LevelDBStorage, WriteBatch
from goka.storage.leveldb_files import logged_bytes
from goka.storage.snapshots import SnapshotStore

from ..helpers import wait_for


def fill(storage: LevelDBStorage, keys: int, prefix: str, offset: int) -> dict[str, bytes]:
    rows = {f"{prefix}-{i:07d}": os.urandom(60) for i in range(keys)}
    batch = WriteBatch(values=dict(rows))
    batch.set_offset("in", 0, offset)
    storage.write(batch)
    return dict(rows)


def flushers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("goka-flush-")]


def test_a_checkpoint_after_a_background_flush_copies_a_short_log_and_everything(
    tmp_path: Path,
) -> None:
    storage = LevelDBStorage(tmp_path / "db", "t", write_buffer_mb=32)  # a processor's buffer
    rows = fill(storage, 60_000, "a", 1)
    assert logged_bytes(storage.path) > 1 << 20
    assert storage.prepare_checkpoint() is False  # a flush began
    rows |= fill(storage, 2_000, "b", 2)  # the writer goes on meanwhile
    wait_for(storage.prepare_checkpoint, what="the background flush")
    assert storage.prepare_checkpoint() is True  # (until the checkpoint: no second flush)
    assert list((tmp_path / "db").glob("*.ldb")), "the memtable went to a table file"
    rows |= fill(storage, 100, "c", 3)  # a write after the flush: in the log only
    storage.checkpoint(tmp_path / "copy")
    assert not flushers()
    copied_log = sum(p.stat().st_size for p in (tmp_path / "copy").glob("*.log"))
    assert copied_log < 64 << 10, copied_log
    storage.close()
    with LevelDBStorage(tmp_path / "copy", "t") as copy:
        assert dict(copy.items()) == rows
        assert copy.offsets() == {("in", 0): 3}


def test_a_short_log_needs_no_flush_and_close_waits_for_one_begun(tmp_path: Path) -> None:
    storage = LevelDBStorage(tmp_path / "db", "t", write_buffer_mb=32)
    fill(storage, 10, "a", 1)
    assert storage.prepare_checkpoint() is True and not flushers()
    rows = fill(storage, 60_000, "b", 2)
    assert storage.prepare_checkpoint() is False
    storage.close()  # joins the flush: the database is not closed under it
    assert not flushers()
    with LevelDBStorage(tmp_path / "db", "t") as again:
        assert again.get("b-0059999") == rows["b-0059999"] and again.count() == 60_010


def test_a_loop_stages_its_snapshot_once_the_stores_are_ready(tmp_path: Path) -> None:
    storage = LevelDBStorage(tmp_path / "db", "t", write_buffer_mb=32)
    fill(storage, 60_000, "a", 1)
    leases: Any = {"partition": SimpleNamespace(path=storage.path, storage=storage)}
    staged: list[Any] = []
    snapshots = SnapshotStore(str(tmp_path / "snapshots"))

    def due(quick: bool) -> float:
        return stage_due(snapshots, "g", 0, leases, tmp_path / "root", 1e-9,
                         lambda _, s: staged.append(s), quick=quick)  # fmt: skip

    due(quick=True)
    assert staged == [] and flushers()  # not staged in the loop's turn: a flush began
    wait_for(lambda: (due(quick=True), staged)[1], what="the staging once flushed")
    assert staged[0].stores["partition"].offsets == {("in", 0): 1}
    fill(storage, 60_000, "b", 2)
    due(quick=False)  # an epoch's or a batch's end: at once, flushing in the call
    assert len(staged) == 2 and staged[1].stores["partition"].offsets == {("in", 0): 2}
    for s in staged:
        s.discard()
    storage.close()
