"""Time section rows written since the last commit, over the committed sections: what a
continuous partition's engine reads between commits (an epoch runs many batches per commit),
and what its commits write (:mod:`goka.processing.epoch_partition`)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from typing import TYPE_CHECKING

from goka.time.overlay import Section
from goka.time.rows import section_rows

if TYPE_CHECKING:
    from goka.group.graph import GroupGraph

__all__ = ["PendingRows", "PendingView", "let_go", "section_graces"]


def section_graces(graph: GroupGraph) -> dict[str, int | None]:
    """The time sections of ``graph`` by changelog topic, with the grace their close index
    adds to a window's end (None: the timers section)."""
    graces: dict[str, int | None] = {graph.group.timers: None}
    for edge in graph.windows.values():
        graces[edge.topic] = edge.index_grace
    return graces


def let_go(visible: dict[str, bytes | None], written: Mapping[str, bytes | None],
           later: Iterable[Mapping[str, bytes | None]]) -> None:  # fmt: skip
    """``written`` rows are in the store now: drop from ``visible`` (what is read before the
    store) those that no ``later`` generation changed (its value is the one to read)."""
    gone = set(written)
    for generation in later:
        gone -= generation.keys()
    for key in gone:
        del visible[key]


class PendingRows:
    """Section rows written since the last commit, over the committed sections: what the
    engine reads between commits (an epoch runs many batches per commit), and what the next
    commit writes. Changelog rows come in with :meth:`apply`, which adds the index rows
    derived from them (:func:`section_rows`).

    With ``generations``, a commit :meth:`seal`-s the rows since the last one (a generation)
    and writes them once their outputs are acknowledged; meanwhile the rows stay readable
    here, and the next generation is applied on top. :meth:`written` lets go of those no
    later generation changed (they are read from the sections then).

    Args:
        sections: the committed sections, by changelog topic.
        graces: each topic's window grace (None: the timers section).
    """

    def __init__(self, sections: Mapping[str, Section], graces: Mapping[str, int | None], *,
                 generations: bool = False) -> None:  # fmt: skip
        self._sections, self._graces, self._generations = dict(sections), dict(graces), generations
        self.rows: dict[str, dict[str, bytes | None]] = {t: {} for t in self._sections}
        self.fresh = self._generation()  # the rows since the last seal
        self._committed: dict[str, dict[str, bytes | None]] = {t: {} for t in self._sections}

    def view(self, topic: str) -> PendingView:
        """The section of ``topic`` as the engine sees it (what it reads of the committed
        section is kept until the commit: :meth:`apply` reads the same rows again)."""
        return PendingView(self._sections[topic], self.rows[topic], self._committed[topic])

    def apply(self, topic: str, key: str, value: bytes | None) -> None:
        """Changelog row ``key`` = ``value`` of ``topic``, with its derived rows."""
        rows = section_rows(partial(self._old, topic), key, value, grace=self._graces[topic])
        self.rows[topic].update(rows)
        if self._generations:
            self.fresh[topic].update(rows)

    def apply_windows(self, windows: Mapping[str, Mapping[str, bytes | None]]) -> None:
        """A batch's window section rows (the last value of each, None: deleted, by topic:
        :attr:`goka.group.effects.BatchResult.windows`): its window rows and the close index rows
        of the windows it created or deleted, what :meth:`apply` of each of the batch's
        window changelog rows in order leaves."""
        for topic, changes in windows.items():
            self.rows[topic].update(changes)
            if self._generations:
                self.fresh[topic].update(changes)

    def _old(self, topic: str, row: str) -> bytes | None:
        """``row`` of ``topic`` as the last batch left it."""
        pending = self.rows[topic]
        if row in pending:
            return pending[row]
        committed = self._committed[topic]
        if row not in committed:
            committed[row] = self._sections[topic].get(row)
        return committed[row]

    def _generation(self) -> dict[str, dict[str, bytes | None]]:
        return {t: {} for t in self._sections}

    def seal(self) -> dict[str, dict[str, bytes | None]]:
        """The rows since the last seal (by topic), to be written; the next ones begin.

        Raises:
            ValueError: made without ``generations``.
        """
        if not self._generations:
            raise ValueError("PendingRows(generations=False) keeps no generations to seal")
        sealed, self.fresh = self.fresh, self._generation()
        return sealed

    def written(self, sealed: Mapping[str, Mapping[str, bytes | None]],
                later: list[Mapping[str, Mapping[str, bytes | None]]]) -> None:  # fmt: skip
        """The ``sealed`` rows are in the sections: forget those that no ``later`` sealed
        generation nor the fresh rows changed, and what was read of the sections."""
        for topic, rows in sealed.items():
            let_go(self.rows[topic], rows, [self.fresh[topic], *(g[topic] for g in later)])
        self.forget_reads()

    def forget_reads(self) -> None:
        """Forget what was read of the sections (they were written)."""
        for read in self._committed.values():
            read.clear()

    def clear(self) -> None:
        """Forget the rows (committed)."""
        for rows in (*self.rows.values(), *self.fresh.values(), *self._committed.values()):
            rows.clear()


class PendingView:
    """A committed section with pending rows on top (reads only)."""

    __slots__ = ("_committed", "_pending", "_section")

    def __init__(self, section: Section, pending: dict[str, bytes | None],
                 committed: dict[str, bytes | None] | None = None) -> None:  # fmt: skip
        self._section, self._pending = section, pending
        self._committed = {} if committed is None else committed

    def layers(self) -> tuple[dict[str, bytes | None], dict[str, bytes | None],
                              Callable[[str], bytes | None]]:  # fmt: skip
        """The pending rows, the committed rows read so far (a cache kept until the commit)
        and the committed section's reader: what :meth:`get` reads, in order."""
        return self._pending, self._committed, self._section.get

    def get(self, key: str) -> bytes | None:
        """The row's value, pending or committed."""
        pending = self._pending
        if key in pending:
            return pending[key]
        committed = self._committed
        if key in committed:
            return committed[key]
        value = committed[key] = self._section.get(key)
        return value

    def items(
        self, *, start: str | None = None, stop: str | None = None, prefix: str | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[str, bytes]]:  # fmt: skip
        """Rows in key order, pending ones merged in (lazily: a section may be large)."""
        committed = self._section.items(start=start, stop=stop, prefix=prefix, reverse=reverse)
        if not self._pending:
            yield from committed
            return
        pending = sorted(
            (k, v) for k, v in self._pending.items()
            if (prefix is None or k.startswith(prefix)) and (start is None or k >= start)
            and (stop is None or k < stop)
        )  # fmt: skip
        if reverse:
            pending.reverse()
        first, later = (0, 1) if not reverse else (1, 0)  # at equal keys, the pending row
        merged = heapq.merge(
            ((k, first, v) for k, v in pending), ((k, later, v) for k, v in committed),
            reverse=reverse,
        )  # fmt: skip
        last = None
        for key, _, value in merged:
            if key == last:
                continue
            last = key
            if value is not None:
                yield key, value
