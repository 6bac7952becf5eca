"""What a worker process shares between the partition processors it runs, task after task.

Spark reuses a Python worker process for many tasks (``spark.python.worker.reuse``), one at a
time. Setting up a Kafka producer or consumer, catching up a looked-up table or opening a
partition store costs far more than most micro-batches, so a process keeps them in its one
:class:`Worker` (:meth:`Worker.current`) and a task borrows them.

Partition stores stay open between tasks and are *leased* to one task at a time. A store is
closed when idle for ``idle_timeout`` seconds, when the worker closes, or when another process
on the machine asks for it: LevelDB lets one process open a directory, and Spark runs the next
task of a partition in whichever Python worker of the executor is free.
A process that finds a store locked asks the holder to release it: a datagram to the holder's
inbox (a Unix socket in Linux's abstract namespace, named in ``<store>.holder``) wakes its
housekeeping thread at once, and a file ``<store>.release`` reaches holders the datagram cannot
(another network namespace, another OS) within ``poll_interval``. The holder closes the store
if no task of its own uses it, else when that task ends.

When a lease ends, the housekeeper flushes the store (:meth:`Storage.flush`; LevelDB replays
its log when opened: about 0.1 s after a batch of 60k updates). A worker whose stores were
asked for more often than it reused them then closes the store at once (a *handover*): the
next task, wherever it runs, opens it in milliseconds instead of waiting for a busy holder to
answer (its threads wait for the GIL). A worker whose stores are not wanted elsewhere keeps
them open and warm.
Stores a continuous epoch leaves to a *bridge* (:meth:`bridge`: the worker goes on processing
until its next task) stay open regardless (:meth:`hold`): the bridge leases them at once, and
lets go when another process asks.

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
import functools
import logging
import os
import queue
import secrets
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from goka.errors import StorageCorruptError, StorageLockedError
from goka.logs import configure
from goka.storage import Storage, StorageBuilder, move_aside
from goka.storage.snapshots import SnapshotStore, Staged, UploadReport, remove_abandoned

__all__ = ["Lease", "Worker", "frozen", "release_held", "remove_store"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How many more release requests than reuses a worker remembers (see Worker._after_task).
_HANDOVER_MEMORY = 4

_current: Worker | None = None
_current_lock = threading.Lock()


@dataclass(eq=False)
class Lease:
    """A partition store lent to one task (see :meth:`Worker.lease`).

    Attributes:
        path: the store's directory.
        storage: the open storage.
        fresh: opened for this lease (False: reused, open since an earlier task).
        discarded: why the store found on disk was moved aside when it was opened (damaged;
            the lease's store is then empty), else None.
    """

    path: Path
    table: str
    storage: Storage
    builder: StorageBuilder
    fresh: bool = True
    idle_since: float = field(default_factory=time.monotonic)
    identity: tuple[int, int] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    settled: bool = True
    asked: bool = False
    discarded: str | None = None

    def replace(self, directory: Path) -> None:
        """Make ``directory`` (on the same file system) this store, and open it.

        Raises:
            StorageError: the new store cannot be opened.
        """
        self.storage.close()
        remove_store(self.path)
        directory.rename(self.path)
        self.storage = self.builder(self.path, self.table)
        self.identity = _identity(self.path)

    def reset(self) -> None:
        """Replace the store by an empty one (its directory is deleted)."""
        self.storage.close()
        remove_store(self.path)
        self.storage = self.builder(self.path, self.table)
        self.identity = _identity(self.path)


class Worker:
    """The resources of one worker process (see the module docstring). Thread-safe.

    Args:
        idle_timeout: seconds after which an unused store is closed.
        poll_interval: how often idle stores are checked for ``.release`` files (requests by
            datagram are seen at once).
        inbox: take release requests by datagram (on Linux; False: ``.release`` files only).
    """

    def __init__(
        self, *, idle_timeout: float = 120.0, poll_interval: float = 0.05, inbox: bool = True
    ) -> None:
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
        self._inbox = _inbox() if inbox else None
        self._address = self._inbox.getsockname() if self._inbox is not None else None
        self._woken = threading.Event()
        self._handovers = 0  # requests for our stores minus reuses, within 0.._HANDOVER_MEMORY
        self._bridge: tuple[threading.Thread, threading.Event] | None = None
        self._holding = False  # keep stores open after a task: a bridge follows (see hold)
        self._carried: dict[Hashable, list[Any]] = {}

    @classmethod
    def current(cls) -> Worker:
        """This process's worker, created on first use (and again in a forked child)."""
        global _current
        with _current_lock:
            if _current is None or _current._pid != os.getpid():
                if os.environ.get("GOKA_LOG_LEVEL") and not logging.getLogger().handlers:
                    configure()  # a Spark Python worker of `goka processor run`: log as it does
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

    def discard(self, key: Hashable) -> None:
        """Forget the client kept under ``key`` without closing it (it failed: the next
        :meth:`client` builds a new one; the old one is released when garbage-collected)."""
        with self._lock:
            self._clients.pop(key, None)

    # -- partition stores ----------------------------------------------------------------------
    @contextlib.contextmanager
    def lease(
        self,
        builder: StorageBuilder,
        path: Path,
        table: str,
        *,
        timeout: float = 120.0,
        discard_corrupt: bool = False,
        ask: bool = True,
    ) -> Iterator[Lease]:
        """Lend the store at ``path`` to the caller until the block ends; it stays open after,
        unless the block raised (then it is closed: the next lease opens it from disk).

        Args:
            discard_corrupt: a store that is corrupt on disk is deleted and an empty one opened
                (its caller rebuilds it; see :attr:`Lease.discarded`), instead of raising.
            ask: ask another process that holds the store to release it, and wait; False:
                raise at once (a task of this process is still waited for).

        Raises:
            StorageLockedError: another task or process kept it for ``timeout`` seconds.
            StorageError: it cannot be opened (StorageCorruptError: it is corrupt).
        """
        lease = self._acquire(builder, path, table, timeout, discard_corrupt, ask)
        try:
            yield lease
        except BaseException as exc:
            self._drop(lease)  # the task failed: the next one reopens the store from disk
            if discard_corrupt and isinstance(exc, StorageCorruptError) and exc.path == str(path):
                move_aside(path, str(exc))  # found damaged in use: the next one rebuilds it
            raise
        if lease.asked:  # another process waits for it
            self._drop(lease)
            return
        lease.idle_since, lease.settled = time.monotonic(), False
        lease.lock.release()
        self._wake()

    def _acquire(
        self,
        builder: StorageBuilder,
        path: Path,
        table: str,
        timeout: float,
        discard: bool,
        ask: bool = True,
    ) -> Lease:
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
                self._handovers = max(self._handovers - 1, 0)
                return lease
            if kept:  # its directory was deleted or replaced under it: a lost disk
                self._drop(lease)
            else:  # the housekeeper closed it meanwhile
                lease.lock.release()
        discarded = None
        try:
            storage = _open_when_released(builder, path, table, deadline, ask)
        except StorageCorruptError as exc:
            if not discard:
                raise
            move_aside(path, str(exc))
            storage = _open_when_released(builder, path, table, deadline, ask)
            discarded = str(exc)
        if self._address is not None:
            _write_holder(path, self._address)
        lease = Lease(path, table, storage, builder, identity=_identity(path), discarded=discarded)
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
            if self._address is not None:
                _forget_holder(lease.path, self._address)

    def _start_housekeeper(self) -> None:
        with self._lock:
            if self._housekeeper is None or not self._housekeeper.is_alive():
                self._housekeeper = threading.Thread(
                    target=self._housekeep, name="goka-stores", daemon=True
                )
                self._housekeeper.start()

    def _housekeep(self) -> None:
        next_round = 0.0
        while not self._closed.is_set():
            with self._lock:
                leases = list(self._stores.values())
            unsettled = [lease for lease in leases if not lease.settled and not lease.lock.locked()]
            wait = 0.0 if unsettled else max(0.0, next_round - time.monotonic())
            self._release(self._wait_for_requests(wait))
            if unsettled:  # one at a time: requests are served in between
                self._after_task(unsettled[0])
            if time.monotonic() < next_round:
                continue
            next_round = time.monotonic() + self.poll_interval
            with self._lock:
                if not self._stores:
                    self._housekeeper = None
                    return
            self._check_files(leases)

    def _after_task(self, lease: Lease) -> None:
        """Flush a store whose task ended; hand it over (close it) if this worker's stores
        are wanted elsewhere more often than they are reused here."""
        if not self._take(lease):
            return  # a task took it again (it is settled when that task ends), or it closed
        _settle(lease)
        if self._handovers > 0 and not self._holding:
            self._drop(lease)
            log.debug("handed over store %s", lease.path)
        else:
            lease.lock.release()

    def _check_files(self, leases: list[Lease]) -> None:
        """Serve ``.release`` files; close stores idle for ``idle_timeout``."""
        marked = {lease.path for lease in leases if _release_marker(lease.path).exists()}
        self._release(marked)
        for path in marked:  # served, or to be served when its task ends
            with contextlib.suppress(FileNotFoundError):
                os.unlink(_release_marker(path))
        now = time.monotonic()
        for lease in leases:
            idle = now - lease.idle_since > self.idle_timeout
            if idle and self._take(lease):
                _settle(lease)
                self._drop(lease)
                log.debug("closed idle store %s", lease.path)

    def _take(self, lease: Lease) -> bool:
        """Take ``lease``'s lock if no task holds it and the store is still open here (a
        release request may have closed it since the caller listed the leases)."""
        if not lease.lock.acquire(blocking=False):
            return False
        with self._lock:
            held = self._stores.get(lease.path) is lease
        if not held:
            lease.lock.release()
        return held

    def _release(self, paths: set[Path]) -> None:
        """Close the stores at ``paths`` that no task uses; mark the others to be closed when
        their task ends. Touches few files: on a busy worker each costs a wait for the GIL."""
        for path in paths:
            with self._lock:
                lease = self._stores.get(path)
            if lease is None:
                continue
            self._handovers = min(self._handovers + 1, _HANDOVER_MEMORY)
            if lease.lock.acquire(blocking=False):
                self._drop(lease)
                log.debug("closed store %s: asked by another process", path)
            else:
                lease.asked = True

    def _wake(self) -> None:
        """Wake the housekeeper (a task ended)."""
        if self._inbox is None:
            self._woken.set()
            return
        with contextlib.suppress(OSError):
            self._inbox.sendto(b"", self._inbox.getsockname())

    def _wait_for_requests(self, timeout: float) -> set[Path]:
        """Wait up to ``timeout`` for release requests by datagram or a wake-up; return the
        paths asked for."""
        if self._inbox is None:
            self._woken.wait(timeout)
            self._woken.clear()
            return set()
        asked: set[Path] = set()
        with contextlib.suppress(OSError):  # a timeout, or the inbox closed by close()
            self._inbox.settimeout(timeout)
            while True:
                if data := self._inbox.recv(4096):  # (empty: a wake-up)
                    asked.add(Path(os.fsdecode(data)))
                self._inbox.settimeout(0)  # take what else is queued, without waiting
        return asked

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

    # -- work between tasks ----------------------------------------------------------------------
    def bridge(self, run: Callable[[Callable[[], bool]], object]) -> None:
        """Run ``run(ended)`` on a background thread until this process's next task begins
        (:meth:`end_bridge`): ``run`` returns soon after ``ended()`` turns true. One at a time
        (a running one is ended first): the clients a bridge uses are the next task's."""
        self.end_bridge(hold=True)
        ended = threading.Event()
        thread = threading.Thread(target=run, args=(ended.is_set,), name="goka-bridge",
                                  daemon=True)  # fmt: skip
        with self._lock:
            self._bridge = (thread, ended)
        thread.start()

    @property
    def bridging(self) -> bool:
        """Whether a bridge runs."""
        with self._lock:
            return self._bridge is not None and self._bridge[0].is_alive()

    def end_bridge(self, *, hold: bool = False) -> None:
        """End the running bridge, if any, and wait for it (a task begins); then :meth:`hold`
        stores open after tasks or not."""
        with self._lock:
            bridge, self._bridge = self._bridge, None
        if bridge is not None and bridge[0] is not threading.current_thread():
            bridge[1].set()
            bridge[0].join()
        self._holding = hold

    def hold(self, on: bool) -> None:
        """Keep stores open when their task ends even if they are handed over to other
        processes as a rule (``on``: a bridge leases them next; it lets go when asked)."""
        self._holding = on

    def carry(self, key: Hashable, items: list[Any]) -> None:
        """Keep ``items`` under ``key`` for the next :meth:`take_carried` (what a bridge did,
        for the next task to report)."""
        with self._lock:
            self._carried.setdefault(key, []).extend(items)

    def take_carried(self, key: Hashable) -> list[Any]:
        """Return and forget what was carried under ``key``."""
        with self._lock:
            return self._carried.pop(key, [])

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self, timeout: float = 30.0) -> None:
        """Finish uploads (up to ``timeout``), close stores and clients. Idempotent; errors
        while closing are logged, each client is closed regardless."""
        if self._closed.is_set():
            return
        self.end_bridge()
        self.wait_for_uploads(timeout)
        self._closed.set()
        self._woken.set()
        self._uploads.put(None)
        if self._inbox is not None:
            self._inbox.close()
        with self._lock:
            leases, self._stores = list(self._stores.values()), {}
            closers, self._clients = [c for _, c in self._clients.values()], {}
            housekeeper = self._housekeeper
        if housekeeper is not None and housekeeper is not threading.current_thread():
            housekeeper.join(timeout)  # it may be flushing a store: never close one under it
        for lease in leases:  # nor under a task still holding it
            if lease.lock.acquire(timeout=timeout):
                closers.append(lease.storage.close)
                if self._address is not None:  # once closed
                    closers.append(functools.partial(_forget_holder, lease.path, self._address))
            else:
                log.error("store %s still in use after %ss: left open", lease.path, timeout)
        for close in closers:
            try:
                close()
            except Exception:
                log.exception("closing a worker resource failed")


