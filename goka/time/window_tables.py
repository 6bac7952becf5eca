"""The window tables of a partition: reading and writing windows, and closing them.

Each window table is a section of the partition store (changelog ``<group>-window-<name>``):
``w<key>@<start>-<end>`` rows hold the windows' values, and every window has a close index row
``c<close time><window>`` (its end plus grace), written when it is created and deleted with
it. Windows close in close-time order as the stream time passes their close time: a table
emitting final results keeps the queue of what closes (a result per window, produced after the
commit by :mod:`goka.processing.finals`), every table the queue of what expires (its
retention after closing). The windows this engine wrote are also kept in memory until they
close (:mod:`goka.time.window_cache`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from goka.errors import ContextError
from goka.group.effects import WINDOW, Effect
from goka.time.overlay import ABSENT, Journal, Overlay
from goka.time.rows import DIGITS, MAX_TIME, composite
from goka.time.specs import Window
from goka.time.timers import DueQueue
from goka.time.window_cache import WrittenWindows

if TYPE_CHECKING:
    from goka.group.edges import WindowEdge
    from goka.group.graph import GroupGraph

__all__ = ["WindowTables"]


class WindowTables:
    """Window tables of a partition (mixed into :class:`~goka.time.partition.PartitionTime`,
    which holds the attributes)."""

    graph: GroupGraph
    stream_time: int
    deferred_finals: bool
    whole_commits: bool
    journal: Journal | None
    effects: list[Effect]
    timer_rows: Overlay
    window_rows: dict[str, Overlay]
    _edges: dict[str, WindowEdge]
    _topics: dict[str, str]
    _graces: dict[str, int]
    _written: dict[str, WrittenWindows]
    _readers: dict[str, Callable[[str, int], bytes | None]]
    _closing: dict[str, DueQueue]
    _expiring: dict[str, DueQueue]
    _closed: dict[str, Any]
    _floor_stream: int
    _sources: dict[str, dict[str, Any]]

    def _row(self, key: str, value: bytes | None, source: Any) -> None:
        raise NotImplementedError  # the timers'

    def close_due(self, trigger: Any) -> None:
        """Close every window of the final tables due by the stream time (deferred finals:
        a close has no effects; each table's close watermark moves to its last), attributed
        to ``trigger``. (A burst of closes at each window boundary: one pass over the queues,
        not :meth:`next_due` per window.)"""
        stream = self.stream_time
        if stream < self._floor_stream:
            return
        for name, queue in self._closing.items():
            last = None
            while (row := queue.first()) is not None and int(row[0][1 : 1 + DIGITS]) <= stream:
                queue.remove(row[0])
                last = row[0]
            if last is not None:
                at, encoded = int(last[1 : 1 + DIGITS]), last.encode()
                self.timer_rows.put(f"c{name}", encoded)
                self._closed[name] = (encoded, (trigger[0], trigger[1], None, None, at, None))
                self._floor_stream = -1  # recomputed by next_due

    def closed_all(self) -> None:
        """What was due after a trigger has fired: write the close watermark of each window
        table that closed windows (one row however many closed)."""
        for name, (row, source) in self._closed.items():
            self._row(f"c{name}", row, source)
        self._closed.clear()

    # -- windows ---------------------------------------------------------------------------------
    def edge(self, name: str) -> WindowEdge:
        """The window edge ``name``.

        Raises:
            ContextError: the group has no such window.
        """
        edge = self._edges.get(name)
        if edge is None:
            declared = ", ".join(self._edges) or "none"
            raise ContextError(f"group {self.graph.group!r} has no window {name!r} "
                               f"(windows: {declared})")  # fmt: skip
        return edge

    def window_changes(self) -> dict[str, dict[str, bytes | None]]:
        """The window section rows the batch changed (``w<key>``: last value, and the close
        index rows of windows created or deleted), by changelog topic."""
        return {self._topics[n]: rows.changes for n, rows in self.window_rows.items()}

    def window_reader(self, name: str) -> Callable[[str, int], bytes | None]:
        """What reads window table ``name`` as of now: ``read(row, end)``, the value of
        window ``row`` (its composite key) ending at ``end``."""
        return self._readers[name]

    def set_window(self, name: str, key: str, window: Window, value: bytes | None,
                   source: Any) -> None:  # fmt: skip
        """Write (None: delete) ``window`` of ``key``."""
        self.write_window_row(name, composite(key, window.start, window.end), value, source,
                         window.end)  # fmt: skip

    def write_window_row(self, name: str, row: str, value: bytes | None, source: Any, end: int,
                    existed: bool | None = None) -> None:  # fmt: skip
        """Write window ``row`` (its composite key; the window ends at ``end``; ``existed``:
        whether it has a value, if the caller knows). (A hot path: a call per window
        update; :meth:`_lower` and :func:`~goka.time.rows.close_key` are inlined.)"""
        if existed is None:
            existed = self._readers[name](row, end) is not None
        rows = self.window_rows[name]
        rows.put("w" + row, value)
        close_at = end + self._graces[name]
        if close_at > MAX_TIME:
            close_at = MAX_TIME
        written = self._written.get(name)
        if written is not None:
            written.wrote(row, close_at, value, self.journal)
        if value is None or not existed:
            index = f"c{close_at:015d}{row}"
            rows.put(index, None if value is None else b"")  # its close index row
            closing = self._closing.get(name)
            if value is None:
                self._expiring[name].remove(index)
                if closing is not None:
                    closing.remove(index)
            else:
                if closing is None or not self.deferred_finals:  # else: after its delivery
                    self._expiring[name].add(index, b"")
                    expires = close_at + self._edges[name].retention
                    if expires < self._floor_stream:
                        self._floor_stream = expires
                if closing is not None:
                    closing.add(index, b"")
                    if close_at < self._floor_stream:
                        self._floor_stream = close_at
        if self.whole_commits:  # one changelog row per window and call: finish() makes them
            sources = self._sources[name]
            if self.journal is not None:
                self.journal.append((sources, row, sources.get(row, ABSENT)))
            sources[row] = source
        else:
            self.effects.append((WINDOW, self._topics[name], row, value, None, source))

    def window_effects(self) -> None:
        """With whole commits: the changelog row of each window the call changed (its last
        value, attributed to the last record that changed it), after the call's other effects.
        (A replay reads whole commits, so a window's intermediate values need no row: they
        would cost a row per update of a busy window.)"""
        for name, sources in self._sources.items():
            if sources:
                changes, topic = self.window_rows[name].changes, self._topics[name]
                self.effects.extend((WINDOW, topic, row, changes["w" + row], None, source)
                                    for row, source in sources.items())  # fmt: skip
