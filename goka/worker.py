"""What a worker process shares between the partition processors it runs, task after task.

Spark reuses a Python worker process for many tasks (``spark.python.worker.reuse``), one at a
time. Setting up a Kafka producer or consumer, catching up a looked-up table or opening a
partition store costs far more than most micro-batches, so a process keeps them in its one
:class:`Worker` (:meth:`Worker.current`) and a task borrows them.

Partition stores stay open between tasks and are *leased* to one task at a time. A store is
closed when idle for ``idle_timeout`` seconds, when the worker closes, or when another process
on the machine asks for it: LevelDB lets one process open a directory, and Spark runs the next
task of a partition in whichever worker process is free. A process that finds a store locked
creates ``<store>.release``; the holder's housekeeping thread sees it within ``poll_interval``,
closes the store if no task of its own uses it, and removes the request.

Snapshots staged by tasks are uploaded by one background thread, newest first per partition
(a staged snapshot superseded before its upload started is dropped); reports of finished
uploads are collected with :meth:`Worker.reports`.

Spark ends idle worker processes with SIGKILL, so :meth:`Worker.close` cannot be relied on
there: nothing depends on it (a commit is durable when written, the OS releases LevelDB's lock,
an interrupted upload leaves only files that pruning removes).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from goka.errors import StorageLockedError
from goka.storage import Storage, StorageBuilder
from goka.storage.snapshots import SnapshotStore, Staged, UploadReport

__all__ = ["Lease", "Worker", "frozen"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_current: Worker | None = None
_current_lock = threading.Lock()


@dataclass(eq=False)
class Lease:
    """A partition store lent to one task (see :meth:`Worker.lease`).

    Attributes:
        path: the store's directory.
        storage: the open storage.
        fresh: opened for this lease (False: reused, open since an earlier task).
    """

    path: Path
    table: str
    storage: Storage
    builder: StorageBuilder
    fresh: bool = True
    idle_since: float = field(default_factory=time.monotonic)
    identity: tuple[int, int] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def replace(self, directory: Path) -> None:
        """Make ``directory`` (on the same file system) this store, and open it.

        Raises:
            StorageError: the new store cannot be opened.
        """
        self.storage.close()
        shutil.rmtree(self.path, ignore_errors=True)
        directory.rename(self.path)
        self.storage = self.builder(self.path, self.table)
        self.identity = _identity(self.path)

    def reset(self) -> None:
        """Replace the store by an empty one (its directory is deleted)."""
        self.storage.close()
        shutil.rmtree(self.path, ignore_errors=True)
        self.storage = self.builder(self.path, self.table)
        self.identity = _identity(self.path)


class Worker:
    """The resources of one worker process (see the module docstring). Thread-safe.

    Args:
        idle_timeout: seconds after which an unused store is closed.
        poll_interval: how often idle stores are checked for release requests.
    """

    def __init__(self, *, idle_timeout: float = 120.0, poll_interval: float = 0.01) -> None:
        self.idle_timeout = idle_timeout
        self.poll_interval = poll_interval
        self._lock = threading.Lock()
        self._clients: dict[Hashable, tuple[Any, Callable[[], object]]] = {}
        self._stores: dict[Path, Lease] = {}
        self._housekeeper: threading.Thread | None = None
        self._uploads: queue.Queue[tuple[SnapshotStore, Staged] | None] = queue.Queue()
        self._pending: dict[tuple[str, str, int], Staged] = {}
        self._uploader: threading.Thread | None = None
        self._reports: list[UploadReport] = []
        self._closed = threading.Event()
        self._pid = os.getpid()

    @classmethod
    def current(cls) -> Worker:
        """This process's worker, created on first use (and again in a forked child)."""
        global _current
        with _current_lock:
            if _current is None or _current._pid != os.getpid():
                _current = cls()
                atexit.register(_current.close)
            return _current

    # -- shared clients ------------------------------------------------------------------------
    def client(self, key: Hashable, build: Callable[[], T], close: Callable[[T], object]) -> T:
        """Return the client kept under ``key``, building it on first use.

        ``close(client)`` runs when the worker closes."""
        with self._lock:
            found = self._clients.get(key)
            if found is None:
                client = build()
                self._clients[key] = (client, lambda: close(client))
                return client
            return found[0]  # type: ignore[no-any-return]

    # -- partition stores ----------------------------------------------------------------------
    @contextlib.contextmanager
    def lease(
        self, builder: StorageBuilder, path: Path, table: str, *, timeout: float = 120.0
    ) -> Iterator[Lease]:
        """Lend the store at ``path`` to the caller until the block ends; it stays open after,
        unless the block raised (then it is closed: the next lease opens it from disk).

        Raises:
            StorageLockedError: another task or process kept it for ``timeout`` seconds.
            StorageError: it cannot be opened.
        """
        lease = self._acquire(builder, path, table, timeout)
        try:
            yield lease
        except BaseException:
            self._drop(lease)  # the task failed: the next one reopens the store from disk
            raise
        lease.idle_since = time.monotonic()
        lease.lock.release()

    def _acquire(self, builder: StorageBuilder, path: Path, table: str, timeout: float) -> Lease:
        deadline = time.monotonic() + timeout
        with self._lock:
            lease = self._stores.get(path)
        if lease is not None:
            if not lease.lock.acquire(timeout=timeout):
                raise StorageLockedError(f"store {path} is used by another task of this process")
            with self._lock:
                kept = self._stores.get(path) is lease
            if kept and lease.identity in (None, _identity(path)):  # None: no directory
                lease.fresh = False
                return lease
            if kept:  # its directory was deleted or replaced under it: a lost disk
                self._drop(lease)
            else:  # the housekeeper closed it meanwhile
                lease.lock.release()
        storage = _open_when_released(builder, path, table, deadline)
        lease = Lease(path, table, storage, builder, identity=_identity(path))
        lease.lock.acquire()
        with self._lock:
            self._stores[path] = lease
        self._start_housekeeper()
        return lease

    def _drop(self, lease: Lease) -> None:
        """Close a store whose lock the caller holds, and forget it."""
        with self._lock:
            if self._stores.get(lease.path) is lease:
                del self._stores[lease.path]
        try:
            lease.storage.close()
        except Exception:  # a broken store: closing is all that was left to do with it
            log.exception("closing store %s failed", lease.path)
        finally:
            lease.lock.release()

    def _start_housekeeper(self) -> None:
        with self._lock:
            if self._housekeeper is None or not self._housekeeper.is_alive():
                self._housekeeper = threading.Thread(
                    target=self._housekeep, name="goka-stores", daemon=True
                )
                self._housekeeper.start()

    def _housekeep(self) -> None:
        while not self._closed.wait(self.poll_interval):
            with self._lock:
                leases = list(self._stores.values())
            if not leases:
                with self._lock:
                    if not self._stores:
                        self._housekeeper = None
                        return
            now = time.monotonic()
            for lease in leases:
                if lease.lock.locked():
                    continue  # a task uses it: asked or not, it stays until the task ends
                wanted = os.path.exists(_release_marker(lease.path))
                if (wanted or now - lease.idle_since > self.idle_timeout) and lease.lock.acquire(
                    blocking=False
                ):
                    self._drop(lease)
                    if wanted:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(_release_marker(lease.path))
                    log.debug("closed store %s (%s)", lease.path, "asked" if wanted else "idle")

    def open_stores(self) -> list[Path]:
        """The paths of the stores this process holds open."""
        with self._lock:
            return list(self._stores)

    # -- snapshot uploads ----------------------------------------------------------------------
    def upload(self, store: SnapshotStore, staged: Staged) -> None:
        """Publish ``staged`` in the background; a newer one of the same partition replaces it
        if its upload has not started."""
        key = (store.url, staged.group, staged.partition)
        with self._lock:
            older = self._pending.get(key)
            self._pending[key] = staged
            if self._uploader is None:
                self._uploader = threading.Thread(
                    target=self._upload_loop, name="goka-snapshots", daemon=True
                )
                self._uploader.start()
        if older is not None:
            older.discard()
        else:
            self._uploads.put((store, staged))

    def _upload_loop(self) -> None:
        while (item := self._uploads.get()) is not None:
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
                self._uploads.task_done()
            with self._lock:
                self._reports.append(report)

    def wait_for_uploads(self, timeout: float) -> bool:
        """Wait until queued uploads are done; return False on timeout."""
        deadline = time.monotonic() + timeout
        while self._uploads.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def reports(self) -> list[UploadReport]:
        """Return and forget the reports of uploads finished since the last call."""
        with self._lock:
            found, self._reports = self._reports, []
        return found

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self, timeout: float = 30.0) -> None:
        """Finish uploads (up to ``timeout``), close stores and clients. Idempotent; errors
        while closing are logged, each client is closed regardless."""
        if self._closed.is_set():
            return
        self.wait_for_uploads(timeout)
        self._closed.set()
        self._uploads.put(None)
        with self._lock:
            leases, self._stores = list(self._stores.values()), {}
            closers, self._clients = [c for _, c in self._clients.values()], {}
        for close in [*(lease.storage.close for lease in leases), *closers]:
            try:
                close()
            except Exception:
                log.exception("closing a worker resource failed")


def _open_when_released(
    builder: StorageBuilder, path: Path, table: str, deadline: float
) -> Storage:
    """Open the store, asking the process that holds it to release it."""
    asked = 0.0
    while True:
        try:
            storage = builder(path, table)
        except StorageLockedError:
            now = time.monotonic()
            if now > deadline:
                raise
            if now - asked > 0.05:  # (again: another waiter may have taken the request away)
                _release_marker(path).touch()
                asked = now
            time.sleep(0.002)
            continue
        if asked:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(_release_marker(path))
        return storage


def _release_marker(path: Path) -> Path:
    return path.with_name(path.name + ".release")


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino


def frozen(settings: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A hashable form of client settings, for :meth:`Worker.client` keys."""
    return tuple(sorted((k, repr(v)) for k, v in settings.items()))
