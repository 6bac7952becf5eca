"""Window rows over engines made at random points of a stream (each a batch of another run),
against a plain-Python reference: the reads an engine does without (goka.time.window_cache: a
window closing after the last close index row its table held when the engine was made exists
only if the engine wrote it, and then it knows the value, so a record does not search the
store for it), and the rows a batch leaves in the partition's pending rows
(goka.time.pending_rows: taken at once from the batch's last values, they are what replaying its
changelog rows in order leaves)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
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
from goka.errors import ConfigurationError
from goka.group.effects import TIMER, WINDOW
from goka.group.engine import Engine
from goka.spark.config import ProcessorConfig
from goka.storage import MemoryStorage, WriteBatch
from goka.time.overlay import Journal, rollback
from goka.time.pending_rows import PendingRows, section_graces
from goka.time.rows import close_key, composite, section_rows
from goka.time.window_cache import UNKNOWN, WINDOW_CACHE, WrittenWindows

IN, MINUTE = "views", 60_000
GRACE = 20 * 1000  # the tumbling table's


def count(ctx: Context[Any], page: str) -> None:
    if page == "x":  # deletes its minute window (a later record opens it again)
        for minute in ctx.window("minute"):
            minute.delete()
        return
    for name in ("minute", "hops"):
        ctx.window(name).update(lambda n: (n or 0) + 1)
    if page == "f":  # fails after its updates: under on_error="skip", they are undone
        raise ValueError("a failing record")


GRAPH = define_group(
    "created", input(IN, StringCodec(), count),
    window("minute", Tumbling(minutes=1), Int64Codec(), grace=GRACE),
    window("hops", Hopping(2 * MINUTE, MINUTE), Int64Codec()), persist(Int64Codec()),
)  # fmt: skip
TOPICS = {n: e.topic for n, e in GRAPH.windows.items()}


class CountingSection:
    """A committed section that counts its reads."""

    def __init__(self, section: Any) -> None:
        self.section, self.reads = section, 0

    def get(self, key: str) -> bytes | None:
        self.reads += 1
        found: bytes | None = self.section.get(key)
        return found

    def items(self, **bounds: Any) -> Any:
        return self.section.items(**bounds)


Batch = tuple[bool, list[tuple[str, int, str]]]  # a new engine?, (key, event time, page)


def run(batches: list[Batch], cache: int = WINDOW_CACHE,
        on_error: str = "fail") -> tuple[dict[str, dict[str, int]], int]:  # fmt: skip
    """Process ``batches`` of records, each by the engine before or, if it says so, a new
    one (a restart) over what the ones before wrote, as a restore replays the changelog (row
    by row), keeping ``cache`` windows, under ``on_error``; return each window table's rows and the store reads
    of window rows. Each
    batch's rows also go through the partition's pending rows into another store, which
    must end the same, close index and timers rows included."""
    store, taken = MemoryStorage("created-table"), MemoryStorage("created-table")
    graces, reads, offset = section_graces(GRAPH), 0, 0
    sections = {n: CountingSection(store.section(t)) for n, t in TOPICS.items()}
    engine = None
    for new, batch in batches:
        if new or engine is None:
            reads += sum(s.reads for s in sections.values())
            sections = {n: CountingSection(store.section(t)) for n, t in TOPICS.items()}
            engine = Engine(GRAPH, 0, store=store.get, timers=store.section(GRAPH.group.timers),
                            windows=sections, clock=lambda: 0, window_cache=cache,
                            on_error=on_error)  # fmt: skip
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
    reads += sum(s.reads for s in sections.values())
    for topic in graces:
        assert dict(taken.section(topic).items()) == dict(store.section(topic).items())
    tables = {n: {k[1:]: int(v) for k, v in store.section(t).items(prefix="w")}
              for n, t in TOPICS.items()}  # fmt: skip
    return tables, reads


def reference(batches: list[Batch]) -> tuple[dict[str, dict[str, int]], int]:
    """The window tables, computed here; and the reads of the store an engine may need: of
    a window that closes no later than the last its table held when the engine was made,
    once per engine."""
    tables: dict[str, Counter[str]] = {"minute": Counter(), "hops": Counter()}
    closes = {"minute": {}, "hops": {}}  # type: dict[str, dict[str, int]]
    stream, allowed = -1, 0
    last = dict.fromkeys(closes, -1)
    for new, batch in batches:
        if new:
            last = {n: max(c.values(), default=-1) for n, c in closes.items()}
            read: set[tuple[str, str]] = set()  # an engine reads an old window once
        for key, at, page in batch:
            now = max(stream, at)
            first = at - at % MINUTE
            if page == "x":  # (a delete reads the window too)
                row, close = composite(key, first, first + MINUTE), first + MINUTE + GRACE
                if close > now:
                    if close <= last["minute"] and ("minute", row) not in read:
                        allowed += 1
                        read.add(("minute", row))
                    tables["minute"].pop(row, None)
                    closes["minute"].pop(row, None)
            for name, starts, size, grace in (("minute", [first], MINUTE, GRACE),
                                              ("hops", [first - MINUTE, first], 2 * MINUTE, 0)):  # fmt: skip
                for start in starts if page != "x" else []:
                    if start + size + grace <= now:
                        continue  # closed: late for this window
                    row = composite(key, start, start + size)
                    if start + size + grace <= last[name] and (name, row) not in read:
                        allowed += 1
                        read.add((name, row))
                    if page != "f":
                        tables[name][row] += 1
                        closes[name][row] = start + size + grace
            stream = now  # (a skipped record's event time moves it too)
    return {n: dict(c) for n, c in tables.items()}, allowed


records = st.lists(st.tuples(st.sampled_from(["u", "v", "w"]), st.integers(0, 90_000),
                             st.sampled_from(["/", "/", "/", "x", "f"])), min_size=10, max_size=60)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(records, st.integers(1, 12), st.lists(st.booleans(), min_size=1, max_size=8),
       st.sampled_from([WINDOW_CACHE, WINDOW_CACHE, 3, 0]), st.sampled_from(["fail", "skip"]))  # fmt: skip
def test_engines_made_anywhere_in_a_stream_leave_the_reference_windows_reading_only_old_ones(
    events: list[tuple[str, int, str]],
    size: int,
    restarts: list[bool],
    cache: int,
    on_error: str,
) -> None:
    """Times drift forward by the record's place (so windows close) and back by up to 90 s
    (so records are late, or fall into windows that were open when an engine was made or an
    earlier batch of it ended); batches are ``size`` records, and ``restarts`` says which a
    new engine takes: each reads the store only for windows that may predate it (unless it
    keeps fewer windows than the test makes: ``cache``; the results are the same). Records
    that fail after their updates are skipped (``on_error="skip"``: their changes undone)
    or, under ``"fail"``, not sent."""
    if on_error == "fail":
        events = [(key, back, "/" if page == "f" else page) for key, back, page in events]
    timed = [(key, max(0, i * 10_000 - back), page) for i, (key, back, page) in enumerate(events)]
    batches = [(i == 0 or restarts[i % len(restarts)], timed[a : a + size])
               for i, a in enumerate(range(0, len(timed), size))]  # fmt: skip
    tables, reads = run(batches, cache, on_error)
    expected, allowed = reference(batches)
    assert tables == expected
    assert reads <= allowed or cache < WINDOW_CACHE


def test_a_window_the_engine_wrote_is_not_read_and_an_older_one_is() -> None:
    """One engine opens [0, 1m) and adds to it; the next adds to it (read: it closes no
    later than the table's last close index row), opens [1m, 2m) and adds to it without
    reading the store."""
    batches = [(True, [("u", 10_000, "/"), ("u", 50_000, "/")]),
               (True, [("u", 55_000, "/"), ("u", 70_000, "/"), ("u", 80_000, "/")])]  # fmt: skip
    tables, reads = run(batches)
    assert tables["minute"] == {composite("u", 0, MINUTE): 3,
                                composite("u", MINUTE, 2 * MINUTE): 2}  # fmt: skip
    assert reads == 3  # [0, 1m); [-1m, 1m) and [0, 2m) of the hopping table


def test_written_windows_know_only_what_closes_after_the_last_index_row() -> None:
    store = MemoryStorage("t")
    old = composite("u", 0, MINUTE)
    store.write(WriteBatch(sections={"s": {"w" + old: b"1", close_key(MINUTE, old): b""}}))
    written = WrittenWindows(store.section("s"), limit=2)
    new, other = composite("u", MINUTE, 2 * MINUTE), composite("v", MINUTE, 2 * MINUTE)
    assert written.after == MINUTE
    assert written.get(old, MINUTE) is UNKNOWN  # in the store
    written.learn(old, MINUTE, b"1")  # read from there: known from now on
    assert written.get(old, MINUTE) == b"1"
    written.wrote(old, MINUTE, b"2", None)
    assert written.get(old, MINUTE) == b"2"
    older = composite("v", 0, MINUTE)
    written.learn(older, MINUTE, None)  # read: absent
    assert written.get(older, MINUTE) is None
    written.forget(store.section("s"))
    assert written.get(new, 2 * MINUTE) is None  # new: none yet
    journal: Journal = []
    written.wrote(new, 2 * MINUTE, b"1", journal)
    assert written.get(new, 2 * MINUTE) == b"1" and written.get(other, 2 * MINUTE) is None
    rollback(journal)  # the record failed
    assert written.get(new, 2 * MINUTE) is None
    written.wrote(new, 2 * MINUTE, b"1", None)
    written.wrote(other, 2 * MINUTE, None, None)  # deleted
    third = composite("u", 2 * MINUTE, 3 * MINUTE)
    written.wrote(third, 3 * MINUTE, b"1", None)  # past the limit: the two go to the store
    assert written.after == 2 * MINUTE and written.get(new, 2 * MINUTE) is UNKNOWN
    assert written.get(third, 3 * MINUTE) == b"1"
    written.closed(3 * MINUTE)  # closed: never read by a record again
    assert written.get(third, 3 * MINUTE) is None
    written.forget(store.section("s"))  # a failed batch: from the store again
    assert written.after == MINUTE and written.get(third, 3 * MINUTE) is None
    assert WrittenWindows(MemoryStorage("t").section("s")).after == -1


@pytest.mark.parametrize("bad", [-1, True, 1.5])
def test_a_bad_window_cache_fails_at_declaration(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match=f"window_cache must be an int >= 0, got {bad}"):
        ProcessorConfig(GRAPH, "localhost:9092", window_cache=bad)
    assert ProcessorConfig(GRAPH, "localhost:9092", window_cache=0).task_config().window_cache == 0


def test_written_windows_keep_at_most_their_limit_also_of_one_close_time() -> None:
    """A tumbling table's windows of a minute all close at once: the limit counts windows,
    not close times; past it, all kept go to the store (read from there), this one too."""
    written = WrittenWindows(MemoryStorage("t").section("s"), limit=2)
    rows = [composite(k, 0, MINUTE) for k in ("u", "v", "w")]
    for row in rows:
        written.wrote(row, MINUTE, b"1", None)
    assert written.after == MINUTE
    assert all(written.get(row, MINUTE) is UNKNOWN for row in rows)
    later = composite("u", MINUTE, 2 * MINUTE)
    written.wrote(later, 2 * MINUTE, b"1", None)
    assert written.get(later, 2 * MINUTE) == b"1"
