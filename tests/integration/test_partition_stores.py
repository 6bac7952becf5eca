"""Partition stores on real LevelDB: checkpoints, incremental snapshots in a local directory (as
an NFS mount shared by executors would be), restores, and stores handed between processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from goka.errors import StorageCorruptError, StorageError, StorageLockedError
from goka.processing.batch import PartitionProcessor
from goka.processing.builders import Builders, leveldb_store
from goka.processing.config import TaskConfig
from goka.processing.leases import remove_store
from goka.processing.worker import Worker
from goka.storage import LevelDBStorage, WriteBatch
from goka.storage.snapshots import SnapshotStore, StoreState

from ..helpers import TrackedStores, wait_for
from ..unit.fake_kafka import FakeKafka
from ..unit.machines import CLICKS, IN, table_of

ROOT = Path(__file__).resolve().parents[2]


def fill(storage: LevelDBStorage, keys: int, *, start: int = 0, size: int = 100) -> None:
    for low in range(start, start + keys, 10_000):
        batch = WriteBatch()
        for i in range(low, min(start + keys, low + 10_000)):
            batch.set(f"key-{i:08d}", os.urandom(size))
        storage.write(batch)


def test_a_checkpoint_is_a_consistent_copy_that_opens_elsewhere(tmp_path: Path) -> None:
    with LevelDBStorage(tmp_path / "db", "t") as storage:
        fill(storage, 50_000)
        batch = WriteBatch({"last": b"1"})
        batch.set_offset("in", 0, 42)
        storage.write(batch)
        files = storage.checkpoint(tmp_path / "copy")
        storage.write(WriteBatch({"after": b"2"}))  # usable after, and not in the copy
        kinds = {f.name: f.immutable for f in files}
        assert {n for n, i in kinds.items() if i} == {
            p.name for p in (tmp_path / "copy").glob("*.ldb")
        }
        assert any(kinds.values()) and "CURRENT" in kinds and not kinds["CURRENT"]
        assert not kinds[next(n for n in kinds if n.endswith(".log"))]
        assert (
            "LOCK" not in kinds
            and "LOG" not in kinds
            and len(kinds) == len(os.listdir(tmp_path / "copy"))
        )
        linked = [n for n, i in kinds.items() if i and (tmp_path / "db" / n).exists()]
        assert linked and all(
            os.path.samefile(tmp_path / "db" / n, tmp_path / "copy" / n) for n in linked
        )
    with LevelDBStorage(tmp_path / "copy", "t") as copy:
        assert copy.count() == 50_001 and copy.get("after") is None
        assert copy.offsets() == {("in", 0): 42}


@pytest.mark.parametrize("reverse", [False, True])
def test_an_iteration_goes_on_across_a_checkpoint(tmp_path: Path, reverse: bool) -> None:
    """A checkpoint closes and reopens the database (its files quiescent for the copy): an
    iteration begun before goes on after its last key (a continuous processor's final
    results are produced a thousand per turn, and a snapshot may come between two turns)."""
    with LevelDBStorage(tmp_path / "db", "t") as storage:
        rows = {f"c{i:06d}": b"%d" % i for i in range(5_000)}
        storage.write(WriteBatch(sections={"s": dict(rows)}))
        storage.write(WriteBatch({f"key-{i}": b"v" for i in range(3)}))
        section = storage.section("s")
        items = section.items(prefix="c", reverse=reverse)
        seen = [next(items) for _ in range(1_000)]
        storage.checkpoint(tmp_path / "copy-1")
        seen += [next(items) for _ in range(1_000)]
        storage.checkpoint(tmp_path / "copy-2")
        seen += list(items)
        assert seen == sorted(rows.items(), reverse=reverse)
        values = storage.items()
        first = next(values)
        storage.close()  # closed, not reopened: the iteration fails as before
        with pytest.raises(RuntimeError, match="closed"):
            next(values)
        assert first == ("key-0", b"v")


def test_a_store_open_in_this_process_is_refused_as_locked(tmp_path: Path) -> None:
    with (
        LevelDBStorage(tmp_path / "db", "t"),
        pytest.raises(StorageLockedError, match="is open in another storage"),
    ):
        LevelDBStorage(tmp_path / "db", "t")


class LevelDBMachine:
    def __init__(self, kafka: FakeKafka, root: Path, snapshots: str, **config: object) -> None:
        builders = Builders(storage=leveldb_store, producer=kafka.producer, reader=kafka.reader)
        self.worker = Worker()
        self.config = TaskConfig(CLICKS, "fake:9092", state_dir=str(root), snapshot_dir=snapshots,
                                 snapshot_interval=1e-9, builders=builders, **config)  # type: ignore[arg-type]  # fmt: skip

    def run(self, start: int, end: int) -> tuple[object, list[dict[str, object]]]:
        summary = PartitionProcessor(self.config, 0, self.worker).process({IN: (start, end)})
        assert self.worker.uploads.wait(30)
        # an upload that finished before the task's end is in its summary, the others after
        reports = [*json.loads(summary.uploads), *(asdict(r) for r in self.worker.reports())]
        return summary, reports


def test_snapshots_upload_only_table_files_the_kept_snapshots_lack(tmp_path: Path) -> None:
    kafka = FakeKafka(partitions=1)
    for i in range(60_000):
        kafka.append(IN, f"user-{i:06d}", b"/p", partition=0)
    machine = LevelDBMachine(kafka, tmp_path / "a", str(tmp_path / "snapshots"))
    machine.run(0, 60_000)
    _, (first,) = machine.run(60_000, 60_000)  # a second snapshot of nearly the same store
    for i in range(100):
        kafka.append(IN, f"user-{i:06d}", b"/p", partition=0)
    _, (second,) = machine.run(60_000, 60_100)
    store = SnapshotStore(str(tmp_path / "snapshots"))
    newest = store.manifests(CLICKS.group, 0)[0]
    total = sum(f.size for f in newest.objects())
    assert second["reused"] > 0 and second["bytes"] < total / 4, (second, total)
    assert first["error"] is None and second["error"] is None
    # another machine restores it, then is current
    other = LevelDBMachine(kafka, tmp_path / "b", str(tmp_path / "snapshots"))
    summary, _ = other.run(60_100, 60_100)
    assert summary.store == "restored" and summary.table_records == 0  # type: ignore[attr-defined]
    other.worker.close()
    machine.worker.close()
    with LevelDBStorage(tmp_path / "b" / CLICKS.group / "partition-0", CLICKS.table) as restored:
        values = {k: int(v) for k, v in restored.items()}
    assert values == table_of(kafka) and values["user-000001"] == 2


@pytest.mark.parametrize(
    ("poll_interval", "inbox"),
    [(60.0, True), (0.05, False)],
    ids=["by-datagram", "by-file"],  # a holder that sees only datagrams, one that sees only files
)
def test_a_store_held_by_another_process_is_released_when_asked(
    poll_interval: float, inbox: bool, tmp_path: Path
) -> None:
    path = tmp_path / "partition-0"
    holder_args = [str(path), str(poll_interval), str(int(inbox))]
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, *holder_args], cwd=ROOT, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    ) as holder:  # fmt: skip
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "holding"
        started = time.monotonic()
        worker = Worker()
        with worker.lease(leveldb_store, path, "t", timeout=10) as lease:
            waited = time.monotonic() - started
            assert lease.fresh and lease.storage.get("from") == b"holder"
        holder.stdin.write("report\n")
        holder.stdin.flush()
        assert json.loads(holder.stdout.readline()) == []  # its store was closed on request
        assert waited < 2.0, waited
        assert not path.with_name("partition-0.release").exists()
        worker.close()


HOLDER = """
import json, sys
from pathlib import Path
from goka.storage import WriteBatch
from goka.processing.worker import Worker
from tests.helpers import TrackedStores

