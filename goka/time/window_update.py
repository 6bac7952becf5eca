"""The hot path of a windowed group: a record aggregating into windows that exist already.

``ctx.window(name).update(change)`` reads each open window of the record, changes its value
and writes it back. A window this engine wrote is kept in memory until it closes
(:mod:`goka.time.window_cache`), and in a dense stream (many records per key and window) nearly
every update finds its window there: such an update only swaps the value in three mappings (the
batch's changes, the cache, and the changelog row to come), each change journalled so that a
failed record is undone. Whatever else (a new window, a window read from the store, one closing
at the end of time) takes :meth:`~goka.time.window_tables.WindowTables.write_window_row`'s way,
which also keeps the queues of what closes and expires.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from goka.group.effects import WINDOW
from goka.time.overlay import ABSENT

if TYPE_CHECKING:
    from goka.time.window_tables import WindowTables

__all__ = ["Updater", "updater"]

#: ``update(key, windows, change, source)``: set each of ``windows`` (``(start, end)`` pairs)
#: of ``key`` to ``change(its value or None)``, attributed to the record ``source``.
Updater = Callable[[str, Iterable[tuple[int, int]], Callable[[Any], Any], Any], None]


def updater(time: WindowTables, name: str) -> Updater:
    """The updater of window table ``name`` (of fixed windows, kept in memory) for the call
    ``time`` began (its overlays, journal and effects are the call's)."""
    by_close, grace = time._written[name].by_close, time._graces[name]
    changes, journal = time.window_rows[name].changes, time.journal
    codec = time.edge(name).codec
    decode, encode, read = codec.decode, codec.encode, time.window_reader(name)
    write, effects, topic = time.write_window_row, time.effects, time._topics[name]
    sources = time._sources[name] if time.whole_commits else None
    suffixes: dict[int, str] = {}  # a window's part of its rows' keys, by its end (one size)

    def update(key: str, windows: Iterable[tuple[int, int]], change: Callable[[Any], Any],
               source: Any) -> None:  # fmt: skip
        for start, end in windows:
            suffix = suffixes.get(end)
            if suffix is None:  # goka.time.rows.composite, its window's part made once a call
                suffix = suffixes[end] = f"@{start:015d}-{end:015d}"
            row = key + suffix
            kept = by_close.get(end + grace)  # (never a window closing at the end of time)
            if kept is None or (raw := kept.get(row)) is None:  # (or kept as absent)
                found = read(row, end)  # the general way
                value = change(None if found is None else decode(found))
                write(name, row, encode(value), source, end, found is not None)
                continue
            data, at = encode(change(decode(raw))), "w" + row
            if journal is not None:
                journal.append((changes, at, changes.get(at, ABSENT)))
                journal.append((kept, row, raw))
            changes[at] = kept[row] = data
            if sources is None:
                effects.append((WINDOW, topic, row, data, None, source))
            else:
                if journal is not None:
                    journal.append((sources, row, sources.get(row, ABSENT)))
                sources[row] = source

    return update
