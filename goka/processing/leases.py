"""Partition stores lent to one task at a time, kept open between tasks, and released to
other processes that ask for them (:class:`StoreHolder`, one per worker process).

Partition stores stay open between tasks and are *leased* to one task at a time. A store is
closed when idle for ``idle_timeout`` seconds, when the holder closes, or when another process
on the machine asks for it: LevelDB lets one process open a directory, and Spark runs the next
task of a partition in whichever Python worker of the executor is free (see
:mod:`goka.processing.claims`). A process that finds a store locked asks the holder to release
it: a datagram to the holder's inbox (a Unix socket in Linux's abstract namespace, named in
``<store>.holder``, which the holder removes when it closes the store) wakes its housekeeping
thread at once, and a file ``<store>.release`` reaches holders the datagram cannot (another
network namespace, another OS) within ``poll_interval``. The holder closes the store if no task
of its own uses it, else when that task ends. :func:`release_held` asks every holder of a
directory's stores (a query ended).

When a lease ends, the housekeeper flushes the store (:meth:`Storage.flush`; LevelDB replays
its log when opened), unless it is held for the next task here (``staying``). A holder whose
stores were asked for more often than it reused them then closes the store at once (a
*handover*): the next task, wherever it runs, opens it in milliseconds instead of waiting for a
busy holder to answer (its threads wait for the GIL). A holder whose stores are not wanted
elsewhere keeps them open and warm; stores that a bridge leases next stay open regardless
(:meth:`StoreHolder.hold`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from goka.errors import StorageCorruptError, StorageLockedError
from goka.processing.holders import (
    forget_holder,
    holder_file,
    open_inbox,
    open_when_released,
    release_marker,
    write_holder,
)
from goka.storage import Storage, StorageBuilder, move_aside
from goka.storage.snapshots import remove_abandoned

__all__ = ["Lease", "StoreHolder", "remove_store"]

log = logging.getLogger(__name__)

#: How many more release requests than reuses a holder remembers (see StoreHolder._after_task).
_HANDOVER_MEMORY = 4


@dataclass(eq=False)
class Lease:
    """A partition store lent to one task (see :meth:`StoreHolder.lease`).

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


class StoreHolder:
    """The partition stores of one process (see the module docstring). Thread-safe.

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
        self._stores: dict[Path, Lease] = {}
        self._housekeeper: threading.Thread | None = None
        self._closed = threading.Event()
        self._inbox = open_inbox() if inbox else None
        self._address = self._inbox.getsockname() if self._inbox is not None else None
        self._woken = threading.Event()
        self._handovers = 0  # requests for our stores minus reuses, within 0.._HANDOVER_MEMORY
        self._holding = self.staying = False  # see hold; staying: goka.processing.claims

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

    def holder(self, path: Path) -> str | None:
        """Who holds the store at ``path``: ``"here"``, ``"elsewhere"`` (``.holder``) or None."""
        with self._lock:
            if path in self._stores:
                return "here"
        return "elsewhere" if holder_file(path).exists() else None

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
            storage = open_when_released(builder, path, table, deadline, ask)
        except StorageCorruptError as exc:
            if not discard:
                raise
            move_aside(path, str(exc))
            storage = open_when_released(builder, path, table, deadline, ask)
            discarded = str(exc)
        if self._address is not None:
            write_holder(path, self._address)
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
                forget_holder(lease.path, self._address)

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
        if not (self._holding and self.staying):  # else the next lease is this process's: no
            _settle(lease)  # flush for an opener elsewhere (that lease would wait for it)
        lease.settled = True
        if self._handovers > 0 and not self._holding:
            self._drop(lease)
            log.debug("handed over store %s", lease.path)
        else:
            lease.lock.release()

    def _check_files(self, leases: list[Lease]) -> None:
        """Serve ``.release`` files; close stores idle for ``idle_timeout``."""
        marked = {lease.path for lease in leases if release_marker(lease.path).exists()}
        self._release(marked)
        for path in marked:  # served, or to be served when its task ends
            with contextlib.suppress(FileNotFoundError):
                os.unlink(release_marker(path))
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

    def hold(self, on: bool) -> None:
        """Keep stores open when their task ends even if they are handed over to other
        processes as a rule (``on``: a bridge leases them next; it lets go when asked)."""
        self._holding = on

    def close(self, timeout: float = 30.0) -> None:
        """Close every store (waiting up to ``timeout`` for a task or the housekeeper still
        using one; one still in use is left open and logged). Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._woken.set()
        if self._inbox is not None:
            self._inbox.close()
        with self._lock:
            leases, self._stores = list(self._stores.values()), {}
            housekeeper = self._housekeeper
        if housekeeper is not None and housekeeper is not threading.current_thread():
            housekeeper.join(timeout)  # it may be flushing a store: never close one under it
        for lease in leases:  # nor under a task still holding it
            if not lease.lock.acquire(timeout=timeout):
                log.error("store %s still in use after %ss: left open", lease.path, timeout)
                continue
            try:
                lease.storage.close()
            except Exception:
                log.exception("closing store %s failed", lease.path)
            if self._address is not None:
                forget_holder(lease.path, self._address)


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


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino
