"""The time of one record in flight (a timed group with ``concurrency`` above 1).

Several records of a partition run at once, but the partition's time
(:class:`~goka.time.partition.PartitionTime`: its stream time, timer queues, window rows and
their changelog) must change as one record after another would change it, in offset order.
So a record in flight sees a :class:`RecordTime` of its own instead:

* its **stream time** is the one it would see one at a time (the stream time the records
  before it reach with its own event time, worked out when it was admitted);
* what it **writes** (window rows, timers set or cancelled, a TTL renewed, a late record) is
  kept in the record and **replayed** on the partition's time when the record is released, in
  offset order (:meth:`RecordTime.replay`), with the stream time it saw: the partition's time
  changes in the order and with the calls of one record at a time;
* what it **reads** (a window's value, its key's sessions, a timer, whether its key expired)
  is its own writes, then those of the earlier records of its key that finished but are not
  released yet (:class:`Pending`), then the partition's time. Rows and timers belong to one
  key, and a key's records run one after another, so these are exactly the writes one at a
  time would show (for sessions, given they stay readable for their gap after they close:
  :func:`~goka.group.retries.check_awaited`).

A record that fails is never replayed: its writes are simply dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from goka.time.rows import MAX_TIME, composite
from goka.time.ttl import TtlMethods

if TYPE_CHECKING:
    from goka.time.partition import PartitionTime
    from goka.time.ports import WindowDeclaration
    from goka.time.specs import Window

__all__ = ["Pending", "RecordTime", "SessionRows"]

_NONE: Any = object()  # (not written by the record)


class Pending:
    """The writes of the records that finished and are not released yet, by record: window
    rows ``{(name, row): (value, number)}`` and timers ``{(key, name): ((domain, at) or None,
    number)}`` (None: cancelled)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], tuple[bytes | None, int]] = {}
        self.timers: dict[tuple[str, str], tuple[tuple[str, int] | None, int]] = {}

    def add(self, number: int, time: RecordTime) -> None:
        """Record ``number`` finished with the writes of ``time``."""
        for at, value in time.rows.items():
            self.rows[at] = (value, number)
        for at, timer in time.timers.items():
            self.timers[at] = (timer, number)

    def drop(self, number: int, time: RecordTime) -> None:
        """Record ``number`` was released (its writes replayed): forget what no later record
        wrote since."""
        for at in time.rows:
            if self.rows.get(at, (None, -1))[1] == number:
                del self.rows[at]
        for at in time.timers:
            if self.timers.get(at, (None, -1))[1] == number:
                del self.timers[at]


class SessionRows:
    """The rows of one window table under a key's prefix, as record ``time`` reads them
    (:func:`~goka.time.open_windows.sessions`): its own writes, then those of the earlier
    records of its key that finished but are not released, then the partition's."""

    def __init__(self, time: RecordTime, name: str) -> None:
        self.time, self.name = time, name

    def items(self, prefix: str) -> list[tuple[str, bytes]]:
        """Rows (``w`` + composite key) under ``prefix`` as of now, in key order."""
        time, name = self.time, self.name
        # the pending rows first: a record released meanwhile (on the release thread) is
        # replayed on the partition's rows before it leaves them, so one of the two has it
        layers = [] if time.was_cut else [{r: v for r, (v, _) in time.pending.rows.copy().items()}]
        found = {} if time.was_cut else dict(time.shared.window_rows[name].items(prefix))
        for layer in [*layers, time.rows]:  # (older first: a later write wins)
            for (table, row), value in layer.items():
                if table != name or not ("w" + row).startswith(prefix):
                    continue
                if value is None:
                    found.pop("w" + row, None)
                else:
                    found["w" + row] = value
        return sorted(found.items())


