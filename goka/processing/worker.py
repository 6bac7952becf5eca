"""What a worker process shares between the partition processors it runs, task after task.

Spark reuses a Python worker process for many tasks (``spark.python.worker.reuse``), one at a
time. Setting up a Kafka producer or consumer, catching up a looked-up table or opening a
partition store costs far more than most micro-batches, so a process keeps them in its one
:class:`Worker` (:meth:`Worker.current`) and a task borrows them: clients by key
(:meth:`Worker.client`), partition stores by lease (:mod:`goka.processing.leases`), and the
background upload of snapshots (:mod:`goka.processing.uploads`).

Between two epochs of a continuous processor a worker runs a *bridge*
(:meth:`Worker.bridge`): it goes on processing its last epoch's partitions until its next task
begins (see :mod:`goka.processing.epoch`).

Spark ends idle worker processes with SIGKILL, so :meth:`Worker.close` cannot be relied on
there: nothing depends on it (a commit is durable when written, the OS releases LevelDB's lock,
an interrupted upload leaves only files that pruning removes).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from goka.processing.leases import Lease, StoreHolder
from goka.processing.uploads import Uploads
from goka.storage import StorageBuilder
from goka.storage.snapshots import SnapshotStore, Staged, UploadReport

__all__ = ["Worker", "frozen"]

log = logging.getLogger(__name__)
T = TypeVar("T")

_current: Worker | None = None
_current_lock = threading.Lock()


class Worker:
    """The resources of one worker process (see the module docstring). Thread-safe.

    The keyword arguments are :class:`~goka.processing.leases.StoreHolder`'s.
    """

    def __init__(
        self, *, idle_timeout: float = 120.0, poll_interval: float = 0.05, inbox: bool = True
    ) -> None:
        self._lock = threading.Lock()
        self._clients: dict[Hashable, tuple[Any, Callable[[], object]]] = {}
        self.stores = StoreHolder(idle_timeout=idle_timeout, poll_interval=poll_interval,
                                  inbox=inbox)  # fmt: skip
        self.uploads = Uploads()
        self._closed = False
        self._pid = os.getpid()
        self._bridge: tuple[threading.Thread, threading.Event] | None = None
        self._carried: dict[Hashable, list[Any]] = {}

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

    def kept(self, key: Hashable) -> Any:
        """The client kept under ``key`` (None: none is)."""
        with self._lock:
            found = self._clients.get(key)
            return None if found is None else found[0]

    def discard(self, key: Hashable) -> None:
        """Forget the client kept under ``key`` without closing it (it failed: the next
        :meth:`client` builds a new one; the old one is released when garbage-collected)."""
        with self._lock:
            self._clients.pop(key, None)

    # -- partition stores and snapshots --------------------------------------------------------
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
        """Lend the store at ``path`` to the caller until the block ends (see
        :meth:`StoreHolder.lease <goka.processing.leases.StoreHolder.lease>`)."""
        with self.stores.lease(builder, path, table, timeout=timeout,
                               discard_corrupt=discard_corrupt, ask=ask) as lease:  # fmt: skip
            yield lease

    def upload(self, store: SnapshotStore, staged: Staged) -> None:
        """Publish ``staged`` in the background (see :class:`~goka.processing.uploads.
        Uploads`)."""
        self.uploads.upload(store, staged)

    def reports(self) -> list[UploadReport]:
        """Return and forget the reports of uploads finished since the last call."""
        return self.uploads.reports()

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

    def end_bridge(self, *, hold: bool = False) -> None:
        """End the running bridge, if any, and wait for it (a task begins); then :meth:`hold`
        stores open after tasks or not."""
        with self._lock:
            bridge, self._bridge = self._bridge, None
        if bridge is not None and bridge[0] is not threading.current_thread():
            bridge[1].set()
            bridge[0].join()
        self.stores.hold(hold)

    def hold(self, on: bool) -> None:
        """Keep stores open when their task ends even if they are handed over to other
        processes as a rule (``on``: a bridge leases them next; it lets go when asked)."""
        self.stores.hold(on)

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
    # -- lifecycle -----------------------------------------------------------------------------
    def close(self, timeout: float = 30.0) -> None:
        """End the bridge, finish uploads (up to ``timeout``), close stores and clients.
        Idempotent; errors while closing are logged, each client is closed regardless."""
        if self._closed:
            return
        self._closed = True
        self.end_bridge()
        self.uploads.close(timeout)
        self.stores.close(timeout)
        with self._lock:
            closers, self._clients = [c for _, c in self._clients.values()], {}
        for close in closers:
            try:
                close()
            except Exception:
                log.exception("closing a worker resource failed")


def frozen(settings: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A hashable form of client settings, for :meth:`Worker.client` keys."""
    return tuple(sorted((k, repr(v)) for k, v in settings.items()))
