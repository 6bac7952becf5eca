"""One contract for every storage implementation, plus LevelDB's own failure modes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import plyvel
import pytest

from goka import StorageCorruptError, StorageError, StorageLockedError, key_bytes, key_str
from goka.storage import LevelDBStorage, MemoryStorage, Storage, WriteBatch


@pytest.fixture(params=["leveldb", "leveldb-recent", "memory"])
def make_storage(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., Storage]]:
    """Each storage; ``leveldb-recent``: with recent values kept in memory (1 MB)."""
    opened: list[Storage] = []

    def make(table: str = "t-table") -> Storage:
        storage: Storage = (
            MemoryStorage(table) if request.param == "memory"
            else LevelDBStorage(tmp_path / "db", table,
                                recent_mb=1 if request.param == "leveldb-recent" else 0)
        )  # fmt: skip
        opened.append(storage)
        return storage

    yield make
    for storage in opened:
        storage.close()


def batch(values: dict[str, bytes | None] | None = None, **offsets: int) -> WriteBatch:
    wb = WriteBatch()
    for key, value in (values or {}).items():
        wb.delete(key) if value is None else wb.set(key, value)
    for name, offset in offsets.items():
        topic, _, partition = name.rpartition("_")
        wb.set_offset(topic, int(partition), offset)
    return wb


def test_get_has_set_delete(make_storage: Callable[..., Storage]) -> None:
    storage = make_storage()
    assert storage.get("a") is None and not storage.has("a")
    storage.write(batch({"a": b"1", "b": b""}))
    assert storage.get("a") == b"1" and storage.has("a")
    assert storage.get("b") == b"" and storage.has("b")  # empty values are values
    storage.write(batch({"a": None}))
    assert storage.get("a") is None and not storage.has("a")
    assert storage.count() == 1


def test_values_and_offsets_are_written_together(make_storage: Callable[..., Storage]) -> None:
    storage = make_storage()
    storage.write(batch({"k": b"v"}, clicks_0=10, clicks_3=7))
    storage.write(batch({}, clicks_0=12))
    assert storage.offsets() == {("clicks", 0): 12, ("clicks", 3): 7}


def test_sections_are_written_with_values_and_offsets_and_kept_apart_from_them(
    make_storage: Callable[..., Storage], tmp_path: Path
) -> None:
    storage = make_storage()
    wb = batch({"k": b"v"}, clicks_0=3)
    wb.section("g-timers").update({"q1": b"a", "q2": b"b", "s": b"9"})
    wb.section("g-window-w").update({"k@1": b"x"})
    storage.write(wb)
    timers = storage.section("g-timers")
    assert timers.get("q1") == b"a" and storage.section("other").get("q1") is None
    assert list(timers.items(prefix="q")) == [("q1", b"a"), ("q2", b"b")]
    assert list(timers.items(prefix="q", start="q1\x00")) == [("q2", b"b")]
    assert next(iter(timers.items(reverse=True))) == ("s", b"9")
    assert dict(storage.items()) == {"k": b"v"} and storage.count() == 1  # values only
    assert storage.get("q1") is None
    deletion = WriteBatch()
    deletion.section("g-timers")["q1"] = None
    storage.write(deletion)
    assert timers.get("q1") is None  # a reader sees later writes
    storage.checkpoint(tmp_path / "copy")
    copied = (LevelDBStorage if isinstance(storage, LevelDBStorage) else MemoryStorage.at)(
        tmp_path / "copy", "t-table"
    )
    try:
        assert dict(copied.section("g-timers").items()) == {"q2": b"b", "s": b"9"}
        assert dict(copied.section("g-window-w").items()) == {"k@1": b"x"}
    finally:
        copied.close()
    storage.clear()
    assert list(timers.items()) == [] and storage.offsets() == {}


def test_topics_with_underscores_and_many_partitions(make_storage: Callable[..., Storage]) -> None:
    storage = make_storage()
    wb = WriteBatch()
    wb.set_offset("a_b.c-d", 300, 1)
    wb.set_offset("a", 0, 2**40)
    storage.write(wb)
    assert storage.offsets() == {("a_b.c-d", 300): 1, ("a", 0): 2**40}


def test_items_in_key_order_with_ranges_prefixes_and_reverse(
    make_storage: Callable[..., Storage],
) -> None:
    storage = make_storage()
    keys = ["user-1", "user-10", "user-2", "admin", "user-3", "zoë", "u"]
    storage.write(batch({k: k.upper().encode() for k in keys}))
    everything = [k for k, _ in storage.items()]
    assert everything == sorted(keys, key=str.encode)
    assert [k for k, _ in storage.items(prefix="user-")] == [
        "user-1",
        "user-10",
        "user-2",
        "user-3",
    ]
    assert [k for k, _ in storage.items(start="user-10", stop="user-3")] == ["user-10", "user-2"]
    assert [k for k, _ in storage.items(prefix="user-", start="user-2")] == ["user-2", "user-3"]
    assert [k for k, _ in storage.items(prefix="user-", stop="user-2")] == ["user-1", "user-10"]
    assert [k for k, _ in storage.items(prefix="user-", reverse=True)][:2] == ["user-3", "user-2"]
    assert dict(storage.items(prefix="zo")) == {"zoë": "ZOË".encode()}
    assert list(storage.items(prefix="nothing")) == []


def test_keys_of_any_bytes_are_stored_ordered_and_scanned_by_their_bytes(
    make_storage: Callable[..., Storage],
) -> None:
    raw = [b"\xff", b"\xc3\xa9t\xc3\xa9", b"\xc3", b"\xc3\xff", b"a\x00b", b"a"]  # as Go writes
    keys = [key_str(k) for k in raw]
    storage = make_storage()
    storage.write(batch({k: key_bytes(k) for k in keys}))
    assert [key_bytes(k) for k, _ in storage.items()] == sorted(raw)
    assert all(storage.get(k) == key_bytes(k) for k in keys)
    assert storage.get("été") == b"\xc3\xa9t\xc3\xa9"  # text keys are the same str as before
    # prefixes are byte prefixes: b"\xc3" covers "été" (its first byte) and b"\xc3\xff"
    assert sorted(key_bytes(k) for k, _ in storage.items(prefix=key_str(b"\xc3"))) == [
        b"\xc3", b"\xc3\xa9t\xc3\xa9", b"\xc3\xff"
    ]  # fmt: skip
    assert [key_bytes(k) for k, _ in storage.items(start=key_str(b"\xc3\xa9"))] == [
        b"\xc3\xa9t\xc3\xa9", b"\xc3\xff", b"\xff"
    ]  # fmt: skip


def test_iteration_sees_a_snapshot(make_storage: Callable[..., Storage]) -> None:
    storage = make_storage()
    storage.write(batch({f"k{i:03}": b"x" for i in range(100)}))
    seen = []
    for key, _ in storage.items():
        if not seen:
            storage.write(batch({"k050": None, "k999": b"new"}))
        seen.append(key)
    assert len(seen) == 100
    assert "k050" in seen and "k999" not in seen


def test_clear_keeps_the_table(make_storage: Callable[..., Storage]) -> None:
    storage = make_storage()
    storage.write(batch({"a": b"1"}, t_0=5))
    storage.clear()
    assert storage.count() == 0 and storage.offsets() == {}
    assert storage.info.table == "t-table"


def test_readers_see_whole_batches_while_one_writer_writes(
    make_storage: Callable[..., Storage],
) -> None:
    storage = make_storage()
    stop = threading.Event()
    torn: list[tuple[bytes | None, bytes | None]] = []

    def writer() -> None:
        for i in range(2_000):
            storage.write(batch({"a": b"%d" % i, "b": b"%d" % i}))
        stop.set()

    thread = threading.Thread(target=writer)
    thread.start()
    while not stop.is_set():
        snapshot = dict(storage.items())
        if snapshot and snapshot.get("a") != snapshot.get("b"):
            torn.append((snapshot.get("a"), snapshot.get("b")))
    thread.join()
    assert torn == []
    assert storage.get("a") == b"1999"


class _SecondBatchFails:
    """A LevelDB handle whose second write batch is never written (the process died)."""

    def __init__(self, db: Any) -> None:
        self.db, self.batches = db, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    def write_batch(self, **kwargs: Any) -> Any:
        self.batches += 1
        if self.batches == 2:
            raise plyvel.Error(b"the process died")
        return self.db.write_batch(**kwargs)


def test_a_clear_cut_short_leaves_no_offsets_without_their_values(tmp_path: Path) -> None:
    """A store recording offsets is taken as current: a clear that died halfway must not
    leave offsets whose values are gone."""
    with LevelDBStorage(tmp_path / "db", "t-table") as storage:
        storage.write(batch({"a": b"1", "b": b"2"}, clicks_0=10, t_table_0=2))
        storage._db = _SecondBatchFails(storage._db)
        with pytest.raises(StorageError, match="clearing"):
            storage.clear()
        storage._db = storage._db.db
        assert storage.offsets() == {}


def test_close_is_idempotent(make_storage: Callable[..., Storage]) -> None:
    storage = make_storage()
    storage.close()
    storage.close()


# -- LevelDB only ------------------------------------------------------------------------------


def test_leveldb_survives_reopening(tmp_path: Path) -> None:
    with LevelDBStorage(tmp_path / "db", "t") as storage:
        storage.write(batch({"k": b"v"}, t_1=9))
    with LevelDBStorage(tmp_path / "db", "t") as storage:
        assert storage.get("k") == b"v"
        assert storage.offsets() == {("t", 1): 9}
        assert storage.info.path == str(tmp_path / "db")


@pytest.mark.parametrize("buffer_mb", [4, 32])
def test_leveldb_keeps_what_its_write_buffer_holds_in_memory_and_its_log(
    tmp_path: Path, buffer_mb: int
) -> None:
    """8 MB written: with a 4 MB write buffer some went to table files, with 32 MB none did
    (processors' stores have 32: goka.processing.config.leveldb_store); all is read back,
    also after reopening."""
    storage = LevelDBStorage(tmp_path / "db", "t-table", write_buffer_mb=buffer_mb)
    rows = {f"k{i:06d}": bytes([i % 251]) * 1_000 for i in range(8_000)}
    for first in range(0, len(rows), 1_000):
        storage.write(WriteBatch(values=dict(list(rows.items())[first : first + 1_000])))
    tables = list((tmp_path / "db").glob("*.ldb"))
    assert (len(tables) > 0) == (buffer_mb == 4), tables
    storage.close()
    storage = LevelDBStorage(tmp_path / "db", "t-table", write_buffer_mb=buffer_mb)
    assert dict(storage.items()) == rows
    storage.close()


def test_leveldb_of_another_table_is_refused(tmp_path: Path) -> None:
    LevelDBStorage(tmp_path / "db", "clicks-table").close()
    with pytest.raises(StorageError, match="holds table 'clicks-table', not 'users-table'"):
        LevelDBStorage(tmp_path / "db", "users-table")


def test_leveldb_not_written_by_goka_is_refused(tmp_path: Path) -> None:
    import plyvel  # the test plays another program writing LevelDB

    foreign = plyvel.DB(str(tmp_path / "db"), create_if_missing=True)
    foreign.put(b"something", b"else")
    foreign.close()
    with pytest.raises(StorageError, match="was not written by goka-py .no metadata."):
        LevelDBStorage(tmp_path / "db", "t")


def test_directory_that_is_not_leveldb_is_refused(tmp_path: Path) -> None:
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "notes.txt").write_text("mine")
    with pytest.raises(StorageError, match="is not empty and not a LevelDB directory"):
        LevelDBStorage(tmp_path / "db", "t")


def test_corrupt_leveldb_is_refused_with_advice(tmp_path: Path) -> None:
    LevelDBStorage(tmp_path / "db", "t").close()
    for manifest in (tmp_path / "db").glob("MANIFEST-*"):
        manifest.write_bytes(b"\x00garbage" * 100)
    with pytest.raises(StorageCorruptError, match="is corrupt .*rebuilt from its table topic"):
        LevelDBStorage(tmp_path / "db", "t")


@pytest.mark.parametrize(
    "left",
    [
        ("LOCK", "LOG", "MANIFEST-000001", "000001.dbtmp"),  # killed before CURRENT was renamed
        ("LOCK", "LOG"),  # killed before the manifest
    ],
)
def test_a_store_whose_creation_was_killed_is_corrupt_not_foreign(
    tmp_path: Path, left: tuple[str, ...]
) -> None:
    directory = tmp_path / "db"
    directory.mkdir()
    for name in left:
        (directory / name).write_bytes(b"\x00" * 16)
    with pytest.raises(StorageCorruptError, match="not CURRENT"):
        LevelDBStorage(directory, "t")
    (directory / "notes.txt").write_text("someone else's")
    with pytest.raises(StorageError, match="not a LevelDB directory"):
        LevelDBStorage(directory, "t")


def test_a_directory_is_used_by_one_storage_at_a_time(tmp_path: Path) -> None:
    with (
        LevelDBStorage(tmp_path / "db", "t"),
        pytest.raises(StorageLockedError, match="LevelDB at .* is open in another storage: .*lock"),
    ):
        LevelDBStorage(tmp_path / "db", "t")