stores = TrackedStores()
worker = Worker(poll_interval=float(sys.argv[2]), inbox=sys.argv[3] == "1")
with worker.lease(stores, Path(sys.argv[1]), "t") as lease:
    lease.storage.write(WriteBatch({"from": b"holder"}))
print("holding", flush=True)
sys.stdin.readline()
print(json.dumps([str(p) for p in stores.open()]), flush=True)
"""


def test_a_busy_store_is_not_taken_and_the_wait_is_bounded(tmp_path: Path) -> None:
    worker, other = Worker(), Worker()  # one process, but two workers: as two processes
    with (
        worker.lease(leveldb_store, tmp_path / "p", "t"),
        pytest.raises(StorageLockedError, match="open in another storage"),
        other.lease(leveldb_store, tmp_path / "p", "t", timeout=0.3),
    ):
        pass
    with other.lease(leveldb_store, tmp_path / "p", "t", timeout=5) as lease:
        assert lease.fresh  # released once the first lease ended and the request was seen
    worker.close()
    other.close()


def test_a_store_whose_task_failed_is_closed_and_reopened_from_disk(tmp_path: Path) -> None:
    worker, stores = Worker(), TrackedStores()
    with worker.lease(stores, tmp_path / "p", "t") as lease:
        lease.storage.write(WriteBatch({"k": b"v"}))
    reused: list[bool] = []

    def failing_task() -> None:
        with worker.lease(stores, tmp_path / "p", "t") as lease:
            reused.append(not lease.fresh)
            raise RuntimeError("task failed")

    with pytest.raises(RuntimeError, match="task failed"):
        failing_task()
    assert reused == [True] and stores.open() == []
    with worker.lease(stores, tmp_path / "p", "t") as lease:
        assert lease.fresh and lease.storage.get("k") == b"v"
    worker.close()


def test_idle_stores_are_closed_and_a_lost_directory_is_not_reused(tmp_path: Path) -> None:
    worker, stores = Worker(idle_timeout=0.2), TrackedStores()
    with worker.lease(stores, tmp_path / "p", "t") as lease:
        lease.storage.write(WriteBatch({"k": b"v"}))
    wait_for(lambda: stores.open() == [], 5, "the idle store to be closed")
    with worker.lease(leveldb_store, tmp_path / "p", "t") as lease:
        assert lease.fresh and lease.storage.get("k") == b"v"
    for entry in (tmp_path / "p").iterdir():  # the disk is lost while the store is open
        entry.unlink()
    (tmp_path / "p").rmdir()
    with worker.lease(leveldb_store, tmp_path / "p", "t") as lease:
        assert lease.fresh and lease.storage.get("k") is None
    worker.close()


def test_a_store_copied_elsewhere_starts_a_new_lineage(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    StoreState("abc", {"000005.ldb": ("files/x", 10)}).write(tmp_path / "a")
    assert StoreState.read(tmp_path / "a").lineage == "abc"
    os.rename(tmp_path / "a", tmp_path / "b")  # same inode: still the same history
    assert StoreState.read(tmp_path / "b").lineage == "abc"
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "GOKA-SNAPSHOT").write_bytes((tmp_path / "b" / "GOKA-SNAPSHOT").read_bytes())
    copied = StoreState.read(tmp_path / "c")
    assert copied.lineage != "abc" and copied.inherited == {}


def _log_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.glob("*.log"))


def test_a_store_is_flushed_once_its_lease_ends_so_the_next_open_replays_no_log(
    tmp_path: Path,
) -> None:
    worker = Worker()
    values = {f"user-{i:06d}": os.urandom(40) for i in range(40_000)}  # ~2.5 MB of log
    with worker.lease(leveldb_store, tmp_path / "p", "t") as lease:
        lease.storage.write(WriteBatch(values))
        assert _log_bytes(tmp_path / "p") > 1 << 20
    wait_for(lambda: lease.settled, 10, "the housekeeper to flush the idle store")
    assert _log_bytes(tmp_path / "p") < 64 << 10
    worker.close()
    with LevelDBStorage(tmp_path / "p", "t") as reopened:
        assert dict(reopened.items()) == values


def test_a_store_staying_for_the_next_task_here_is_not_flushed_for_others(
    tmp_path: Path,
) -> None:
    # (a local epoch's tasks claim the stores their worker holds: the next lease is here, and
    # it waited for that flush; a store asked for elsewhere is closed as it is)
    worker = Worker()
    worker.stores.staying = True
    worker.hold(True)
    values = {f"user-{i:06d}": os.urandom(40) for i in range(40_000)}  # ~2.5 MB of log
    with worker.lease(leveldb_store, tmp_path / "p", "t") as lease:
        lease.storage.write(WriteBatch(values))
    wait_for(lambda: lease.settled, 10, "the housekeeper to see the idle store")
    assert _log_bytes(tmp_path / "p") > 1 << 20  # not flushed
    with worker.lease(leveldb_store, tmp_path / "p", "t") as again:
        assert again is lease and dict(again.storage.items()) == values  # the same, open
    worker.hold(False)  # (no bridge follows: flushed as before)
    with worker.lease(leveldb_store, tmp_path / "p", "t") as lease:
        lease.storage.write(WriteBatch({"one": b"more"}))
    wait_for(lambda: _log_bytes(tmp_path / "p") < 64 << 10, 10, "the store flushed")
    worker.close()


def test_flush_leaves_a_small_log_alone(tmp_path: Path) -> None:
    with LevelDBStorage(tmp_path / "p", "t") as storage:
        storage.write(WriteBatch({"k": b"v"}))
        before = _log_bytes(tmp_path / "p")
        storage.flush()
        assert _log_bytes(tmp_path / "p") == before > 0 and storage.get("k") == b"v"


def test_a_worker_whose_stores_are_wanted_elsewhere_hands_them_over_after_each_task(
    tmp_path: Path,
) -> None:
    worker, other = Worker(), Worker()  # as two worker processes of one executor
    mine, theirs = TrackedStores(), TrackedStores()
    with worker.lease(mine, tmp_path / "p0", "t"):
        pass
    with worker.lease(mine, tmp_path / "p0", "t") as lease:
        assert not lease.fresh  # not wanted elsewhere yet: kept open and reused
    with other.lease(theirs, tmp_path / "p0", "t", timeout=5) as lease:
        assert lease.fresh  # taken over on request
    with worker.lease(mine, tmp_path / "p1", "t") as lease:
        lease.storage.write(WriteBatch({"k": b"v"}))
    wait_for(lambda: mine.open() == [], 5, "p1 to be handed over without a request")
    with other.lease(theirs, tmp_path / "p1", "t", timeout=5) as lease:
        assert lease.storage.get("k") == b"v"
    assert theirs.open() == [tmp_path / "p0", tmp_path / "p1"]  # never asked: kept open
    worker.close()
    other.close()


def test_the_housekeeper_waits_while_a_task_uses_a_store_it_has_not_flushed(
    tmp_path: Path,
) -> None:
    worker = Worker()
    with worker.lease(leveldb_store, tmp_path / "p", "t") as lease:
        lease.settled = False  # reused before the housekeeper flushed it
        started = time.process_time()
        time.sleep(0.5)  # the task's work; the housekeeper must not spin meanwhile
        busy = time.process_time() - started
    assert busy < 0.25, f"the housekeeper used {busy:.2f}s of CPU in 0.5s"
    wait_for(lambda: lease.settled, 5, "the store to be flushed once its task ended")
    worker.close()


def _corrupt(path: Path, how: str) -> None:
    """Damage a closed store as a crash halfway through deleting it would have."""
    names = sorted(os.listdir(path))
    doomed = [n for n in names if n.startswith("MANIFEST-")] if how == "manifest" else ["CURRENT"]
    for name in doomed:
        (path / name).unlink()


@pytest.mark.parametrize("how", ["manifest", "current"])
def test_a_corrupt_store_is_named_and_a_processor_deletes_and_rebuilds_it(
    how: str, tmp_path: Path
) -> None:
    kafka = FakeKafka(partitions=1)
    for i in range(200):
        kafka.append(IN, f"user-{i % 7}", b"/p", partition=0)
    machine = LevelDBMachine(kafka, tmp_path, str(tmp_path / "snapshots"))
    machine.run(0, 150)  # and publishes a snapshot
    machine.worker.close()
    store = tmp_path / CLICKS.group / "partition-0"
    _corrupt(store, how)
    with pytest.raises(StorageCorruptError, match=rf"LevelDB at {store} is corrupt \("):
        LevelDBStorage(store, CLICKS.table)
    machine.worker = Worker()
    with pytest.raises(StorageCorruptError):  # a plain lease does not delete it
        machine.worker.lease(leveldb_store, store, CLICKS.table).__enter__()
    summary, _ = machine.run(150, 200)  # as a restarted executor finds it
    machine.worker.close()
    assert summary.corrupt_stores == 1 and summary.store == "restored"  # type: ignore[attr-defined]
    assert summary.processed == 50  # type: ignore[attr-defined]
    with LevelDBStorage(store, CLICKS.table) as rebuilt:
        assert {k: int(v) for k, v in rebuilt.items()} == table_of(kafka)
    assert not list((tmp_path / CLICKS.group / ".trash").iterdir())


def test_a_directory_with_foreign_files_is_refused_not_deleted(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "notes.txt").write_text("mine")
    worker = Worker()
    with pytest.raises(StorageError, match="not a LevelDB directory") as raised:
        worker.lease(leveldb_store, tmp_path / "p", "t", discard_corrupt=True).__enter__()
    worker.close()
    assert not isinstance(raised.value, StorageCorruptError)
    assert (tmp_path / "p" / "notes.txt").read_text() == "mine"


def test_a_store_deleted_by_a_process_killed_midway_is_gone_whole(tmp_path: Path) -> None:
    with LevelDBStorage(tmp_path / "p", "t") as storage:
        fill(storage, 20_000)
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_WHILE_DELETING, str(tmp_path / "p")], cwd=ROOT, check=False
    )
    assert killed.returncode == -9
    assert not (tmp_path / "p").exists()  # never half a store
    (left,) = (tmp_path / ".trash").iterdir()
    assert (left / "CURRENT").exists()  # the whole of it, set aside
    with LevelDBStorage(tmp_path / "q", "t"):
        pass
    remove_store(tmp_path / "q")  # the next deletion also clears what the dead process left
    assert not (tmp_path / "q").exists() and not list((tmp_path / ".trash").iterdir())


KILLED_WHILE_DELETING = """
import os, shutil, signal, sys
from pathlib import Path
from goka.processing.leases import remove_store

def rmtree(path, *args, **kwargs):
    first = sorted(Path(path).iterdir())[0]
    first.unlink()  # some of it is deleted, then the process dies
    os.kill(os.getpid(), signal.SIGKILL)

shutil.rmtree = rmtree
remove_store(Path(sys.argv[1]))
"""
