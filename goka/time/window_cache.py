"""The windows a partition's engine wrote or read, with their values: reads it can do without.

A record of a windowed group reads each of its windows before it aggregates into it: in a
tumbling table nearly every record opens a new window (a read that finds nothing, which still
searches the store's memory table and every level's filter), in a hopping table it adds to
windows that earlier records of its key wrote. :class:`WrittenWindows` answers both without
the store. Every window that exists has a close index row (``c<close><window>``,
:func:`goka.time.rows.close_key`), so a window closing after the last index row the table
had when it was first read did not exist then: if it exists now, this engine wrote it since,
and its value is kept here until the window closes. A window that existed before (a batch's
engine meets the windows earlier batches wrote) is read from the store once, and then kept
too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from goka.time.overlay import ABSENT, Journal, Overlay, Section
from goka.time.rows import DIGITS, MAX_TIME

__all__ = ["UNKNOWN", "WINDOW_CACHE", "WrittenWindows", "reader"]

#: How many windows of a table an engine keeps with their values, by default (each about
#: 200 bytes of memory with a short key and value).
WINDOW_CACHE = 250_000

#: What :meth:`WrittenWindows.get` returns for a window it does not know (read the store).
UNKNOWN: Any = object()


class WrittenWindows:
    """The windows a partition's engine wrote or read in one table of fixed windows, with
    their values (see the module docstring).

    Only the engine writes the table while this object lives (it is made after the store was
    recovered, with the engine), so a window closing after :attr:`after` exists only if
    :meth:`wrote` was told; one closing earlier is known once read (:meth:`learn`) or
    written. Windows are kept until they close (a closed window is never read
    by a record again: :func:`goka.time.open_windows.open_windows`; its expiry deletes it, whatever
    it reads); past ``limit`` of them, those kept so far are let go (:attr:`after` moves
    past them: they are read from the store).

    Args:
        section: the table's committed section (with what is pending on top).
        limit: how many windows to keep at most.
    """

    __slots__ = ("_kept", "after", "by_close", "limit")

    def __init__(self, section: Section, *, limit: int = WINDOW_CACHE) -> None:
        self.limit = limit
        #: The windows kept, by close time: ``{row: value}`` (the same dict for the object's
        #: life: :mod:`goka.time.window_update` holds it).
        self.by_close: dict[int, dict[str, bytes | None]] = {}
        self.forget(section)

    def forget(self, section: Section) -> None:
        """Start again from ``section`` (what the engine wrote and kept is not in it: a
        failed batch)."""
        last = next(iter(section.items(prefix="c", reverse=True)), None)
        #: The latest close time of a window the table held: windows closing later are new.
        self.after = -1 if last is None else int(last[0][1 : 1 + DIGITS])
        self.by_close.clear()
        self._kept = 0

    def get(self, row: str, close: int) -> Any:
        """The value of window ``row`` (its composite key), closing at ``close``: bytes,
        None (it does not exist) or :data:`UNKNOWN`."""
        if close >= MAX_TIME:
            return UNKNOWN
        kept = self.by_close.get(close)
        if kept is not None:
            found = kept.get(row, ABSENT)
            if found is not ABSENT:
                return found
        return UNKNOWN if close <= self.after else None

    def learn(self, row: str, close: int, value: bytes | None,
              journal: Journal | None = None) -> None:  # fmt: skip
        """Window ``row``, closing at ``close``, was read from the batch's rows over the store:
        it holds ``value`` (None: it does not exist), recorded in ``journal`` (if given: read
        from the batch's rows, which may hold what a record to be undone wrote, as a try that
        wrote a window, filled the cache, then read it back) to be undone."""
        if close < MAX_TIME and self._kept < self.limit:
            self._kept += 1
            kept = self.by_close.get(close)
            if kept is None:
                kept = self.by_close[close] = {}
            if journal is not None:
                journal.append((kept, row, ABSENT))
            kept[row] = value

    def wrote(self, row: str, close: int, value: bytes | None, journal: Journal | None) -> None:
        """Window ``row``, closing at ``close``, was set to ``value`` (None: deleted); the
        change is recorded in ``journal`` (if given), to be undone."""
        if close >= MAX_TIME:
            return
        kept = self.by_close.get(close)
        previous = ABSENT if kept is None else kept.get(row, ABSENT)
        if previous is ABSENT:
            if self._kept >= self.limit:  # let go of all, this one too: they are in the store
                self.after = max([self.after, close, *self.by_close])
                self.by_close.clear()
                self._kept = 0
                return
            self._kept += 1  # (a row a rollback takes back stays counted)
            if kept is None:
                kept = self.by_close[close] = {}
        assert kept is not None
        if journal is not None:
            journal.append((kept, row, previous))
        kept[row] = value

    def closed(self, stream_time: int) -> None:
        """Let go of the windows closed by ``stream_time`` (it never goes back past this)."""
        for close in [c for c in self.by_close if c <= stream_time]:
            self._kept -= len(self.by_close.pop(close))


def reader(rows: Overlay, written: WrittenWindows | None, grace: int,
           journal: Journal | None = None) -> Callable[[str, int], bytes | None]:  # fmt: skip
    """What reads window table ``rows`` (of windows closing ``grace`` after their end; with
    ``written``, a table of fixed windows): ``read(row, end)``, the value of window ``row``
    (its composite key) ending at ``end``, or None (what it learns journalled in
    ``journal``)."""
    get, changes = rows.get, rows.changes
    if written is None:  # sessions
        return lambda row, end: get("w" + row)
    known, learn = written.get, written.learn

    def read(row: str, end: int) -> bytes | None:
        close = end + grace
        found: bytes | None = known(row, close)  # (a hot path: a read per window)
        if found is UNKNOWN:
            at = "w" + row
            found = get(at)  # (the batch's rows, undone with a failed record, or the store's)
            learn(row, close, found, journal if at in changes else None)
        return found

    return read