class RecordTime(TtlMethods):
    """The time of one record in flight (see the module docstring): a
    :class:`~goka.time.ports.PartitionClock` over ``shared`` and ``pending``, at ``stream_time``
    (its TTL's methods are the partition's, on its own timers and stream time)."""

    updaters: Mapping[str, Callable[..., None]] = {}  # (window updates take the general way)

    def __init__(self, shared: PartitionTime, stream_time: int, pending: Pending) -> None:
        self.shared, self.stream_time, self.pending = shared, stream_time, pending
        self.graph = shared.graph
        self.late_dropped = 0
        self.late_seen: set[str] = set()
        self.late_records: list[tuple[str, Any]] = []
        self.ops: list[tuple[Any, ...]] = []  # replayed in order
        self.rows: dict[tuple[str, str], bytes | None] = {}
        self.timers: dict[tuple[str, str], tuple[str, int] | None] = {}
        #: its callback was cut: what its work that goes on reads is its own writes only (the
        #: partition's time, read after the call, would learn old rows into its window cache)
        self.was_cut = False

    # -- read ----------------------------------------------------------------------------------
    @property
    def fixed(self) -> Mapping[str, tuple[Callable[[int], list[Window]], int]]:
        return self.shared.fixed

    @property
    def clock(self) -> Callable[[], int]:  # type: ignore[override]  # (read-only here)
        return self.shared.wall_clock  # (the call's one reading, what is due is measured by)

    def wall_clock(self) -> int:
        return self.shared.wall_clock()

    @property
    def window_rows(self) -> Mapping[str, SessionRows]:
        """Each window table's rows as the record reads them (its sessions: a prefix scan
        of its key's rows)."""
        return {name: SessionRows(self, name) for name in self.graph.windows}

    def edge(self, name: str) -> WindowDeclaration:
        return self.shared.edge(name)

    def window_reader(self, name: str) -> Callable[[str, int], bytes | None]:
        shared, rows, pending = self.shared.window_reader(name), self.rows, self.pending.rows

        def read(row: str, end: int) -> bytes | None:
            found = rows.get((name, row), _NONE)
            if found is not _NONE or self.was_cut:
                return None if found is _NONE else found
            kept = pending.get((name, row))
            return shared(row, end) if kept is None else kept[0]

        return read

    def timer(self, key: str, name: str) -> tuple[str, int] | None:
        found = self.timers.get((key, name), _NONE)
        if found is not _NONE or self.was_cut:
            return None if found is _NONE else found
        kept = self.pending.timers.get((key, name))
        return self.shared.timer(key, name) if kept is None else kept[0]

    # -- write (replayed on release) -----------------------------------------------------------
    def write_window_row(self, name: str, row: str, value: bytes | None, source: Any, end: int,
                         existed: bool | None = None) -> None:  # fmt: skip
        self.rows[(name, row)] = value
        self.ops.append(("row", name, row, value, source, end))

    def set_window(self, name: str, key: str, window: Window, value: bytes | None,
                   source: Any) -> None:  # fmt: skip
        self.write_window_row(name, composite(key, window.start, window.end), value, source,
                              window.end)  # fmt: skip

    def schedule(self, key: str, name: str, at: int, domain: str, data: Any, source: Any) -> None:
        self.shared.timer_data(name, domain, data)  # (its errors, a codec's too: the callback's)
        self.timers[(key, name)] = (domain, min(max(at, 0), MAX_TIME))
        self.ops.append(("schedule", key, name, at, domain, data, source))

    def cancel(self, key: str, name: str, source: Any, *, quiet: bool = False) -> bool:
        if self.timer(key, name) is None:
            return False
        self.timers[(key, name)] = None
        self.ops.append(("cancel", key, name, source, quiet))
        return True

    def replay(self) -> None:
        """Make the record's writes on the partition's time, in their order (its stream time
        set already: :meth:`PartitionTime.mark` taken)."""
        shared = self.shared
        for op in self.ops:
            if op[0] == "row":
                shared.write_window_row(*op[1:])
            elif op[0] == "schedule":
                shared.schedule(*op[1:])
            else:
                _, key, name, source, quiet = op
                shared.cancel(key, name, source, quiet=quiet)
        shared.late_dropped += self.late_dropped
        shared.late_records.extend(self.late_records)
