"""Views: local, persistent copies of a table topic, like Go Goka's ``goka.View``.

:class:`View` (here) follows every partition of a table topic from one thread and answers
``get``/``scan`` from its storage (LevelDB or memory) once each partition has caught up with
the end it saw at start (``recovered``). How a batch of the topic's records lands in storage,
values and offsets in one write so that a restarted copy resumes where it stopped, is
:mod:`goka.view.table_copy`. The gRPC and HTTP services (``goka/grpc``, ``goka/web``) serve
views; they are not part of this package.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, TypeVar

from goka.codec import Codec
from goka.errors import (
    GokaError,
    StorageCorruptError,
    StorageError,
    ViewError,
    ViewNotReadyError,
)
from goka.kafka.config import Brokers
from goka.kafka.table_consumer import TableConsumer
from goka.keys import key_str
from goka.metrics import view_metrics
from goka.storage import LevelDBStorage, MemoryStorage, Storage, move_aside
from goka.view.status import ViewState, ViewStats
from goka.view.table_copy import PartitionStats, TableCopy

__all__ = ["PartitionStats", "View", "ViewError", "ViewNotReadyError", "ViewState", "ViewStats"]

V = TypeVar("V")
log = logging.getLogger(__name__)


class View(Generic[V]):
    """Follows a table topic into local storage and answers reads from it.

    The view assigns every partition of ``table`` and applies updates and tombstones in one
    storage write per consumed batch, together with the partition offsets; a restarted view
    resumes where it stopped. It is *recovered* once every partition reached its end, as seen
    when the view started reading.

    Reads are thread-safe and may run while the view follows the topic.

    Args:
        brokers: bootstrap servers.
        table: the table topic, e.g. ``"clicks-table"``.
        codec: decodes values.
        path: LevelDB directory (persistent); None keeps the table in memory.
        storage: a storage to use instead of ``path`` (the view closes it).
        allow_stale_reads: serve reads before recovery.
        on_state_change: called as ``fn(old, new)`` on the view's thread.
        quiet: log state changes at DEBUG, not INFO (a view a service keeps for itself).
        max_batch: records per storage write.
        connect_timeout: seconds to wait for the brokers at start.
        **kafka_config: librdkafka settings.
    """

    def __init__(
        self,
        brokers: Brokers,
        table: str,
        codec: Codec[V],
        *,
        path: str | Path | None = None,
        storage: Storage | None = None,
        allow_stale_reads: bool = False,
        on_state_change: Callable[[ViewState, ViewState], object] | None = None,
        max_batch: int = 20_000,
        connect_timeout: float = 10.0,
        quiet: bool = False,
        **kafka_config: Any,
    ) -> None:
        self.brokers, self.table, self.codec = brokers, table, codec
        self._state_log = logging.DEBUG if quiet else logging.INFO
        self.allow_stale_reads = allow_stale_reads
        self.max_batch = max_batch
        self.connect_timeout = connect_timeout
        self._kafka_config = kafka_config
        #: the librdkafka settings the view reads with (for tools that read its topic too)
        self.kafka_config: dict[str, Any] = dict(kafka_config)
        self._path = Path(path) if path is not None and storage is None else None
        self._damage: StorageCorruptError | None = None  # found by a read, for the loop
        self._rebuilding = False
        self._storage: Storage = storage or self._open_storage()
        self._listeners = [on_state_change] if on_state_change else []
        self._state = ViewState.IDLE
        self._recovered = threading.Event()
        self._stopping = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._metrics = view_metrics(table)
        self._copy = TableCopy(table, self._metrics)

    def _open_storage(self) -> Storage:
        """Open the store at the view's path; a damaged one is moved aside and a new one
        opened, to be rebuilt from the table topic."""
        if self._path is None:
            return MemoryStorage(self.table)
        try:
            return LevelDBStorage(self._path, self.table)
        except StorageCorruptError as exc:
            move_aside(self._path, str(exc))
            self._rebuilding = True
            return LevelDBStorage(self._path, self.table)

    def _rebuild(self, damage: StorageCorruptError) -> None:
        """Replace a store found damaged by an empty one (reads are refused meanwhile).

        Raises:
            ViewError: the store was given to the view (no path to rebuild at).
        """
        if self._path is None:
            raise ViewError(f"view {self.table!r}: its storage is damaged: {damage}") from damage
        self._recovered.clear()
        self._rebuilding = True
        self._set_state(ViewState.REBUILDING)
        self._storage.close()
        move_aside(self._path, str(damage))
        self._storage = LevelDBStorage(self._path, self.table)
        self._damage = None

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def state(self) -> ViewState:
        """The current state."""
        return self._state

    @property
    def recovered(self) -> bool:
        """True once every partition reached the end seen at start (False again while a
        damaged store is rebuilt)."""
        return self._recovered.is_set() and self._damage is None and not self._rebuilding

    def add_state_listener(self, listener: Callable[[ViewState, ViewState], object]) -> None:
        """Call ``listener(old, new)`` on every state change (on the view's thread)."""
        self._listeners.append(listener)

    def _set_state(self, new: ViewState) -> None:
        old, self._state = self._state, new
        if old is new:
            return
        log.log(self._state_log, "view %s: %s -> %s", self.table, old.value, new.value)
        self._metrics.state(new.value)
        for listener in self._listeners:
            try:
                listener(old, new)
            except Exception:
                log.exception("view %s: state listener %r raised", self.table, listener)

    def start(self) -> View[V]:
        """Follow the table on a background thread; returns at once. Idempotent."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run_logged, name=f"goka-view-{self.table}", daemon=True
            )
            self._thread.start()
        return self

    def _run_logged(self) -> None:
        try:
            self.run()
        except GokaError as exc:  # (one that says what happened: its traceback at debug)
            log.error("view %s failed: %s", self.table, exc)
            log.debug("view %s failed", self.table, exc_info=True)
        except Exception:
            log.exception("view %s failed", self.table)

    @property
    def error(self) -> BaseException | None:
        """Why the view failed (None while it has not)."""
        return self._error

    def run(self) -> None:
        """Follow the table on this thread until :meth:`close` (blocks).

        Raises:
            ViewError: the table topic cannot be followed (missing, truncated, ...).
            BrokerError: no broker answered at start.
        """
        try:
            self._follow()
        except BaseException as exc:
            self._error = exc
            self._set_state(ViewState.FAILED)
            self._recovered.set()  # wake waiters: they re-raise the error
            raise

    def _follow(self) -> None:
        consumer = TableConsumer(self.brokers, self.table, self._kafka_config)
        try:
            partitions = consumer.partitions(self.connect_timeout)
            while True:
                try:
                    stored = self._copy.resume(self._storage, partitions)
                    consumer.assign({p: stored.get(p) for p in range(partitions)})
                    self._set_state(
                        ViewState.REBUILDING if self._rebuilding else ViewState.CATCHING_UP
                    )
                    self._loop(consumer, set(range(partitions)))
                    return
                except StorageCorruptError as damage:
                    self._rebuild(damage)
        finally:
            consumer.close()

    def _loop(self, consumer: TableConsumer, not_at_end: set[int]) -> None:
        last_probe = last_check = 0.0
        while not self._stopping.is_set():
            if self._damage is not None:  # a read found it
                raise self._damage
            polled = consumer.poll(self.max_batch, 0.1)
            if polled.fatal:
                for partition, high in polled.ends.items():
                    self._copy.saw_end(partition, high)  # says how far the topic went back
                raise ViewError(polled.fatal)
            if polled.records:
                self._copy.apply(self._storage, polled)
            not_at_end.difference_update(polled.eof)
            for partition in {row[0] for row in polled.records} | set(polled.eof):
                self._copy.saw_end(partition, consumer.high_watermark(partition))
            if polled.transient:
                log.warning("view %s: %s", self.table, "; ".join(polled.transient))
                self._set_state(ViewState.RECONNECTING)
            elif self._state is ViewState.RECONNECTING:
                now = time.monotonic()
                if polled.records or polled.eof or (now - last_probe > 1 and consumer.reachable(1)):
                    self._set_state(ViewState.RUNNING if self.recovered else ViewState.CATCHING_UP)
                last_probe = now
            if time.monotonic() - last_check > 1.0:  # partitions without traffic, too
                last_check = time.monotonic()
                for partition in self._copy.offsets:
                    self._copy.saw_end(partition, consumer.high_watermark(partition))
            if not not_at_end and not self.recovered and self._damage is None:
                self._recovered.set()
                self._rebuilding = False
                if self._state in (ViewState.CATCHING_UP, ViewState.REBUILDING):
                    self._set_state(ViewState.RUNNING)
            self._metrics.lag(self._copy.lags())

    def wait_recovered(self, timeout: float | None = None) -> None:
        """Wait until the view recovered.

        Raises:
            TimeoutError: not recovered within ``timeout`` seconds.
            ViewError, BrokerError: the view failed.
        """
        if not self._recovered.wait(timeout):
            raise TimeoutError(
                f"view {self.table!r} not recovered within {timeout}s ({self.stats()})"
            )
        if self._error is not None:
            raise self._error

    def close(self, timeout: float = 10.0) -> None:
        """Stop following and close the storage. Idempotent."""
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self._state is not ViewState.CLOSED:
            self._set_state(ViewState.CLOSED)
        self._storage.close()

    def __enter__(self) -> View[V]:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- reads -----------------------------------------------------------------------------------
    def _check_readable(self) -> None:
        if self._state is ViewState.CLOSED:
            raise ViewNotReadyError(f"view {self.table!r} is closed")
        if self._rebuilding or self._damage is not None:
            raise ViewNotReadyError(
                f"view {self.table!r} is rebuilding its damaged store from the table topic"
            )
        if not self.allow_stale_reads and not self._recovered.is_set():
            raise ViewNotReadyError(
                f"view {self.table!r} has not recovered yet (state: {self._state.value}); "
                "wait_recovered() first or allow_stale_reads=True"
            )
        if self._error is not None:
            raise ViewNotReadyError(f"view {self.table!r} failed: {self._error}")

    def get(self, key: str | bytes) -> V | None:
        """Return the value of ``key`` (text, or any bytes: see :mod:`goka.keys`), or None.

        Raises:
            ViewNotReadyError: not recovered yet (unless stale reads are allowed), or closed.
            CodecError: the stored value cannot be decoded.
        """
        raw = self.get_raw(key)
        return None if raw is None else self.codec.decode(raw)

    def get_raw(self, key: str | bytes) -> bytes | None:
        """Return the stored bytes of ``key``, or None."""
        self._check_readable()
        try:
            return self._storage.get(key_str(key))
        except (RuntimeError, StorageError) as exc:
            raise self._not_ready(exc) from exc

    def _not_ready(self, error: Exception) -> ViewNotReadyError:
        """A read failed: a damaged store is rebuilt (the loop sees it), others just fail."""
        if isinstance(error, StorageCorruptError) and self._path is not None:
            self._damage = self._damage or error
            self._recovered.clear()  # waiters wait for the rebuild
            return ViewNotReadyError(
                f"view {self.table!r} found its store damaged and rebuilds it: {error}"
            )
        return ViewNotReadyError(f"view {self.table!r}: {error}")

    def _guarded(self, items: Iterator[tuple[str, bytes]]) -> Iterator[tuple[str, bytes]]:
        try:
            yield from items
        except (RuntimeError, StorageError) as exc:
            raise self._not_ready(exc) from exc

    def has(self, key: str | bytes) -> bool:
        """Return True if ``key`` has a value."""
        return self.get_raw(key) is not None

    def items(
        self,
        *,
        prefix: str | bytes | None = None,
        start: str | bytes | None = None,
        stop: str | bytes | None = None,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[str, V]]:
        """Yield ``(key, value)`` in key order over a prefix and/or range (``stop`` exclusive).

        Keys are ordered by their bytes; a key that is not UTF-8 text comes as ``str`` with
        surrogate escapes (:func:`goka.keys.key_bytes` gives its bytes back)."""
        for key, raw in self.items_raw(prefix=prefix, start=start, stop=stop, reverse=reverse,
                                       limit=limit):  # fmt: skip
            yield key, self.codec.decode(raw)

    def items_raw(
        self,
        *,
        prefix: str | bytes | None = None,
        start: str | bytes | None = None,
        stop: str | bytes | None = None,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[str, bytes]]:
        """Like :meth:`items` with undecoded values.

        Raises:
            ViewNotReadyError: at once (not at the first item), as :meth:`get` does.
        """
        self._check_readable()
        prefix, start, stop = (None if k is None else key_str(k) for k in (prefix, start, stop))
        items = self._guarded(
            self._storage.items(prefix=prefix, start=start, stop=stop, reverse=reverse)
        )
        return items if limit is None else itertools.islice(items, limit)

    def stats(self) -> ViewStats:
        """Return the view's state, progress and lag per partition."""
        copy = self._copy
        return ViewStats(self.table, self._state, self.recovered, copy.applied, copy.skipped,
                         copy.partition_stats())  # fmt: skip

    def __repr__(self) -> str:
        return f"View({self.table!r}, {self._state.value})"
