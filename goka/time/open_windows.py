"""What ``ctx.window(name)`` returns: the open windows of the current record, to aggregate into.

Example (page views per user per hour)::

    def count(ctx, view):
        ctx.window("hourly").update(lambda n: (n or 0) + 1)

A record belongs to one window (tumbling, calendar, session) or several (hopping). Windows
closed by stream time (their end plus grace has passed) are left out; a record for which all
are closed is *late* and follows the window edge's ``late`` policy. A record that falls into
sessions of its key (less than ``gap`` away) merges them into one, with the edge's ``merge``;
the sessions merged away are deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from goka.time.ports import RecordContext, WindowTimes
from goka.time.rows import MAX_TIME, composite, decode_composite, headers
from goka.time.specs import Session, Window

__all__ = ["WindowState", "Windows"]


class WindowState:
    """One window of the current key: ``[start, end)`` and its value."""

    __slots__ = ("_ctx", "_name", "_time", "window")

    def __init__(self, ctx: RecordContext, time: WindowTimes, name: str, window: Window):
        self._ctx, self._time, self._name, self.window = ctx, time, name, window

    @property
    def start(self) -> int:
        """The start, in ms since the epoch."""
        return self.window.start

    @property
    def end(self) -> int:
        """The end (exclusive), in ms since the epoch."""
        return self.window.end

    def value(self) -> Any:
        """The window's value, or None."""
        start, end = self.window
        raw = self._time.window_reader(self._name)(composite(self._ctx.key, start, end), end)
        return None if raw is None else self._time.edge(self._name).codec.decode(raw)

    def set_value(self, value: Any) -> None:
        """Set the window's value (with ``emit="update"`` and an output, also emitted)."""
        edge = self._time.edge(self._name)
        self._time.set_window(self._name, self._ctx.key, self.window, edge.codec.encode(value),
                              self._ctx._message)  # fmt: skip
        if edge.emit == "update" and edge.output is not None:
            self._ctx.emit(edge.output, self._ctx.key, value, headers(self._name, self.window))

    def delete(self) -> None:
        """Delete the window."""
        self._time.set_window(self._name, self._ctx.key, self.window, None, self._ctx._message)

    def __repr__(self) -> str:
        return f"<WindowState {self._name} {self.window!r}>"


