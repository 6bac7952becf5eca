"""A continuous loop's snapshot does not stall it for LevelDB's flush: the store writes its
memtable out on a thread of its own first (``prepare_checkpoint``), the loop goes on writing,
and the checkpoint taken afterwards copies a short log. Real LevelDB."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from goka.processing.uploads import stage_due
from goka.storage import LevelDBStorage, WriteBatch, leveldb_files
from goka.storage.leveldb_files import live_tables, logged_bytes
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


def sstables(storage: LevelDBStorage) -> set[int]:
    """The table files of the database's current version, as LevelDB itself lists them."""
    listing = storage._db.get_property(b"leveldb.sstables").decode()
    return {int(line.split(":")[0]) for line in listing.splitlines() if ":" in line}


def test_the_manifest_reader_finds_the_tables_leveldb_uses_and_stops_at_a_cut_record(
    tmp_path: Path,
) -> None:
    storage = LevelDBStorage(tmp_path / "db", "t", write_buffer_mb=1)  # many compactions
    manifest = tmp_path / "db" / (tmp_path / "db" / "CURRENT").read_text().strip()
    for i in range(40):
        fill(storage, 3_000, f"r{i % 7}", i)
        # (LevelDB appends an edit to the manifest before it makes it current: compared once
        # both agree, as they do within milliseconds of a compaction's end)
        wait_for(lambda: live_tables(manifest.read_bytes())[0] == sstables(storage),
                 what="the manifest's tables to be LevelDB's")  # fmt: skip
    data = manifest.read_bytes()
    live, end = live_tables(data)
    assert end == len(data) and len(live) > 3
    for cut in range(0, len(data) + 1, 5):  # read while LevelDB appends: any prefix
        found, whole = live_tables(data[:cut])
        assert whole <= cut and live_tables(data[:whole]) == (found, whole)
    storage.close()


def test_checkpoints_taken_while_compactions_run_open_with_what_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copies of an open database while its compactions run (a 1 MB buffer: one every few
    writes): each opens elsewhere with exactly what was written before it; where a compaction
    changed the manifest during the copy, it was copied again with the database closed."""
    storage = LevelDBStorage(tmp_path / "db", "t", write_buffer_mb=1)
    opened: list[int] = []
    open_ = storage._open

    def counting() -> Any:
        opened.append(1)
        return open_()

    monkeypatch.setattr(storage, "_open", counting)
    rows: dict[str, bytes] = {}
    for i in range(24):
        rows |= fill(storage, 4_000, f"r{i % 5}", i)
        storage.flush()
        rows |= fill(storage, 50, f"s{i}", i)  # (in the log only: under 64 KiB)
        storage.checkpoint(tmp_path / f"copy-{i}")
        with LevelDBStorage(tmp_path / f"copy-{i}", "t") as copy:
            assert dict(copy.items()) == rows and copy.offsets() == {("in", 0): i}
    storage.close()
    assert len(opened) < 12, opened  # most were copied with the database open


def test_a_copy_during_which_the_manifest_changed_is_taken_again_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = LevelDBStorage(tmp_path / "db", "t", write_buffer_mb=32)
    rows = fill(storage, 50_000, "a", 1)
    storage.flush()
    copy_file = leveldb_files.copy_file
    disturbed: list[str] = []

    def compacting(entry: os.DirEntry[str], directory: Path) -> Any:
        if not disturbed:  # a flush ends while the first file is copied: the manifest grows
            disturbed.append(entry.name)
            rows.update(fill(storage, 50_000, "b", 2))
            storage.flush()
        return copy_file(entry, directory)

    monkeypatch.setattr(leveldb_files, "copy_file", compacting)
    db = storage._db
    storage.checkpoint(tmp_path / "copy")
    assert disturbed and storage._db is not db  # closed and opened again
    storage.close()
    with LevelDBStorage(tmp_path / "copy", "t") as copy:
        assert dict(copy.items()) == rows and copy.offsets() == {("in", 0): 2}