def _open_when_released(
    builder: StorageBuilder, path: Path, table: str, deadline: float, ask: bool = True
) -> Storage:
    """Open the store, asking the process that holds it to release it (unless not ``ask``:
    then it raises at once)."""
    asked = 0.0
    while True:
        try:
            storage = builder(path, table)
        except StorageLockedError:
            now = time.monotonic()
            if now > deadline or not ask:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(_release_marker(path))  # no one is waiting any more
                raise
            if now - asked > 0.05:  # (again: another waiter may have taken the request away)
                _ask_holder(path)
                asked = now
            time.sleep(0.001)
            continue
        if asked:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(_release_marker(path))
        return storage


def _inbox() -> socket.socket | None:
    """This process's inbox for release requests (Linux; None elsewhere: files only)."""
    if not sys.platform.startswith("linux"):
        return None
    inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    inbox.bind(f"\0goka-worker-{os.getpid()}-{secrets.token_hex(8)}")
    return inbox


def _ask_holder(path: Path) -> None:
    """Ask whoever holds the store at ``path`` to release it: a datagram to the inbox named in
    ``<store>.holder`` (if it is reachable) and the file ``<store>.release``."""
    _release_marker(path).touch()
    try:
        address = "\0" + _holder_file(path).read_text()
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as out:
            out.setblocking(False)
            out.sendto(os.fsencode(path), address)
    except (OSError, ValueError):  # no holder file, a holder gone or in another namespace
        pass


