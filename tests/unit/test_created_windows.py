"""Window rows over engines made at random points of a stream (each a batch of another run),
against a plain-Python reference: the reads an engine does without (goka.created_windows: a
window closing after the last close index row its table held when the engine was made is new
unless the engine created it, so a record opening it does not search the store), and the rows
a batch leaves in the partition's pending rows (goka.pending_rows: taken at once from the
batch's last values, they are what replaying its changelog rows in order leaves)."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from goka import (
    Context,
    Hopping,
    Int64Codec,
    StringCodec,
    Tumbling,
    define_group,
    input,
    persist,
    window,
)
from goka.context import TIMER, WINDOW
from goka.created_windows import CreatedWindows
from goka.engine import Engine
from goka.pending_rows import PendingRows
from goka.storage import MemoryStorage, WriteBatch
from goka.timekeeping import close_key, composite, section_graces, section_rows

IN, MINUTE = "views", 60_000
GRACE = 20 * 1000  # the tumbling table's


def count(ctx: Context[Any], page: str) -> None:
    if page == "x":  # deletes its minute window (a later record opens it again)
        for minute in ctx.window("minute"):
            minute.delete()
        return
    for name in ("minute", "hops"):
        ctx.window(name).update(lambda n: (n or 0) + 1)


GRAPH = define_group(
    "created", input(IN, StringCodec(), count),
    window("minute", Tumbling(minutes=1), Int64Codec(), grace=GRACE),
    window("hops", Hopping(2 * MINUTE, MINUTE), Int64Codec()), persist(Int64Codec()),
)  # fmt: skip
TOPICS = {n: e.topic for n, e in GRAPH.windows.items()}


class CountingSection:
    """A committed section that counts the reads that found nothing."""

    def __init__(self, section: Any) -> None:
        self.section, self.misses = section, 0

    def get(self, key: str) -> bytes | None:
        found: bytes | None = self.section.get(key)
        self.misses += found is None
        return found

    def items(self, **bounds: Any) -> Any:
        return self.section.items(**bounds)


def run(batches: list[list[tuple[str, int, str]]]) -> tuple[dict[str, dict[str, int]], int]:
    """Process ``batches`` of (key, event time, page) records, each with a new engine over
    what the ones before wrote, as a restore replays the changelog (row by row); return each
    window table's rows and the store reads of window rows that found nothing. Each batch's
    rows also go through the partition's pending rows into another store, which must end
    the same, close index and timers rows included."""
    store, taken = MemoryStorage("created-table"), MemoryStorage("created-table")
    graces, misses, offset = section_graces(GRAPH), 0, 0
    for batch in batches:
        sections = {n: CountingSection(store.section(t)) for n, t in TOPICS.items()}
        engine = Engine(GRAPH, 0, store=store.get, timers=store.section(GRAPH.group.timers),
                        windows=sections, clock=lambda: 0)  # fmt: skip
        messages = [(IN, offset + i, k.encode(), p.encode(), t, None)
                    for i, (k, t, p) in enumerate(batch)]  # fmt: skip
        offset += len(batch)
        result = engine.process(messages)
        pending = PendingRows({t: taken.section(t) for t in graces}, graces, generations=True)
        for kind, topic, key, value, _, _ in result.effects:
            if kind in (TIMER, WINDOW):
                old = store.section(topic).get
                rows = section_rows(old, key, value, grace=graces[topic])
                store.write(WriteBatch(sections={topic: rows}))
            if kind == TIMER:
                pending.apply(topic, key, value)
        pending.apply_windows(result.windows)
        taken.write(WriteBatch(sections=pending.seal()))
        misses += sum(s.misses for s in sections.values())
    for topic in graces:
        assert dict(taken.section(topic).items()) == dict(store.section(topic).items())
    tables = {n: {k[1:]: int(v) for k, v in store.section(t).items(prefix="w")}
              for n, t in TOPICS.items()}  # fmt: skip
    return tables, misses


def reference(
    batches: list[list[tuple[str, int, str]]],
) -> tuple[dict[str, dict[str, int]], int]:
    """The window tables, computed here; and the reads that may find nothing: of a window the
    table does not hold, closing no later than the last it held when the batch began."""
    tables: dict[str, Counter[str]] = {"minute": Counter(), "hops": Counter()}
    closes = {"minute": {}, "hops": {}}  # type: dict[str, dict[str, int]]
    stream, allowed = -1, 0
    for batch in batches:
        last = {n: max(c.values(), default=-1) for n, c in closes.items()}
        for key, at, page in batch:
            stream = max(stream, at)
            first = at - at % MINUTE
            if page == "x":  # (a delete reads the window too)
                row, close = composite(key, first, first + MINUTE), first + MINUTE + GRACE
                if close > stream:
                    allowed += row not in tables["minute"] and close <= last["minute"]
                    tables["minute"].pop(row, None)
                    closes["minute"].pop(row, None)
                continue
            for name, starts, size, grace in (("minute", [first], MINUTE, GRACE),
                                              ("hops", [first - MINUTE, first], 2 * MINUTE, 0)):  # fmt: skip
                for start in starts:
                    if start + size + grace <= stream:
                        continue  # closed: late for this window
                    row = composite(key, start, start + size)
                    if row not in tables[name]:
                        allowed += start + size + grace <= last[name]
                    tables[name][row] += 1
                    closes[name][row] = start + size + grace
    return {n: dict(c) for n, c in tables.items()}, allowed


records = st.lists(st.tuples(st.sampled_from(["u", "v", "w"]), st.integers(0, 10 * MINUTE),
                             st.sampled_from(["/", "/", "/", "x"])), min_size=1, max_size=60)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(records, st.lists(st.integers(0, 60), max_size=5), st.integers(0, 90_000))
def test_engines_made_anywhere_in_a_stream_leave_the_reference_windows_reading_only_old_ones(
    events: list[tuple[str, int, str]], cuts: list[int], disorder: int
) -> None:
    """Times drift forward by the record's place (so windows close) and back by up to
    ``disorder`` (so records are late, or fall into windows that were open when an engine
    was made): each engine reads the store only for windows that may predate it."""
    timed = [(key, max(0, i * 20_000 - t % (disorder + 1)), page)
             for i, (key, t, page) in enumerate(events)]  # fmt: skip
    bounds = sorted({0, len(timed), *(c for c in cuts if c < len(timed))})
    batches = [timed[a:b] for a, b in itertools.pairwise(bounds)]
    tables, misses = run(batches)
    expected, allowed = reference(batches)
    assert tables == expected
    assert misses <= allowed


def test_a_new_window_is_not_read_and_an_older_one_is() -> None:
    """One engine opens [0, 1m); the next adds to it (read: it closes no later than the
    table's last close index row) and opens [1m, 2m) without reading the store."""
    batches = [[("u", 10_000, "/"), ("u", 50_000, "/")], [("u", 55_000, "/"), ("u", 70_000, "/")]]
    tables, misses = run(batches)
    assert tables["minute"] == {composite("u", 0, MINUTE): 3,
                                composite("u", MINUTE, 2 * MINUTE): 1}  # fmt: skip
    assert misses == 0  # [-1m, 1m) and [0, 2m) of the hopping table opened by the first


def test_created_windows_know_only_what_closes_after_the_last_index_row() -> None:
    store = MemoryStorage("t")
    old = composite("u", 0, MINUTE)
    store.write(WriteBatch(sections={"s": {"w" + old: b"1", close_key(MINUTE, old): b""}}))
    created = CreatedWindows(store.section("s"))
    new, other = composite("u", MINUTE, 2 * MINUTE), composite("v", MINUTE, 2 * MINUTE)
    assert created.after == MINUTE
    assert not created.absent(old, MINUTE)  # may exist: it does
    assert created.absent(new, 2 * MINUTE)
    created.created(new, 2 * MINUTE)
    assert not created.absent(new, 2 * MINUTE) and created.absent(other, 2 * MINUTE)
    created.closed(2 * MINUTE)  # closed: never read by a record again
    assert created.absent(new, 2 * MINUTE)
    assert CreatedWindows(MemoryStorage("t").section("s")).after == -1
