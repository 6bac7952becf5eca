"""Snapshot uploads in the background of a worker process: staged by tasks (a hard-link copy
taken in milliseconds), published by one thread, newest first per partition (a staged snapshot
superseded before its upload started is dropped); what finished is reported to the next task's
summary."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from goka.processing.leases import Lease
from goka.storage.snapshots import (
    SnapshotStore,
    Staged,
    StoreState,
    UploadReport,
    remove_abandoned,
    stage,
)

__all__ = ["Uploads", "stage_due"]

log = logging.getLogger(__name__)


class Uploads:
    """The upload queue of one process. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[SnapshotStore, Staged] | None] = queue.Queue()
        self._pending: dict[tuple[str, str, int], Staged] = {}
        self._thread: threading.Thread | None = None
        self._reports: list[UploadReport] = []

    def upload(self, store: SnapshotStore, staged: Staged) -> None:
        """Publish ``staged`` in the background; a newer one of the same partition replaces it
        if its upload has not started."""
        key = (store.url, staged.group, staged.partition)
        with self._lock:
            older = self._pending.get(key)
            self._pending[key] = staged
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="goka-snapshots",
                                                daemon=True)  # fmt: skip
                self._thread.start()
        if older is not None:
            older.discard()
        else:
            self._queue.put((store, staged))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            store, queued = item
            with self._lock:
                staged = self._pending.pop((store.url, queued.group, queued.partition), queued)
            try:
                report = store.publish(staged)
            except Exception as exc:  # a snapshot is an accelerator: report, never fail a task
                log.warning(
                    "snapshot %s of group %s partition %d not published: %s",
                    staged.id, staged.group, staged.partition, exc,
                )  # fmt: skip
                report = UploadReport(staged.group, staged.partition, staged.id, error=str(exc))
            finally:
                staged.discard()
                self._queue.task_done()
            with self._lock:
                self._reports.append(report)

    def wait(self, timeout: float) -> bool:
        """Wait until queued uploads are done; return False on timeout."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def reports(self) -> list[UploadReport]:
        """Return and forget the reports of uploads finished since the last call."""
        with self._lock:
            found, self._reports = self._reports, []
        return found

    def close(self, timeout: float) -> None:
        """Finish the queued uploads (up to ``timeout``), then end the thread. Idempotent."""
        self.wait(timeout)
        self._queue.put(None)


def stage_due(snapshots: SnapshotStore | None, group: str, partition: int,
              leases: Mapping[str, Lease], root: Path, interval: float,
              upload: Callable[[SnapshotStore, Staged], None], *,
              quick: bool = False) -> float:  # fmt: skip
    """Stage a snapshot of a partition's stores (``leases`` by name) in ``root/.staging`` and
    hand it to ``upload``, if one is due (the last staged ``interval`` seconds ago or more);
    return the seconds it took (0: none was due). With ``quick`` (a loop that calls again
    soon), only once each store is ready for a quick checkpoint (``prepare_checkpoint``,
    where a storage has it: LevelDB writes its memtable out in the background first, so a
    later call stages in a few milliseconds instead of stalling the loop for the flush)."""
    main = leases["partition"]
    if snapshots is None or time.time() - StoreState.read(main.path).staged_at < interval:
        return 0.0
    started = time.monotonic()
    if quick:
        ready = [
            prepare()
            for lease in leases.values()
            if (prepare := getattr(lease.storage, "prepare_checkpoint", None)) is not None
        ]
        if not all(ready):  # (each store began its flush: asked again at the next write)
            return time.monotonic() - started
    staging = root / ".staging"
    remove_abandoned(staging)
    stores = {name: (lease.storage, lease.path) for name, lease in leases.items()}
    upload(snapshots, stage(group, partition, stores, staging))
    return time.monotonic() - started