class Windows:
    """The open windows of the current record in window table ``name`` (see the module
    docstring); iterate them, or use :meth:`update`, :meth:`value`, :meth:`set_value`."""

    __slots__ = ("_ctx", "_name", "_time", "_windows")

    def __init__(self, ctx: RecordContext, time: WindowTimes, name: str) -> None:
        self._ctx, self._time, self._name = ctx, time, name
        at = ctx.event_time_ms
        fixed = time.fixed.get(name)
        if fixed is not None and time.stream_time < MAX_TIME:  # (open_windows' hot path,
            windows = fixed[0](at)  # inlined: a call per record of a windowed group)
            if windows[0].end + fixed[1] > time.stream_time:  # (earliest first: all open)
                self._windows = windows
                return
        windows, late = open_windows(time, name, at)
        if late:
            _late(time, name, ctx, Window(at, at + 1))
        elif name not in time.fixed:  # sessions
            windows = [self._merge(at)]
        self._windows = windows  # made WindowStates only when asked for (iterated, one)

    def _merge(self, at: int) -> Window:
        """The session of a record at ``at``: the sessions it joins, merged into one."""
        time, key = self._time, self._ctx.key
        edge = time.edge(self._name)
        found = sessions(time, self._name, key, at)
        if not found:
            return Window(at, at + 1)
        merged = Window(
            min(at, *(w.start for w, _ in found)), max(at + 1, *(w.end for w, _ in found))
        )
        if len(found) == 1 and found[0][0] == merged:
            return merged
        assert edge.merge is not None  # window() requires it for sessions
        values = [edge.codec.decode(v) for _, v in found]
        value = values[0]
        for other in values[1:]:
            value = edge.merge(value, other)
        for window, _ in found:
            time.set_window(self._name, key, window, None, self._ctx._message)
        time.set_window(self._name, key, merged, edge.codec.encode(value), self._ctx._message)
        return merged

    def __iter__(self) -> Iterator[WindowState]:
        return iter([WindowState(self._ctx, self._time, self._name, w) for w in self._windows])

    def __len__(self) -> int:
        return len(self._windows)

    def update(self, change: Callable[[Any], Any]) -> None:
        """Set each open window's value to ``change(its value or None)``."""
        if not self._windows:
            return
        time, name, ctx = self._time, self._name, self._ctx
        fast = time.updaters.get(name)  # (a table of fixed windows that emits no updates)
        if fast is not None:
            fast(ctx.key, self._windows, change, ctx._message)
            return
        edge = time.edge(name)
        key, source, read = ctx.key, ctx._message, time.window_reader(name)
        decode, encode = edge.codec.decode, edge.codec.encode
        emit = edge.output if edge.emit == "update" else None
        write = time.write_window_row
        for window in self._windows:  # the hot path of a windowed group: each row read once
            start, end = window
            row = f"{key}@{start:015d}-{end:015d}"  # goka.time.rows.composite, inlined
            raw = read(row, end)
            value = change(None if raw is None else decode(raw))
            write(name, row, encode(value), source, end, raw is not None)
            if emit is not None:
                ctx.emit(emit, key, value, headers(name, window))

    def value(self) -> Any:
        """The value of the one open window (None: none, or late).

        Raises:
            ValueError: the record is in several windows (hopping): iterate them.
        """
        return self._one().value() if self._windows else None

    def set_value(self, value: Any) -> None:
        """Set the value of the one open window (nothing if the record is late).

        Raises:
            ValueError: the record is in several windows (hopping): iterate them.
        """
        if self._windows:
            self._one().set_value(value)

    def _one(self) -> WindowState:
        if len(self._windows) > 1:
            raise ValueError(f"the record is in {len(self._windows)} windows of "
                             f"{self._name!r}: iterate ctx.window({self._name!r})")  # fmt: skip
        return WindowState(self._ctx, self._time, self._name, self._windows[0])


def _late(time: WindowTimes, name: str, ctx: RecordContext, window: Window) -> None:
    """The record of ``ctx`` is late for window table ``name``: apply its policy (once per
    record and table)."""
    if name in time.late_seen:
        return
    time.late_seen.add(name)
    policy = time.edge(name).late
    if policy == "drop":
        time.late_dropped += 1
    elif policy == "dead-letter":
        time.late_records.append((name, ctx._message))
    else:
        policy(ctx, ctx._value, window)


def open_windows(time: WindowTimes, name: str, at: int) -> tuple[list[Window], bool]:
    """The windows of a record at ``at`` in window table ``name`` still open by the stream
    time, and whether it was late for all."""
    stream, fixed = time.stream_time, time.fixed.get(name)
    if fixed is not None:  # (a hot path: a call per record of a windowed group)
        if stream >= MAX_TIME:  # (a window's close time is at most MAX_TIME)
            return [], True
        of, grace = fixed
        windows = of(at)
        if windows[0].end + grace > stream:  # (earliest first: all open)
            return windows, False
        windows = [w for w in windows if w.end + grace > stream]
        return windows, not windows
    edge = time.edge(name)  # (a session: fixed holds every other declared window)
    assert isinstance(edge.spec, Session)
    late = min(at + 1 + edge.index_grace, MAX_TIME) <= stream
    return ([] if late else [Window(at, at + 1)]), late


def sessions(time: WindowTimes, name: str, key: str, at: int) -> list[tuple[Window, bytes]]:
    """The sessions of ``key`` in window table ``name`` that a record at ``at`` joins, with
    their values."""
    edge = time.edge(name)
    assert isinstance(edge.spec, Session)
    gap, found = edge.spec.gap, []
    for row, value in time.window_rows[name].items(f"w{key}@"):
        try:
            owner, start, end = decode_composite(row[1:])
        except ValueError:
            continue
        if owner == key and start - gap <= at < end + gap:
            found.append((Window(start, end), value))
    return found
