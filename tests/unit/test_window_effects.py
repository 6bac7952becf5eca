"""Under whole commits (exactly-once) an engine call leaves one changelog row per window it
changed (``goka.time.window_tables.WindowTables.window_effects``), made at the end of the
call, not a row per update: each must be what the row-by-row rows of the same records end
with (the last value of the window, attributed to the last record that changed it), for
windows updated the fast way (kept in memory: ``goka.time.window_update``) or read from the
store, and records that fail after their updates (skipped) leave nothing."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from goka.group.effects import WINDOW
from goka.group.engine import Engine
from goka.storage import MemoryStorage, WriteBatch
from goka.time.pending_rows import section_graces
from goka.time.rows import section_rows
from goka.time.window_cache import WINDOW_CACHE
from tests.unit.test_written_windows import GRAPH, IN, TOPICS

Row = tuple[str, str]  # (changelog topic, window row)


def changelog(events: list[tuple[str, int, str]], size: int, cache: int,
              whole: bool) -> list[dict[Row, tuple[bytes | None, int]]]:  # fmt: skip
    """Run ``events`` in calls of ``size`` records through one engine (``whole``: whole
    commits) keeping ``cache`` windows, the store written after each call as a commit would;
    return each call's window rows, the last of each: ``(topic, row) -> (value, offset of the
    record it is attributed to)``; check each row-by-row call has one row per update."""
    store, graces = MemoryStorage("created-table"), section_graces(GRAPH)
    sections = {n: store.section(t) for n, t in TOPICS.items()}
    engine = Engine(GRAPH, 0, store=store.get, timers=store.section(GRAPH.group.timers),
                    windows=sections, clock=lambda: 0, window_cache=cache, on_error="skip",
                    whole_commits=whole)  # fmt: skip
    calls = []
    for first in range(0, len(events), size):
        messages = [(IN, first + i, k.encode(), p.encode(), t, None)
                    for i, (k, t, p) in enumerate(events[first : first + size])]  # fmt: skip
        result = engine.process(messages)
        rows: dict[Row, tuple[bytes | None, int]] = {}
        seen = 0
        for kind, topic, key, value, _, source in result.effects:
            if kind == WINDOW:
                seen += 1
                assert not whole or (topic, key) not in rows, f"two rows of {key} in one call"
                rows[topic, key] = (value, source[1])
                rows_of = section_rows(store.section(topic).get, key, value, grace=graces[topic])
                store.write(WriteBatch(sections={topic: rows_of}))
        calls.append(rows)
        engine.committed()
    return calls


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["u", "v", "w"]), st.integers(0, 90_000),
                          st.sampled_from(["/", "/", "/", "x", "f"])), min_size=5, max_size=80),
       st.integers(1, 30), st.sampled_from([WINDOW_CACHE, 2, 0]))  # fmt: skip
def test_a_call_under_whole_commits_writes_each_window_once_with_what_row_by_row_ends_with(
    events: list[tuple[str, int, str]], size: int, cache: int
) -> None:
    timed = [(key, max(0, i * 10_000 - back), page) for i, (key, back, page) in enumerate(events)]
    row_by_row = changelog(timed, size, cache, whole=False)
    coalesced = changelog(timed, size, cache, whole=True)
    assert coalesced == row_by_row


def test_a_failed_record_leaves_no_row_and_an_earlier_record_keeps_its_own() -> None:
    """Two records update the same windows, the second fails after its updates (skipped):
    the rows are the first's, attributed to it."""
    events = [("u", 10_000, "/"), ("u", 20_000, "f"), ("v", 30_000, "f")]
    (rows,) = changelog(events, 3, WINDOW_CACHE, whole=True)
    assert rows and all(value == b"1" and offset == 0 for value, offset in rows.values())
    assert {key.split("@")[0] for _, key in rows} == {"u"}


def test_the_fast_way_is_taken_for_windows_kept_in_memory(monkeypatch: Any) -> None:
    """A dense run (three keys, many records per window) writes most updates the fast way:
    the general way is taken only for a window's first update in an engine."""
    from goka.time import window_tables

    general = 0
    original = window_tables.WindowTables.write_window_row

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal general
        general += 1
        original(self, *args, **kwargs)

    monkeypatch.setattr(window_tables.WindowTables, "write_window_row", counted)
    events = [(k, i * 1_000, "/") for i in range(300) for k in ("u", "v", "w")]
    changelog(events, 100, WINDOW_CACHE, whole=True)
    windows = 3 * (300_000 // 60_000) * 3  # keys x minutes x (one tumbling + two hopping)
    assert general <= windows + 3 * 3, general  # (+ the hopping table's first window)
