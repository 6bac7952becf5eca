"""Which windows of a window table a partition created: reads it can do without.

A record of a windowed group reads each of its windows before it aggregates into it, and
most of those reads find nothing: in a tumbling table nearly every record of a key opens a
new window. A read that finds nothing still searches the store (its memory table and every
level's filter), so it costs as much as one that finds a value. :class:`CreatedWindows`
answers most of them without the store: every window that exists has a close index row
(``c<close><window>``, :func:`goka.timekeeping.close_key`), so a window closing after the
last index row the table had when it was first read did not exist then; if it exists now,
this partition's engine created it since, and noted it here.
"""

from __future__ import annotations

from collections.abc import Callable

from goka.timekeeping import DIGITS, MAX_TIME, Overlay, Section

__all__ = ["CreatedWindows", "reader"]


class CreatedWindows:
    """The windows a partition's engine created in one window table of fixed windows (see
    the module docstring).

    Only the engine writes the table while this object lives (it is made after the store
    was recovered, with the engine), so a window closing after :attr:`after` exists only if
    :meth:`created` was told. Windows are kept until they close (a closed window is never
    read by a record again: :func:`goka.windowing.open_windows`), as hashes of their rows:
    a collision only costs a read.

    Args:
        section: the table's committed section (with what is pending on top).
    """

    __slots__ = ("_by_close", "after")

    def __init__(self, section: Section) -> None:
        last = next(iter(section.items(prefix="c", reverse=True)), None)
        #: The latest close time of a window the table held: windows closing later are new.
        self.after = -1 if last is None else int(last[0][1 : 1 + DIGITS])
        self._by_close: dict[int, set[int]] = {}

    def absent(self, row: str, close: int) -> bool:
        """Whether window ``row`` (its composite key), closing at ``close``, is known not to
        exist (False: it may)."""
        if close <= self.after or close >= MAX_TIME:
            return False
        made = self._by_close.get(close)
        return made is None or hash(row) not in made

    def created(self, row: str, close: int) -> None:
        """Window ``row``, closing at ``close``, was created (it may be undone: then it is
        merely read)."""
        made = self._by_close.get(close)
        if made is None:
            made = self._by_close[close] = set()
        made.add(hash(row))

    def closed(self, stream_time: int) -> None:
        """Forget the windows closed by ``stream_time`` (it never goes back past this)."""
        for close in [c for c in self._by_close if c <= stream_time]:
            del self._by_close[close]


def reader(rows: Overlay, created: CreatedWindows | None,
           grace: int) -> Callable[[str, int], bytes | None]:  # fmt: skip
    """What reads window table ``rows`` (of windows closing ``grace`` after their end; with
    ``created``, a table of fixed windows): ``read(row, end)``, the value of window ``row``
    (its composite key) ending at ``end``, or None."""
    get = rows.get
    if created is None:  # sessions
        return lambda row, end: get("w" + row)
    absent, known = created.absent, rows.known_absent

    def read(row: str, end: int) -> bytes | None:
        if absent(row, end + grace):  # (a hot path: most windows a record reads are new)
            known("w" + row)
            return None
        return get("w" + row)

    return read