def _write_holder(path: Path, address: str | bytes) -> None:
    """Name this process's inbox in ``<store>.holder`` (not for stores without a directory)."""
    name = address.decode() if isinstance(address, bytes) else address
    temporary = path.with_name(f"{path.name}.holder-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        temporary.write_text(name.lstrip("\0"))
        temporary.replace(_holder_file(path))


def _holder_file(path: Path) -> Path:
    return path.with_name(path.name + ".holder")


def _forget_holder(path: Path, address: str | bytes) -> None:
    """Remove ``<store>.holder`` if it names this process's inbox (the store was closed)."""
    name = (address.decode() if isinstance(address, bytes) else address).lstrip("\0")
    holder = _holder_file(path)
    with contextlib.suppress(OSError):
        if holder.read_text() == name:
            holder.unlink()


def release_held(directory: Path, timeout: float = 5.0) -> list[Path]:
    """Ask the processes of this machine that hold stores under ``directory`` open to close
    them, and wait up to ``timeout`` seconds for them to (a query ended: nothing will use
    them, and its workers would keep them until their idle timeout). Holders that are gone
    are forgotten. A holder on another machine (a cluster's executor) is not reached: it
    closes the stores when they have been idle for its ``idle_timeout``.

    Returns:
        The stores still held when the time was up.
    """
    waiting: dict[Path, str] = {}
    for holder in directory.glob("*.holder"):
        store = holder.with_name(holder.name.removesuffix(".holder"))
        try:
            name = holder.read_text()
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as out:
                out.setblocking(False)
                out.sendto(os.fsencode(store), "\0" + name)
            waiting[store] = name
        except (ConnectionRefusedError, FileNotFoundError):  # its process is gone
            _forget_holder(store, name)
        except OSError:  # another network namespace, a full inbox: it closes when idle
            continue
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        time.sleep(0.01)
        waiting = {p: n for p, n in waiting.items() if _holder_name(p) == n}
    return sorted(waiting)


def _holder_name(path: Path) -> str | None:
    try:
        return _holder_file(path).read_text()
    except OSError:
        return None


def remove_store(path: Path) -> None:
    """Delete a store's directory so that a crash midway leaves all of it or none: it is first
    renamed into ``.trash`` beside it (a rename is atomic), then deleted there. What processes
    that died left in ``.trash`` is deleted too."""
    trash = path.parent / ".trash"
    remove_abandoned(trash)
    try:
        trash.mkdir(exist_ok=True)
        aside = trash / f"store-{os.getpid()}-{secrets.token_hex(4)}"
        path.rename(aside)
    except FileNotFoundError:
        return  # no store (or no parent directory)
    shutil.rmtree(aside, ignore_errors=True)


def _settle(lease: Lease) -> None:
    """Flush an idle store (its lock held), so that whoever opens it next opens it fast."""
    if lease.identity is not None and _identity(lease.path) != lease.identity:
        log.debug("store %s was deleted or replaced under this process: not flushed", lease.path)
        lease.settled = True
        return
    try:
        lease.storage.flush()
    except Exception as exc:  # an accelerator: the store stays usable, or its next use fails
        log.warning("flushing store %s failed: %s", lease.path, exc)
    lease.settled = True


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
