"""Groups that keep time (windows, timers) with async callbacks, retries and timeouts: one
record at a time, each compared with the same group of plain callbacks that never fail."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from goka import (
    CallbackTimeout,
    Context,
    GraphError,
    Hopping,
    Int64Codec,
    JsonCodec,
    ProcessingError,
    Retry,
    Session,
    StringCodec,
    Tumbling,
    define_group,
    input,
    output,
    persist,
    timers,
    window,
)
from goka.group.effects import EMIT, TABLE
from goka.group.engine import Engine
from goka.storage.memory import MemoryStorage
from goka.tester import Tester
from goka.time.rows import Timer
from goka.time.timers import DueQueue

from .fake_kafka import FakeKafka
from .machines import Machine

NOW = 1_800_000_000_000
MINUTE = 60_000


def _visit(ctx: Context[int], page: str) -> None:
    """Counts the key's pages, its 5-minute and 1-minute windows, and every third page of a
    key schedules a timer two minutes on."""
    count = (ctx.value() or 0) + 1
    ctx.set_value(count)
    _aggregate(ctx, page, count)


def _aggregate(ctx: Context[int], page: str, count: int) -> None:
    ctx.window("five").update(lambda n: (n or 0) + 1)
    ctx.window("minute").update(lambda n: (n or 0) + int(page))
    if count % 3 == 0:
        ctx.schedule(ctx.event_time_ms + 2 * MINUTE, f"t{count}")
    if count % 4 == 1:  # (a wall timer due at once: it fires after this record)
        ctx.schedule(dt.timedelta(0), f"w{count}", domain="wall")
    cancelled = count % 5 == 0 and ctx.cancel(f"t{count - count % 3}")  # (often not fired yet)
    ctx.emit("out", ctx.key, f"{page}:{count}:{cancelled}")


def _fired(ctx: Context[int], timer: Timer) -> None:
    ctx.set_value((ctx.value() or 0) + 100)
    ctx.emit("out", ctx.key, f"timer {timer.name} at {timer.at}")


def _late(ctx: Context[int], page: str, window: Any) -> None:
    ctx.emit("out", ctx.key, f"late {page} for {window.start}")


def _later(then: Callable[[Context[int], str, int], None]) -> Callable[..., Any]:
    """An async callback that counts the key, awaits, then does ``then(ctx, page, count)``
    (its state changed before, its windows after the await)."""

    async def callback(ctx: Context[int], page: str) -> None:
        count = (ctx.value() or 0) + 1
        ctx.set_value(count)
        await asyncio.sleep(0)
        then(ctx, page, count)

    return callback


_visit_async = _later(_aggregate)


async def _fired_async(ctx: Context[int], timer: Timer) -> None:
    await asyncio.sleep(0)
    _fired(ctx, timer)


def _graph(callback: Callable[..., Any], fired: Callable[..., Any] = _fired,
           ttl: int | None = None, **settings: Any) -> Any:  # fmt: skip
    return define_group(
        "timed", input("pages", StringCodec(), callback),
        window("five", Hopping(5 * MINUTE, MINUTE), Int64Codec(), retention=10**9),
        window("minute", Tumbling(minutes=1), Int64Codec(), grace=10_000, emit="final",
               output="per-minute", retention=10**9, late=_late),
        output("per-minute", Int64Codec()), output("out", StringCodec()),
        persist(Int64Codec(), ttl=ttl, ttl_domain=None if ttl is None else "stream"),
        timers(fired), **settings,
    )  # fmt: skip


def _records(count: int = 90) -> list[tuple[int, str, str, int]]:
    """(offset, key, page, event time): time moves on with jitter (some records late)."""
    rng = random.Random(5)
    return [(n, f"k{rng.randrange(5)}", str(n), NOW + n * 7_000 + rng.randint(-40_000, 3_000))
            for n in range(count)]  # fmt: skip


def _run(graph: Any, records: list[tuple[int, str, str, int]]) -> dict[str, Any]:
    """What the group did: its outputs, table and windows (all windows closed at the end)."""
    tester = Tester(graph, now=NOW)
    for _, key, page, at in records:
        tester.consume("pages", key, page, timestamp=at)
    tester.advance_stream_time("timed", NOW + 10**7)
    keys = sorted({key for _, key, _, _ in records})
    return {
        "out": [(r.key, r.value) for r in tester.messages("out")],
        "finals": [(r.key, r.value, r.headers) for r in tester.messages("per-minute")],
        "table": tester.table("timed-table"),
        "windows": {(k, n): tester.windows("timed", n, k) for k in keys for n in ("five", "minute")},
    }  # fmt: skip


def test_async_input_and_timers_callbacks_are_awaited_one_at_a_time() -> None:
    records = _records()
    reference = _run(_graph(_visit), records)
    assert any("timer" in str(v) for _, v in reference["out"])  # (timers fired, or nothing shown)
    assert reference["finals"]
    assert _run(_graph(_visit_async, _fired_async), records) == reference


def _flaky(hang: bool = False) -> Callable[..., Any]:
    """The async visit, whose first try of every fourth record changes everything (state,
    windows, a timer, an emit) and then raises (``hang``: then awaits for a minute)."""
    tries: dict[int, int] = {}

    async def flaky(ctx: Context[int], page: str) -> None:
        await _visit_async(ctx, page)
        number = int(page)
        tries[number] = tries.get(number, 0) + 1
        if number % 4 == 0 and tries[number] == 1:
            ctx.schedule(ctx.event_time_ms, "never")  # (due at once, were it kept)
            if hang:
                await asyncio.sleep(60)
            raise ConnectionError(f"page {number}: the service did not answer")

    return flaky


@pytest.mark.parametrize("hang", [False, True], ids=["raises", "cut-by-timeout"])
def test_a_retried_try_starts_from_the_time_windows_timers_and_state_before_it(hang: bool) -> None:
    records = _records(60)
    reference = _run(_graph(_visit), records)
    retry = Retry(attempts=2, backoff=0.0)
    settings: dict[str, Any] = {"timeout": 0.05} if hang else {}
    started = time.monotonic()
    assert _run(_graph(_flaky(hang), retry=retry, **settings), records) == reference
    assert time.monotonic() - started < 30  # (cut: not the minute each hung try would take)


def test_a_cut_callback_fails_its_record_naming_where_and_changes_nothing() -> None:
    records = _records(30)
    hung = {n for n, *_ in records if n % 4 == 0}
    graph = _graph(_flaky(hang=True), timeout=0.05)
    tester = Tester(graph, now=NOW)
    for offset, key, page, at in records:
        if offset not in hung:
            tester.consume("pages", key, page, timestamp=at)
            continue
        with pytest.raises(ProcessingError) as failed:
            tester.consume("pages", key, page, timestamp=at)
        assert isinstance(failed.value.__cause__, CallbackTimeout)
        assert f"pages/0/{offset}" in str(failed.value.__cause__)
        assert f"key {key!r}" in str(failed.value.__cause__)
    tester.advance_stream_time("timed", NOW + 10**7)
    reference = _run(_graph(_visit), [r for r in records if r[0] not in hung])
    assert tester.table("timed-table") == reference["table"]
    assert [(r.key, r.value) for r in tester.messages("out")] == reference["out"]


def _outliving(kind: str) -> Callable[..., Any]:
    """The visit, whose record "4" starts work that outlives the timeout's cut (a thread: of
    its own for a plain callback, awaited with ``asyncio.to_thread`` for an async one); once
    record "10" ran, that work changes the key's state, a window and emits; record "11"
    waits for it."""
    go, done = threading.Event(), threading.Event()

    def later(ctx: Context[int], windows: Any) -> None:
        assert go.wait(10)
        ctx.set_value(1_000)
        windows.update(lambda n: 1_000)
        ctx.emit("out", ctx.key, "from a cut callback")
        done.set()

    def plain(ctx: Context[int], page: str) -> None:
        if page == "4":
            later(ctx, ctx.window("five"))
        go.set() if page == "10" else done.wait(10) if page == "11" else None
        _visit(ctx, page)

    async def awaits(ctx: Context[int], page: str) -> None:
        if page == "4":
            await asyncio.to_thread(later, ctx, ctx.window("five"))
        if page == "10":
            go.set()
        elif page == "11":
            assert await asyncio.to_thread(done.wait, 10)
        await _visit_async(ctx, page)

    return plain if kind == "plain" else awaits


@pytest.mark.parametrize("kind", ["plain", "async"])
def test_what_a_cut_callback_goes_on_doing_changes_nothing(kind: str) -> None:
    records = _records(30)
    messages = [("pages", n, k.encode(), p.encode(), at, None) for n, k, p, at in records]
    engine = _engine(_graph(_outliving(kind), timeout=0.5), on_error="skip")
    found = engine.process(messages)
    assert [m[1] for _, m in found.failed] == [4]
    assert "took longer than its timeout of 0.5 s" in str(found.failed[0][0])
    expected = _engine(_graph(_visit)).process([m for m in messages if m[1] != 4])
    assert _by_record(found.effects) == _by_record(expected.effects)
    assert found.windows == expected.windows


def _by_record(effects: list[Any]) -> list[Any]:
    """Effects in the order of their records (a record's own in any order: records in flight
    replay their windows and timers when released; a call's stream time row is the last
    record's that moved it); state and emits come in offset order."""
    sources = [e[5][1] for e in effects if e[0] in (TABLE, EMIT)]
    assert sources == sorted(sources)
    return sorted((e[5][1], e[0], e[1], e[2], e[3] or b"") for e in effects)


def _sessions(callback: Callable[..., Any], retention: int = 20_000, **settings: Any) -> Any:
    """Sessions of 20 s gap per key (merged by adding), their finals, and a count per key."""
    return define_group(
        "timed", input("pages", StringCodec(), callback), persist(Int64Codec()),
        window("visits", Session(gap=20_000), Int64Codec(), merge=_merge,
               grace=5_000, emit="final", output="per-session", retention=retention,
               late=_late),
        output("per-session", Int64Codec()), output("out", StringCodec()), **settings,
    )  # fmt: skip


MERGES: list[tuple[int, int]] = []


def _merge(a: int, b: int) -> int:
    MERGES.append((a, b))
    return a + b


def _session_visit(ctx: Context[int], page: str) -> None:
    count = (ctx.value() or 0) + 1
    ctx.set_value(count)
    _join_session(ctx, page, count)


def _join_session(ctx: Context[int], page: str, count: int) -> None:
    ctx.window("visits").update(lambda n: (n or 0) + 1)
    again = ctx.window("visits")  # (reads what the record wrote: it merged the sessions)
    ctx.emit("out", ctx.key, f"{page}:{count}:{[(w.start, w.end, w.value()) for w in again]}")


_session_visit_async = _later(_join_session)


def _session_outcome(graph: Any, records: list[tuple[int, str, str, int]],
                     seed: int = 0) -> dict[str, Any]:  # fmt: skip
    tester = Tester(graph, now=NOW, completion_seed=seed)
    for first in range(0, len(records), 20):  # (in flight together)
        tester.consume_many("pages", [(k, p, at) for _, k, p, at in records[first : first + 20]])
    keys = sorted({key for _, key, _, _ in records})
    middle = {k: tester.windows("timed", "visits", k) for k in keys}  # (before they expire)
    tester.advance_stream_time("timed", NOW + 10**7)
    return {
        "out": _per_key((r.key, (r.value or b"").decode()) for r in tester.messages("out")),
        "finals": _per_key((r.key, (r.value, r.headers)) for r in tester.messages("per-session")),
        "table": tester.table("timed-table"),
        "sessions": middle,
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_session_windows_in_flight_merge_as_one_at_a_time_merges_them(seed: int) -> None:
    rng = random.Random(5)  # (3 keys: a key's records about 21 s apart, some late)
    records = [(n, f"k{rng.randrange(3)}", str(n), NOW + n * 7_000 + rng.randint(-40_000, 3_000))
               for n in range(200)]  # fmt: skip
    MERGES.clear()
    reference = _session_outcome(_sessions(_session_visit), records)
    outputs = [v for out in reference["out"].values() for v in out]
    assert any("late" in v for v in outputs) and len(MERGES) > 3  # (sessions bridged)
    assert sum(len(f) for f in reference["finals"].values()) > 20
    for graph in (_sessions(_session_visit_async, concurrency=8),
                  _sessions(_session_visit_async, concurrency=64),
                  _sessions(_session_visit, concurrency=8)):  # fmt: skip
        assert _session_outcome(graph, records, seed) == reference


def test_a_record_reads_its_key_s_sessions_whole_while_an_earlier_record_is_released() -> None:
    """Record 7 (key k) finished with a merged session, not released; record 9 of k reads
    k's sessions just as record 7 is released on the release thread (replayed on the
    partition's rows, then dropped from the pending ones): it sees the merged session."""
    from types import SimpleNamespace

    from goka.time.record_time import Pending, RecordTime

    merged, old = "wk@000000000000100-000000000000300", "wk@000000000000100-000000000000200"
    pending, rows = Pending(), {old: b"1"}
    released = SimpleNamespace(rows={("visits", merged[1:]): b"2", ("visits", old[1:]): None},
                               timers={})  # fmt: skip
    pending.add(7, released)  # type: ignore[arg-type]

    class Released:  # the partition's rows: record 7 is released right after they are read
        def items(self, prefix: str) -> list[tuple[str, bytes]]:
            found = sorted(rows.items())
            rows.pop(old)
            rows[merged] = b"2"
            pending.drop(7, released)  # type: ignore[arg-type]
            return found

    graph = SimpleNamespace(windows={"visits": None})
    shared = SimpleNamespace(graph=graph, window_rows={"visits": Released()},
                             edge=lambda name: graph.windows[name])  # fmt: skip
    record = RecordTime(shared, 0, pending)  # type: ignore[arg-type]
    assert record.window_rows["visits"].items("wk@") == [(merged, b"2")]


def test_session_windows_in_flight_must_stay_readable_for_their_gap() -> None:
    for callback, settings in (
        (_session_visit, {"concurrency": 2}),
        (_session_visit, {"retry": Retry()}),
        (_session_visit, {"timeout": 1.0}),
        (_session_visit_async, {}),
    ):
        with pytest.raises(GraphError, match=r"its session windows must stay readable for at "
                           r"least their gap after they close, got visits \(gap 20000 ms, "
                           r"retention 19999 ms\)"):  # fmt: skip
            _sessions(callback, retention=19_999, **settings)
        assert _sessions(callback, **settings).windows["visits"].retention == 20_000
    assert _sessions(_session_visit, retention=0).concurrency == 1  # (one at a time: any)


def _per_key(items: Any) -> dict[str, list[Any]]:
    """Each key's items, in their order (different keys' records finish in any order)."""
    found: dict[str, list[Any]] = {}
    for key, item in items:
        found.setdefault(key, []).append(item)
    return found


def _run_many(
    graph: Any, records: list[tuple[int, str, str, int]], seed: int = 0
) -> dict[str, Any]:
    """As :func:`_run`, the records given to the tester in batches of 20 (in flight together)."""
    tester = Tester(graph, now=NOW, completion_seed=seed)
    for first in range(0, len(records), 20):
        tester.consume_many("pages", [(k, p, at) for _, k, p, at in records[first : first + 20]])
    tester.advance_stream_time("timed", NOW + 10**7)
    return _outcome(tester, records)


def _outcome(tester: Tester, records: list[tuple[int, str, str, int]]) -> dict[str, Any]:
    """Each key's outputs and final results in order, the table and the windows."""
    keys = sorted({key for _, key, _, _ in records})
    return {
        "out": _per_key((r.key, (r.value or b"").decode()) for r in tester.messages("out")),
        "finals": _per_key((r.key, (r.value, r.headers)) for r in tester.messages("per-minute")),
        "table": tester.table("timed-table"),
        "windows": {(k, n): tester.windows("timed", n, k) for k in keys for n in ("five", "minute")},
    }  # fmt: skip


@pytest.mark.parametrize("ttl", [None, MINUTE], ids=["no-ttl", "ttl"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_records_in_flight_in_a_group_that_keeps_time_do_what_one_at_a_time_does(
    seed: int, ttl: int | None
) -> None:
    records = _records(200)
    reference = _run_many(_graph(_visit, ttl=ttl), records)
    outputs = [v for out in reference["out"].values() for v in out]
    assert any(":True" in v for v in outputs) and any("late" in v for v in outputs)
    concurrent = _graph(_visit_async, _fired_async, ttl=ttl, concurrency=8)
    assert _run_many(concurrent, records, seed) == reference
    assert _run_many(_graph(_visit, ttl=ttl, concurrency=8), records, seed) == reference


JUMPS = "jumps-in"


async def _count_or_fail(ctx: Context[int], event: dict[str, Any]) -> None:
    await asyncio.sleep(0)
    ctx.set_value((ctx.value() or 0) + 1)
    ctx.window("m").update(lambda n: (n or 0) + 1)
    if event["fail"]:
        raise ConnectionError(f"record {event['n']}: the service did not answer")


def _jumps_graph(concurrency: int) -> Any:
    return define_group(
        "jumps", input(JUMPS, JsonCodec(), _count_or_fail, event_time=lambda e: e["t"]),
        window("m", Tumbling(minutes=1), Int64Codec(), retention=10**9),
        persist(Int64Codec()), concurrency=concurrency,
    )  # fmt: skip


@pytest.mark.parametrize("concurrency", [1, 8])
def test_a_skipped_record_moves_the_stream_time_for_the_records_in_flight_after_it(
    kafka: FakeKafka, tmp_path: Path, concurrency: int
) -> None:
    """A record that fails under ``skip`` ten minutes ahead moves the stream time (its event
    time was read): the records after it are late for their windows, one at a time and in
    flight (each admitted at the stream time the records before it reach)."""
    events = [(f"k{n % 5}", {"t": n * 10_000, "n": n, "fail": False}) for n in range(6)]
    events.append(("x", {"t": 10 * MINUTE, "n": 6, "fail": True}))
    events.extend((f"k{n % 5}", {"t": 30_000 + n * 1_000, "n": n, "fail": False})
                  for n in range(7, 17))  # fmt: skip
    for key, event in events:
        kafka.append(JUMPS, key, json.dumps(event).encode(), partition=0, timestamp=1)
    graph = _jumps_graph(concurrency)
    machine = Machine(kafka, tmp_path, graph, on_error="skip")
    summary = machine.run(0, {JUMPS: (0, len(events))})
    assert summary.failed == 1
    assert machine.state(0) == dict(Counter(key for key, event in events if not event["fail"]))
    windows = {r[2].decode(): int(r[3]) for r in kafka.rows(graph.group.window("m"), 0)
               if r[2] is not None and r[3] is not None}  # fmt: skip
    before = Counter(f"{k}@{e['t'] - e['t'] % MINUTE:015d}" for k, e in events[:6])
    assert {row.partition("-")[0]: n for row, n in windows.items()} == dict(before)


def _engine(graph: Any, **settings: Any) -> Engine:
    sections = {t: MemoryStorage(t) for t in graph.changelogs()[1:]}
    return Engine(graph, 0, store={}.get, pause_gc=False, timers=sections.get(graph.group.timers),
                  windows={n: sections[graph.group.window(n)] for n in graph.windows},
                  clock=lambda: NOW, **settings)  # fmt: skip


def _reads_back(fail: set[str]) -> Callable[..., Any]:
    tries: dict[str, int] = {}

    def reads_back(ctx: Context[int], value: str) -> None:
        ctx.window("w").update(lambda n: (n or 0) + 1)
        ctx.emit("out", ctx.key, f"{value}:{ctx.window('w').value()}")
        tries[value] = tries.get(value, 0) + 1
        if value in fail and tries[value] == 1:
            raise ConnectionError(f"{value}: the service did not answer")

    return reads_back


@pytest.mark.parametrize("policy", ["retry", "skip"])
def test_a_failed_try_leaves_no_value_in_the_window_cache(policy: str) -> None:
    """A window cache of 2 fills up inside a try, which reads back the window it wrote (the
    cache learns it from the batch's rows); the try fails: what the cache learned goes too."""
    rows = [(f"k{i}", str(i)) for i in range(4)] + [("k2", "9")]
    messages = [("in", n, k.encode(), v.encode(), NOW + n, None) for n, (k, v) in enumerate(rows)]

    def graph(callback: Any, **settings: Any) -> Any:
        return define_group(
            "g", input("in", StringCodec(), callback),
            window("w", Tumbling(minutes=1), Int64Codec(), retention=10**9),
            output("out", StringCodec()), persist(Int64Codec()), **settings,
        )  # fmt: skip

    def outputs(result: Any) -> list[Any]:
        return [(e[2], e[3]) for e in result.effects if e[1] == "out"]

    if policy == "retry":
        retried = graph(_reads_back({"2"}), retry=Retry(attempts=2, backoff=0.0))
        expected = _engine(graph(_reads_back(set())), window_cache=2).process(messages)
    else:
        retried = graph(_reads_back({"2"}))
        expected = _engine(graph(_reads_back(set())), window_cache=2).process(
            [m for m in messages if m[3] != b"2"]
        )
    settings = {"on_error": "skip"} if policy == "skip" else {}
    found = _engine(retried, window_cache=2, **settings).process(messages)
    assert outputs(found) == outputs(expected)
    assert found.windows == expected.windows


def _failing(fail: Callable[[int], bool], awaits: bool = True) -> Callable[..., Any]:
    """The visit (async, or a def), whose records for which ``fail`` says so fail after it."""

    def check(page: str) -> None:
        if fail(int(page)):
            raise ConnectionError(f"page {page}: the service did not answer")

    async def failing(ctx: Context[int], page: str) -> None:
        await _visit_async(ctx, page)
        check(page)

    def plain(ctx: Context[int], page: str) -> None:
        _visit(ctx, page)
        check(page)

    return failing if awaits else plain


@pytest.mark.parametrize("policy", ["skip", "dead-letter"])
def test_records_that_fail_in_flight_are_skipped_as_one_at_a_time_skips_them(policy: str) -> None:
    """Every seventh record fails after its changes (moving the stream time all the same),
    all records given at once."""
    records = _records(200)

    def fail(n: int) -> bool:
        return n % 7 == 3

    def run(graph: Any, seed: int = 0) -> tuple[dict[str, Any], list[int]]:
        tester = Tester(graph, now=NOW, completion_seed=seed, on_error=policy)  # type: ignore[arg-type]
        tester.consume_many("pages", [(k, p, at) for _, k, p, at in records])
        tester.advance_stream_time("timed", NOW + 10**7)
        return _outcome(tester, records), [m[1] for _, m in tester.failed]

    expected = run(_graph(_failing(fail, awaits=False)))
    assert len(expected[1]) == len([n for n, *_ in records if fail(n)])
    for seed in (1, 2):
        assert run(_graph(_failing(fail), concurrency=16), seed) == expected


@pytest.mark.parametrize("policy", ["skip", "dead-letter"])
def test_records_failing_and_late_in_flight_in_one_call_count_as_one_at_a_time(policy: str) -> None:
    """All records in one engine call: its failed records, late count and effects."""
    records = _records(200)
    messages = [("pages", n, k.encode(), p.encode(), at, None) for n, k, p, at in records]

    def fail(n: int) -> bool:
        return n % 7 == 3

    def graph(callback: Any, **settings: Any) -> Any:  # (late records dropped: counted)
        return define_group(
            "timed", input("pages", StringCodec(), callback),
            window("minute", Tumbling(minutes=1), Int64Codec(), grace=10_000),
            persist(Int64Codec()), output("out", StringCodec()),
            output("per-minute", Int64Codec()),
            window("five", Hopping(5 * MINUTE, MINUTE), Int64Codec()),
            timers(_fired), **settings,
        )  # fmt: skip

    expected = _engine(graph(_failing(fail, awaits=False)), on_error=policy).process(messages)
    found = _engine(graph(_failing(fail), concurrency=16), on_error=policy,
                    shuffle=random.Random(4)).process(messages)  # fmt: skip
    assert found.flight is not None and found.flight.most > 1
    assert found.consumed == found.processed == expected.processed == len(messages)
    assert found.late == expected.late > 0
    assert [m[1] for _, m in found.failed] == [m[1] for _, m in expected.failed]
    assert _by_record(found.effects) == _by_record(expected.effects)


def test_each_try_decodes_its_record_afresh() -> None:
    """A try that changed its value in place (and failed) leaves the next try the value as
    decoded."""
    tries: list[int] = []

    async def pops(ctx: Context[int], event: dict[str, Any]) -> None:
        tries.append(len(event.pop("items")))
        ctx.window("m").update(lambda n: (n or 0) + len(tries))
        if len(tries) == 1:
            raise ConnectionError("the first try fails")

    graph = define_group("g", input("in", JsonCodec(), pops), persist(Int64Codec()),
                         window("m", Tumbling(minutes=1), Int64Codec()),
                         retry=Retry(attempts=2, backoff=0.0))  # fmt: skip
    message = ("in", 0, b"k", json.dumps({"items": [1, 2, 3]}).encode(), NOW, None)
    result = _engine(graph).process([message])
    assert tries == [3, 3] and not result.failed


def test_a_cut_callback_released_after_its_work_went_on_leaves_its_key_s_state() -> None:
    """The cut record of key A is released only after work it started went on and changed
    A's state (a slow record of key B comes before it), and before A's last record starts:
    that record reads the state A's records made."""
    cut, done, after = threading.Event(), threading.Event(), threading.Event()

    async def visit(ctx: Context[int], page: str) -> None:
        if page == "cut":

            def later() -> None:
                assert cut.wait(10)
                ctx.set_value(999)  # (after the cut: changes nothing)
                done.set()

            try:
                await asyncio.to_thread(later)
            except asyncio.CancelledError:
                cut.set()
                raise
        elif page == "slow":  # (key B's next record starts later: it is not cut)
            await asyncio.sleep(0.6)
        elif page == "after":  # (starts at 0.6 s, ends after the cut at 1 s: before 1.6 s)
            assert await asyncio.to_thread(done.wait, 10)
            after.set()
        else:
            if page == "a2":  # (ends after "after": "cut" is released before "a3" starts)
                assert await asyncio.to_thread(after.wait, 10)
            ctx.set_value((ctx.value() or 0) + 1)
            ctx.emit("out", ctx.key, f"{page}:{ctx.value()}")

    graph = define_group("g", input("in", StringCodec(), visit), output("out", StringCodec()),
                         persist(Int64Codec()), window("m", Tumbling(minutes=1), Int64Codec()),
                         concurrency=8, timeout=1.0)  # fmt: skip
    tester = Tester(graph, now=NOW, on_error="skip")
    items = [("A", "a1"), ("B", "slow"), ("B", "after"), ("A", "cut"), ("A", "a2"), ("A", "a3")]
    tester.consume_many("in", [(k, v, NOW) for k, v in items])
    assert [m[1] for _, m in tester.failed] == [3]
    assert [r.value for r in tester.messages("out")] == [b"a1:1", b"a2:2", b"a3:3"]
    assert tester.table("g-table") == {"A": 3}


def test_wall_timers_due_at_once_fire_after_their_record_in_flight_on_a_moving_clock() -> None:
    """The wall clock moves a millisecond a read: a timer set due at once fires after its
    record in flight as one at a time (a record reads the wall clock what is due is measured
    by: the call's one reading)."""
    records = _records(60)
    messages = [("pages", n, k.encode(), p.encode(), at, None) for n, k, p, at in records]

    def run(graph: Any) -> Any:
        ticks = itertools.count(NOW)
        sections = {t: MemoryStorage(t) for t in graph.changelogs()[1:]}
        engine = Engine(graph, 0, store={}.get, pause_gc=False,
                        timers=sections.get(graph.group.timers), clock=lambda: next(ticks),
                        windows={n: sections[graph.group.window(n)] for n in graph.windows})  # fmt: skip
        outputs = engine.process(messages).effects
        return [(e[2], e[3].split(b" at ")[0]) for e in outputs if e[1] == "out"]  # (when a
        # wall timer is due depends on the reads of the clock: not compared)

    expected = run(_graph(_visit))
    assert any(b"timer w" in v for _, v in expected)
    found = run(_graph(_visit_async, _fired_async, concurrency=8))
    assert _per_key(found) == _per_key(expected)


def test_records_of_other_keys_go_on_past_where_a_key_s_timer_fires_and_its_own_wait() -> None:
    """Key a's stream timer comes due at offset 1 (key b), whose callback waits until the
    record at offset 3 (key c) has started: c's record starts while b's is in flight, before
    a's timer fires; a's record at offset 2 starts only after the timer fired, and reads what
    it set. (Effects are released in offset order whatever runs when: only "c started" and
    "read 100" tell a scheduler that holds every key, or none, from this one.)"""
    marked: set[str] = set()

    async def visit(ctx: Context[int], page: str) -> None:
        if page == "schedule":
            ctx.schedule(NOW + 1_000, "t")
        elif page == "wait":  # (up to 5 s: one at a time, c's record could never start first)
            for _ in range(500):
                if "c" in marked:
                    break
                await asyncio.sleep(0.01)
            ctx.emit("out", ctx.key, f"c started: {'c' in marked}")
        elif page == "mark":
            marked.add(ctx.key)
        ctx.emit("out", ctx.key, f"{page} {ctx.value()}")

    def fired(ctx: Context[int], timer: Timer) -> None:
        ctx.set_value(100)
        ctx.emit("out", ctx.key, "fired")

    graph = define_group("places", input("pages", StringCodec(), visit),
                         output("out", StringCodec()), persist(Int64Codec()), timers(fired),
                         concurrency=4)  # fmt: skip
    engine = _engine(graph)
    calls = [
        [("a", "schedule", NOW)],
        [("b", "wait", NOW + 1_000), ("a", "read", NOW + 1_001), ("c", "mark", NOW + 1_002)],
    ]
    outputs, offset = [], 0
    for records in calls:
        messages = []
        for key, page, at in records:
            messages.append(("pages", offset, key.encode(), page.encode(), at, None))
            offset += 1
        effects = engine.process(messages).effects
        outputs += [(e[2], e[3].decode()) for e in effects if e[0] == EMIT]
    assert outputs == [("a", "schedule None"), ("b", "c started: True"), ("b", "wait None"),
                       ("a", "fired"), ("a", "read 100"), ("c", "mark None")]  # fmt: skip


#: keys of every kind: NUL inside and last (a timer's index row ends with its key after a NUL),
#: empty, not UTF-8, and one spelled like the TTL's internal timer
ODD_KEYS = ["a", "a\x00b", "a\x00", b"\xff\xfe", "", "\x01ttl", "\u00e9", "b", "c", "d"]


def _places_graph(concurrency: int, ttl: int | None, fail_timers: bool) -> Any:
    """Records that set, move and cancel stream timers (some due at once or at a later
    record's event time) and wall timers due now, delete their key now and then, and fail
    now and then; timers that set timers and (``fail_timers``) fail."""

    async def visit(ctx: Context[int], page: str) -> None:
        n = int(page)
        rng = random.Random(n)
        await asyncio.sleep(0)
        if rng.random() < 0.1:
            ctx.delete()
        else:
            ctx.set_value((ctx.value() or 0) + 1)
        ctx.window("m").update(lambda v: (v or 0) + 1)
        draw = rng.random()
        if draw < 0.45:
            ctx.schedule(ctx.event_time_ms + rng.choice([-1_000, 0, 1_000, 2_000, 9_000]),
                         f"t{rng.randrange(3)}", data=n)  # fmt: skip
        elif draw < 0.55:
            ctx.cancel(f"t{rng.randrange(3)}")
        elif draw < 0.65:
            ctx.schedule(dt.timedelta(0), "w", domain="wall", data=n)
        ctx.emit("out", ctx.key, f"r{n} {ctx.value()} {ctx.stream_time_ms - NOW} "
                                 f"{ctx.window('m').value()}")  # fmt: skip
        if rng.random() < 0.1:
            raise ValueError(f"record {n} fails")

    def fired(ctx: Context[int], timer: Timer) -> None:
        value = (ctx.value() or 0) + 100
        ctx.set_value(value)
        ctx.emit("out", ctx.key, f"fired {timer.name} {timer.at_ms - NOW} {timer.data} {value}")
        if timer.domain == "stream" and timer.data % 3 == 0 and not timer.name.startswith("c"):
            ctx.schedule(timer.at_ms + 1_500, f"c{timer.name}", data=timer.data + 1)
        if fail_timers and timer.data % 5 == 1:
            raise ValueError(f"timer {timer.name} fails")

    return define_group(
        "places", input("pages", StringCodec(), visit),
        window("m", Tumbling(seconds=10), Int64Codec(), retention=10**9),
        output("out", StringCodec()), timers(fired, wall=True),
        persist(Int64Codec(), ttl=ttl, ttl_domain=None if ttl is None else "stream"),
        concurrency=concurrency,
    )  # fmt: skip


def _budgeted(tester: Tester, budget: int | None) -> None:
    """Give the engines ``tester`` makes a fire budget of ``budget``."""
    made = tester._engine

    def engine(graph: Any, partition: int) -> Engine:
        built = made(graph, partition)
        built.fire_budget = budget
        return built

    tester._engine = engine  # type: ignore[method-assign]


@pytest.mark.parametrize("budget", [None, 2], ids=["no-budget", "budget-2"])
@pytest.mark.parametrize("ttl", [None, 7_000], ids=["no-ttl", "ttl"])
@pytest.mark.parametrize(("seed", "keys"), [(1, 10), (2, 10), (5, 4)], ids=str)
def test_records_held_only_by_their_own_key_s_timers_do_what_one_at_a_time_does(
    seed: int, keys: int, ttl: int | None, budget: int | None
) -> None:
    """(seed 5: a timer past those the fire budget let a call read comes due, once the
    records before it are released, in that call)"""
    rng = random.Random(seed)
    records = [(rng.choice(ODD_KEYS[:keys]), str(n), NOW + n * 1_000 + rng.randint(-4_000, 1_500))
               for n in range(150)]  # fmt: skip

    def run(concurrency: int) -> Any:
        tester = Tester(_places_graph(concurrency, ttl, seed == 2), now=NOW,
                        completion_seed=seed, on_error="skip")  # fmt: skip
        _budgeted(tester, budget)
        for first in range(0, len(records), 50):
            tester.consume_many("pages", records[first : first + 50])
            tester.advance_time(500)
        tester.advance_stream_time("places", NOW + 10**7)
        outputs: dict[Any, list[Any]] = {}
        for record in tester.messages("out"):
            outputs.setdefault(record.key, []).append(record.value)
        return outputs, tester.table("places-table"), [m[1] for _, m in tester.failed]

    expected = run(1)
    assert any(v.startswith(b"fired t") for out in expected[0].values() for v in out)
    assert run(8) == expected


async def _schedule_or_count(ctx: Context[int], page: str) -> None:
    if page.startswith("at "):
        ctx.schedule(NOW + int(page[3:]), "t")
    else:
        ctx.set_value((ctx.value() or 0) + 1)


def _expire(ctx: Context[int], timer: Timer) -> None:
    ctx.set_value(-1)


def test_a_backlog_of_timers_under_a_fire_budget_is_read_once_not_again_at_each_call() -> None:
    """20,000 timers come due among 50 records under a fire budget of 1,000: the calls'
    records in flight read at most the timers the budget lets fire each (about 20,000 rows
    over the 20 calls, not 20,000 + 19,000 + ...), and every timer fires."""
    graph = define_group("backlog", input("pages", StringCodec(), _schedule_or_count),
                         persist(Int64Codec()), timers(_expire), concurrency=8)  # fmt: skip
    engine = _engine(graph, fire_budget=1_000)
    read: list[int] = []
    rows_below = DueQueue.rows_below

    def counted(self: DueQueue, stop: str, most: int) -> tuple[list[str], str | None]:
        rows, beyond = rows_below(self, stop, most)
        read.append(len(rows))
        return rows, beyond

    def drain(rest: list[Any]) -> tuple[int, list[Any]]:
        calls, effects = 0, []
        while rest or engine.backlog:
            result = engine.process(rest)
            effects += result.effects
            rest, calls = rest[result.consumed :], calls + 1
        return calls, effects

    drain([("pages", n, f"k{n}".encode(), b"at %d" % (MINUTE + n), NOW, None)
           for n in range(20_000)])  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DueQueue, "rows_below", counted)
        calls, effects = drain([("pages", 20_000 + n, b"z", b"1", NOW + MINUTE + n * 400, None)
                                for n in range(51)])  # fmt: skip
    expired = {e[2] for e in effects if e[0] == TABLE and e[3] == b"-1"}
    assert len(expired) == 20_000 and calls >= 20
    assert sum(read) <= 25_000, f"{sum(read):,} rows read over {calls} calls"


async def _schedule_cancel_or_wait(ctx: Context[int], page: str) -> None:
    command, _, at = page.partition(" ")
    if command == "at":
        ctx.schedule(NOW + int(at), "t")
    elif command == "cancel":
        ctx.cancel("t")
    elif command == "slow":  # (the records after it finish first)
        await asyncio.sleep(0.2)
    ctx.emit("out", ctx.key, f"{page} {ctx.value()}")


def _set_hundred(ctx: Context[int], timer: Timer) -> None:
    ctx.set_value(100)
    ctx.emit("out", ctx.key, "fired")


@pytest.mark.parametrize(
    ("calls", "budget"),
    [
        # a timer due exactly at the call's last stream time
        ([[("a", "at 1000", 0)], [("b", "slow", 1_000), ("a", "read", 995)]], None),
        # under a budget of 1 the call reads x's timer only; x cancels it, which leaves room
        # for k's, set in flight, queued once k's first record is released, due before k's
        # second record
        ([[("x", "at 1000", 0), ("y", "at 3000", 0)],
          [("x", "cancel", 100), ("k", "at 2000", 200), ("b", "slow", 2_000),
           ("k", "read", 2_001), ("c", "c", 3_000), ("d", "d", 3_001)]], 1),
    ],
    ids=["due-at-the-last-stream-time", "budget-room-left-by-a-cancel"],
)  # fmt: skip
def test_a_key_s_record_after_its_timer_s_place_reads_what_the_timer_set(
    calls: list[list[tuple[str, str, int]]], budget: int | None
) -> None:
    def run(concurrency: int) -> list[tuple[Any, Any]]:
        graph = define_group("s", input("pages", StringCodec(), _schedule_cancel_or_wait),
                             output("out", StringCodec()), persist(Int64Codec()),
                             timers(_set_hundred), concurrency=concurrency)  # fmt: skip
        tester = Tester(graph, now=NOW)
        _budgeted(tester, budget)
        for records in calls:
            tester.consume_many("pages", [(k, p, NOW + at) for k, p, at in records])
        return [(m.key, m.value) for m in tester.messages("out")]

    expected = run(1)
    assert ("k" if budget else "a", b"read 100") in expected
    assert run(8) == expected


@pytest.mark.parametrize("concurrency", [1, 4])
def test_an_async_timers_callback_that_never_returns_is_cut_by_the_timeout(
    concurrency: int,
) -> None:  # fmt: skip
    """Key a's timer callback sets the key's state, then hangs: the group's timeout cuts it,
    the skip policy drops what it did (the timer is gone, the state as before), and the
    records after it go on; under fail, the call fails naming the timer and the cut."""

    async def visit(ctx: Context[int], page: str) -> None:
        if page == "schedule":
            ctx.schedule(NOW + 1_000, "t")
        ctx.set_value((ctx.value() or 0) + 1)
        ctx.emit("out", ctx.key, f"{page} {ctx.value()}")

    async def hang(ctx: Context[int], timer: Timer) -> None:
        ctx.set_value(500)
        ctx.emit("out", ctx.key, "fired")
        await asyncio.sleep(30)

    graph = define_group("hangs", input("pages", StringCodec(), visit),
                         output("out", StringCodec()), persist(Int64Codec()), timers(hang),
                         concurrency=concurrency, timeout=0.2)  # fmt: skip
    messages = [("pages", 0, b"a", b"schedule", NOW, None),
                ("pages", 1, b"b", b"due", NOW + 1_000, None),
                ("pages", 2, b"a", b"after", NOW + 1_001, None)]  # fmt: skip
    began = time.monotonic()
    result = _engine(graph, on_error="skip").process(messages)
    assert time.monotonic() - began < 10
    assert [m[1] for _, m in result.failed] == [1]  # (attributed to the record it fired after)
    assert "timer 't'" in str(result.failed[0][0])
    assert "took longer than its timeout of 0.2 s" in str(result.failed[0][0].__cause__)
    assert [e[3] for e in result.effects if e[0] == EMIT] == [b"schedule 1", b"due 1", b"after 2"]
    with pytest.raises(ProcessingError, match="timer 't'"):
        _engine(graph).process(messages)
