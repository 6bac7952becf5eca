"""Groups that keep time (windows, timers) with async callbacks, retries and timeouts: one
record at a time, each compared with the same group of plain callbacks that never fail."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

import pytest

from goka import (
    CallbackTimeout,
    Context,
    GraphError,
    Hopping,
    Int64Codec,
    ProcessingError,
    Retry,
    StringCodec,
    Tumbling,
    define_group,
    input,
    output,
    persist,
    timers,
    window,
)
from goka.tester import Tester
from goka.time.rows import Timer

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
    ctx.emit("out", ctx.key, f"{page}:{count}")


def _fired(ctx: Context[int], timer: Timer) -> None:
    ctx.set_value((ctx.value() or 0) + 100)
    ctx.emit("out", ctx.key, f"timer {timer.name} at {timer.at}")


async def _visit_async(ctx: Context[int], page: str) -> None:
    count = (ctx.value() or 0) + 1
    ctx.set_value(count)
    await asyncio.sleep(0)  # (its state changed before, its windows after the await)
    _aggregate(ctx, page, count)


async def _fired_async(ctx: Context[int], timer: Timer) -> None:
    await asyncio.sleep(0)
    _fired(ctx, timer)


def _graph(callback: Callable[..., Any], fired: Callable[..., Any] = _fired,
           **settings: Any) -> Any:  # fmt: skip
    return define_group(
        "timed", input("pages", StringCodec(), callback),
        window("five", Hopping(5 * MINUTE, MINUTE), Int64Codec(), retention=10**9),
        window("minute", Tumbling(minutes=1), Int64Codec(), grace=10_000, emit="final",
               output="per-minute", retention=10**9),
        output("per-minute", Int64Codec()), output("out", StringCodec()),
        persist(Int64Codec()), timers(fired), **settings,
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


def test_a_timeout_in_a_group_that_keeps_time_needs_async_callbacks() -> None:
    with pytest.raises(
        GraphError,
        match="keeps time .* timeout cuts async callbacks only, and "
        "callback _visit of input edge pages is a def",
    ):
        _graph(_visit, timeout=1.0)
    with pytest.raises(GraphError, match="keeps time .* concurrency above 1 is not available"):
        _graph(_visit_async, concurrency=2)
    assert _graph(_visit_async, timeout=1.0, retry=Retry()).timeout == 1.0
