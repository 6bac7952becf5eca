"""The hot path of a windowed group: a record aggregating into windows that exist already.

``ctx.window(name).update(change)`` reads each open window of the record, changes its value
and writes it back. A window this engine wrote is kept in memory until it closes
(:mod:`goka.time.window_cache`), and in a dense stream (many records per key and window) nearly
every update finds its window there: such an update only swaps the value in three mappings (the
batch's changes, the cache, and the changelog row to come), each change journalled so that a
failed record is undone. With ``goka._speedups`` built this loop runs in C
(``goka/_window_update.c``, Int64Codec's plain digits read and written there too); the Python
loop here is its reference. Whatever else (a new window, a window read from the store, one closing
at the end of time) takes :meth:`~goka.time.window_tables.WindowTables.write_window_row`'s way,
which also keeps the queues of what closes and expires.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from goka._accel import speedups
from goka.codec import Int64Codec
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
    ``time`` began (its overlays, journal and effects are the call's): ``goka._speedups``'
    ``WindowUpdater`` where it is built, else the Python reference below."""
    by_close, grace = time._written[name].by_close, time._graces[name]
    changes, journal = time.window_rows[name].changes, time.journal
    codec = time.edge(name).codec
    decode, encode, read = codec.decode, codec.encode, time.window_reader(name)
    write, effects, topic = time.write_window_row, time.effects, time._topics[name]
    sources = time._sources[name] if time.whole_commits else None

    def general(row: str, end: int, change: Callable[[Any], Any], source: Any) -> None:
        """A window not kept in memory (or kept as absent): read, changed and written the
        general way."""
        found = read(row, end)
        value = change(None if found is None else decode(found))
        write(name, row, encode(value), source, end, found is not None)

    if speedups is not None:
        return speedups.WindowUpdater(  # type: ignore[no-any-return]
            suffix=_suffix, grace=grace, by_close=by_close, changes=changes, journal=journal,
            decode=decode, encode=encode, int64=type(codec) is Int64Codec, general=general,
            effects=effects, kind=WINDOW, topic=topic, sources=sources, absent=ABSENT,
        ).update  # fmt: skip
    suffixes: dict[int, str] = {}  # a window's part of its rows' keys, by its end (one size)

    def update(key: str, windows: Iterable[tuple[int, int]], change: Callable[[Any], Any],
               source: Any) -> None:  # fmt: skip
        for start, end in windows:
            suffix = suffixes.get(end)
            if suffix is None:  # its window's part made once a call
                suffix = suffixes[end] = _suffix(start, end)
            row = key + suffix
            kept = by_close.get(end + grace)  # (never a window closing at the end of time)
            if kept is None or (raw := kept.get(row)) is None:  # (or kept as absent)
                general(row, end, change, source)
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


def _suffix(start: int, end: int) -> str:
    """A window's part of its rows' keys (:func:`goka.time.rows.composite`'s)."""
    return f"@{start:015d}-{end:015d}"
