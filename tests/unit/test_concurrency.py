"""A group's ``concurrency`` and async callbacks (goka.group.concurrent): records in flight
together give what running them one at a time gives (the same effects in the same order,
the same records skipped), with more than one and at most ``concurrency`` in flight."""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from goka import (
    GraphError,
    Int64Codec,
    Retry,
    Session,
    StringCodec,
    define_group,
    input,
    loop,
    output,
    persist,
    window,
)
from goka.errors import ProcessingError
from goka.group.concurrent import with_concurrency
from goka.group.context import Context
from goka.group.effects import EMIT, Message
from goka.group.engine import Engine
from goka.tester import Tester


def msg(offset: int, key: str) -> Message:
    return ("in", offset, key.encode(), str(offset).encode(), 1_700_000_000_000, None)


class InFlight:
    """Counts the callbacks running at once (from any thread)."""

    def __init__(self) -> None:
        self.now = self.most = 0
        self.lock = threading.Lock()

    def enter(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self.lock:
            self.now -= 1


def _apply(ctx: Context[int], value: str) -> None:
    """What every variant does once its wait is over: count, emit what it saw, fail some."""
    seen = ctx.value() or 0
    ctx.set_value(seen + 1)
    ctx.emit("out", ctx.key, f"{value}:{seen}")
    if int(value) % 7 == 3:
        raise RuntimeError(f"record {value} fails")


def graph_of(callback: Callable[..., Any], concurrency: int) -> Any:
    return define_group("conc", input("in", StringCodec(), callback), persist(Int64Codec()),
                        output("out", StringCodec()), concurrency=concurrency)  # fmt: skip


def reference(messages: list[Message], on_error: str) -> Any:
    """One record at a time with a plain callback: what concurrency must not change."""
    return Engine(graph_of(_apply, 1), 0, store={}.get, on_error=on_error).process(messages)  # type: ignore[arg-type]


def _messages(seed: int, count: int = 300) -> list[Message]:
    rng = random.Random(seed)
    keys = ["hot"] * 6 + [f"k{i}" for i in range(30)]
    return [msg(offset, rng.choice(keys)) for offset in range(count)]


def _same(result: Any, expected: Any) -> None:
    assert [e[:4] for e in result.effects] == [e[:4] for e in expected.effects]
    assert [(e.offset, e.key, str(e.__cause__)) for e, _ in result.failed] == [
        (e.offset, e.key, str(e.__cause__)) for e, _ in expected.failed
    ]  # (each failure names its own callback)


@pytest.mark.parametrize("concurrency", [2, 16, 64])
@pytest.mark.parametrize("on_error", ["skip", "dead-letter"])
def test_async_records_in_flight_give_what_one_at_a_time_gives(concurrency: int,
                                                               on_error: str) -> None:  # fmt: skip
    rng, flight = random.Random(concurrency), InFlight()

    async def awaits(ctx: Context[int], value: str) -> None:
        flight.enter()
        try:
            await asyncio.sleep(rng.random() / 1000)  # (completions in another order)
        finally:
            flight.leave()
        _apply(ctx, value)

    messages = _messages(concurrency)
    engine = Engine(graph_of(awaits, concurrency), 0, store={}.get, on_error=on_error)  # type: ignore[arg-type]
    result = engine.process(messages)
    _same(result, reference(messages, on_error))
    assert 1 < flight.most <= concurrency
    assert result.failed  # (the check above compared skipped records too)


def test_plain_callbacks_run_on_threads_in_key_order() -> None:
    flight = InFlight()

    def blocks(ctx: Context[int], value: str) -> None:
        flight.enter()
        try:
            time.sleep(0.001)  # (a blocking client)
        finally:
            flight.leave()
        _apply(ctx, value)

    messages = _messages(5, count=200)
    result = Engine(graph_of(blocks, 8), 0, store={}.get, on_error="skip").process(messages)
    _same(result, reference(messages, "skip"))
    assert 1 < flight.most <= 8


def test_an_async_callback_without_concurrency_runs_one_record_at_a_time() -> None:
    flight = InFlight()

    async def awaits(ctx: Context[int], value: str) -> None:
        flight.enter()
        await asyncio.sleep(0)
        flight.leave()
        _apply(ctx, value)

    messages = _messages(7, count=50)
    result = Engine(graph_of(awaits, 1), 0, store={}.get, on_error="skip").process(messages)
    _same(result, reference(messages, "skip"))
    assert flight.most == 1


@pytest.mark.parametrize("kind", ["async", "plain"])
def test_under_fail_the_first_failure_ends_the_call_and_nothing_after_it_starts(kind: str) -> None:
    started: list[int] = []

    async def awaits(ctx: Context[int], value: str) -> None:
        started.append(int(value))
        await asyncio.sleep(0.05 if value == "0" else 0)
        _apply(ctx, value)

    def blocks(ctx: Context[int], value: str) -> None:
        started.append(int(value))
        time.sleep(0.05 if value == "0" else 0)
        _apply(ctx, value)

    engine = Engine(graph_of(awaits if kind == "async" else blocks, 4), 0, store={}.get)
    with pytest.raises(ProcessingError, match="record 3 fails") as info:
        engine.process([msg(offset, f"k{offset}") for offset in range(200)])
    assert info.value.offset == 3
    assert len(started) < 12  # none start once the failure is known (at most the slots that
    # records finishing meanwhile freed)
    assert not [t for t in threading.enumerate() if t.name.startswith("goka-callback_")]


def test_callable_objects_and_callbacks_returning_coroutines_are_awaited() -> None:
    class Enrich:
        async def __call__(self, ctx: Context[int], value: str) -> None:
            await asyncio.sleep(0)
            _apply(ctx, value)

    def wraps(ctx: Context[int], value: str) -> Any:
        return Enrich()(ctx, value)  # (a decorator's wrapper: a def returning a coroutine)

    messages = _messages(11, count=60)
    for callback in (Enrich(), wraps):
        for concurrency in (1, 4):
            engine = Engine(graph_of(callback, concurrency), 0, store={}.get, on_error="skip")
            _same(engine.process(messages), reference(messages, "skip"))


def test_an_asyncio_client_kept_by_one_call_serves_the_next() -> None:
    kept: list[asyncio.Semaphore] = []

    async def limited(ctx: Context[int], value: str) -> None:
        if not kept:
            kept.append(asyncio.Semaphore(2))  # (made once, as a module's client would be)
        async with kept[0]:
            await asyncio.sleep(0)
        _apply(ctx, value)

    engine = Engine(graph_of(limited, 8), 0, store={}.get, on_error="skip")
    for seed in (1, 2):  # each call's records use the client the first call made
        messages = _messages(seed, count=50)
        _same(engine.process(messages), reference(messages, "skip"))


def test_the_caller_s_event_loop_is_left_as_it_was() -> None:
    async def awaits(ctx: Context[int], value: str) -> None:
        _apply(ctx, value)

    own = asyncio.new_event_loop()
    asyncio.set_event_loop(own)
    try:
        Engine(graph_of(awaits, 4), 0, store={}.get, on_error="skip").process(_messages(3, 20))
        assert asyncio.get_event_loop() is own
    finally:
        asyncio.set_event_loop(None)
        own.close()


def test_a_keyboard_interrupt_in_a_callback_reaches_the_caller_and_the_loop_goes_on() -> None:
    async def interrupted(ctx: Context[int], value: str) -> None:
        if value == "5":
            raise KeyboardInterrupt
        _apply(ctx, value)

    with pytest.raises(KeyboardInterrupt):
        Engine(graph_of(interrupted, 4), 0, store={}.get, on_error="skip").process(
            [msg(n, f"k{n}") for n in range(20)])  # fmt: skip
    test_a_call_from_a_running_event_loop_works()  # (the callback loop still serves)


@pytest.mark.parametrize("nil_handling", ["ignore", "process"])
def test_records_without_a_value_are_handled_as_one_at_a_time(nil_handling: str) -> None:
    seen: list[Any] = []

    async def notes(ctx: Context[int], value: Any) -> None:
        seen.append((ctx.offset, value))

    graph = define_group("nil", input("in", StringCodec(), notes), concurrency=4,
                         nil_handling=nil_handling)  # type: ignore[arg-type]  # fmt: skip
    messages = [msg(0, "a"), ("in", 1, b"b", None, 1, None), msg(2, "c")]
    Engine(graph, 0, store={}.get).process(messages)
    expected = [(0, "0"), (2, "2")] if nil_handling == "ignore" else [(0, "0"), (1, None), (2, "2")]
    assert sorted(seen, key=lambda s: s[0]) == expected


def test_plain_callbacks_beside_async_ones_still_run_on_threads() -> None:
    flight = InFlight()

    async def awaits(ctx: Context[int], value: str) -> None:
        await asyncio.sleep(0)

    def blocks(ctx: Context[int], value: str) -> None:
        flight.enter()
        time.sleep(0.002)
        flight.leave()

    graph = define_group("mixed", input("in", StringCodec(), blocks),
                         input("other", StringCodec(), awaits), concurrency=8)  # fmt: skip
    messages = [msg(n, f"k{n}") for n in range(40)]
    messages += [("other", n, f"o{n}".encode(), b"x", 1, None) for n in range(10)]
    Engine(graph, 0, store={}.get).process(messages)
    assert flight.most > 1


def test_a_call_from_a_running_event_loop_works() -> None:
    async def awaits(ctx: Context[int], value: str) -> None:
        await asyncio.sleep(0)
        _apply(ctx, value)

    messages = _messages(9, count=40)

    async def caller() -> Any:  # (a user's async test driving an engine, or the tester)
        return Engine(graph_of(awaits, 4), 0, store={}.get, on_error="skip").process(messages)

    _same(asyncio.run(caller()), reference(messages, "skip"))


@pytest.mark.parametrize("concurrency", [0, -1, 1.5, True, "4", None])
def test_concurrency_is_a_whole_number_of_at_least_one(concurrency: object) -> None:
    with pytest.raises(GraphError, match="concurrency must be a whole number of at least 1"):
        graph_of(_apply, concurrency)  # type: ignore[arg-type]


#: ms far beyond ``max_future`` (a minute) of the wall clock
_FAR = int(time.time() * 1000) + 86_400_000


def _stamped(value: str) -> int:
    """The event time a record's value carries (``"<n>"``: n minutes after 1970; some of them
    cannot be had: negative, or a day ahead of the wall clock)."""
    n = int(value)
    return -1 if n % 11 == 5 else _FAR if n % 13 == 7 else n * 60_000


def _apply_stamped(ctx: Context[int], value: str) -> None:
    ctx.emit("out", ctx.key, f"{value}@{ctx.event_time_ms}")
    if ctx.topic != "conc-loop" and int(value) % 4 == 0:
        ctx.loopback(ctx.key, value)
    _apply(ctx, value)


def _stamped_messages() -> list[Message]:
    """Records of an input with an extractor (``in``), of one without (``plain``: some
    timestamps negative or a day ahead) and of the loop, their keys drawn."""
    rng, messages = random.Random(3), []
    for offset in range(300):
        topic = rng.choice(["in", "in", "plain", "conc-loop"])
        stamp = -5 if offset % 5 == 1 else _FAR if offset % 5 == 2 else 1_700_000_000_000
        key = rng.choice(["hot"] * 6 + [f"k{i}" for i in range(30)])
        messages.append((topic, offset, key.encode(), str(offset).encode(), stamp, None))
    return messages


def _stamped_graph(callback: Callable[..., Any], concurrency: int, **settings: Any) -> Any:
    return define_group(
        "conc", input("in", StringCodec(), callback, event_time=settings.pop("extract", _stamped)),
        input("plain", StringCodec(), callback), loop(StringCodec(), callback),
        persist(Int64Codec()), output("out", StringCodec()), max_future=60_000,
        concurrency=concurrency, **settings,
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["async", "plain"])
@pytest.mark.parametrize("on_error", ["skip", "dead-letter"])
def test_event_times_extracted_in_flight_are_what_one_at_a_time_extracts(
    kind: str, on_error: str
) -> None:
    rng, flight = random.Random(7), InFlight()

    def waits() -> float:
        flight.enter()
        return rng.random() / 1000  # (completions in another order)

    async def awaits(ctx: Context[int], value: str) -> None:
        try:
            await asyncio.sleep(waits())
        finally:
            flight.leave()
        _apply_stamped(ctx, value)

    def blocks(ctx: Context[int], value: str) -> None:
        try:
            time.sleep(waits())
        finally:
            flight.leave()
        _apply_stamped(ctx, value)

    messages = _stamped_messages()
    callback = awaits if kind == "async" else blocks
    engine = Engine(_stamped_graph(callback, 16), 0, store={}.get, on_error=on_error)  # type: ignore[arg-type]
    result = engine.process(messages)
    one = Engine(_stamped_graph(_apply_stamped, 1), 0, store={}.get, on_error=on_error)  # type: ignore[arg-type]
    _same(result, one.process(messages))
    assert 1 < flight.most <= 16
    told = [e[3] for e in result.effects if e[0] == EMIT and b"@" in (e[3] or b"")]
    assert any(m[0] == "in" and f"{m[1]}@{m[1] * 60_000}".encode() in told for m in messages)
    causes = {str(e.__cause__).split(" (")[0] for e, _ in result.failed}
    assert {"event time -5 ms is before 1970", "event time -1 ms is before 1970"} <= causes
    assert any("ahead of the wall clock" in c for c in causes)


def test_an_event_time_is_extracted_once_and_every_try_of_the_record_has_it() -> None:
    extracted: Counter[str] = Counter()
    failed: set[str] = set()

    def counted(value: str) -> int:
        extracted[value] += 1
        return _stamped(value)

    async def once_failing(ctx: Context[int], value: str) -> None:
        await asyncio.sleep(0)
        ctx.emit("out", ctx.key, f"{value}@{ctx.event_time_ms}")
        if value not in failed:  # (every record fails its first try)
            failed.add(value)
            raise RuntimeError(f"record {value} fails once")

    graph = _stamped_graph(once_failing, 8, extract=counted,
                           retry=Retry(attempts=2, backoff=0, on=(RuntimeError,)))  # fmt: skip
    messages = [m for m in _stamped_messages() if m[0] == "in"]
    result = Engine(graph, 0, store={}.get, on_error="skip").process(messages)  # type: ignore[arg-type]
    assert set(extracted.values()) == {1}
    refused = {m[1] for m in messages if _stamped(str(m[1])) in (-1, _FAR)}
    assert sorted(e[3] for e in result.effects if e[0] == EMIT) == sorted(
        f"{m[1]}@{m[1] * 60_000}".encode() for m in messages if m[1] not in refused
    )
    assert {e.offset for e, _ in result.failed} == refused


def test_an_extractor_s_system_exit_reaches_the_caller_and_the_loop_goes_on() -> None:
    def leaves(value: str) -> int:
        if value == "2":
            raise SystemExit("bye")
        return 0

    async def count(ctx: Context[int], value: str) -> None:
        ctx.set_value((ctx.value() or 0) + 1)

    graph = _stamped_graph(count, 4, extract=leaves)
    messages = [("in", n, b"k", str(n).encode(), 0, None) for n in range(4)]
    with pytest.raises(SystemExit, match="bye"):
        Engine(graph, 0, store={}.get, on_error="skip").process(messages)  # type: ignore[arg-type]
    assert Engine(graph_of(count, 4), 0, store={}.get).process(messages[:2]).processed == 2


def test_the_command_line_s_concurrency_is_checked_as_the_graph_s() -> None:
    graph = graph_of(_apply, 1)
    assert with_concurrency(graph, 32).concurrency == 32
    assert graph.concurrency == 1  # (a new graph: graphs are immutable)
    with pytest.raises(GraphError, match="concurrency must be a whole number"):
        with_concurrency(graph, 0)

    def sessions(retention: int) -> Any:
        return define_group("t", input("in", StringCodec(), _apply), persist(Int64Codec()),
                            window("w", Session(gap=60_000), Int64Codec(), retention=retention,
                                   merge=lambda a, b: a + b))  # fmt: skip

    assert with_concurrency(sessions(60_000), 8).concurrency == 8
    with pytest.raises(
        GraphError,
        match=r"must stay readable for at least their gap after "
        r"they close, got w \(gap 60000 ms, retention 59999",
    ):
        with_concurrency(sessions(59_999), 8)


def test_a_forked_child_runs_its_records_on_a_loop_of_its_own() -> None:
    async def awaits(ctx: Context[int], value: str) -> None:
        await asyncio.sleep(0)
        _apply(ctx, value)

    engine = Engine(graph_of(awaits, 4), 0, store={}.get, on_error="skip")
    engine.process(_messages(1, 10))  # the parent's loop runs
    child = multiprocessing.get_context("fork").Process(
        target=lambda: engine.process(_messages(2, 10)))  # fmt: skip
    child.start()
    child.join(60)
    assert child.exitcode == 0  # (not stuck on the parent's loop, whose thread it lacks)


# -- retries, timeouts, a blocked loop ------------------------------------------------------------


def emitted(result: Any) -> list[bytes | None]:
    return [e[3] for e in result.effects if e[0] == EMIT]


def retried_graph(callback: Callable[..., Any], **settings: Any) -> Any:
    return define_group("conc", input("in", StringCodec(), callback), persist(Int64Codec()),
                        output("out", StringCodec()), **settings)  # fmt: skip


@pytest.mark.parametrize("kind", ["async", "plain"])
@pytest.mark.parametrize("concurrency", [1, 8])
def test_a_failing_record_is_tried_again_from_its_state_before_and_only_its_key_waits(
    kind: str, concurrency: int,
) -> None:  # fmt: skip
    """Each of the first two tries of a flaky record counts and emits, then fails: the third
    succeeds, and only its effects remain (the count and emit happen once). Other keys' records
    finish during the backoff (at concurrency 8)."""
    tries: dict[int, int] = {}
    finished: list[int] = []
    lock = threading.Lock()

    def attempt(ctx: Context[int], value: str) -> None:
        offset = int(value)
        ctx.set_value((ctx.value() or 0) + 1)
        ctx.emit("out", ctx.key, f"{value}:{ctx.value()}")
        with lock:
            tries[offset] = tries.get(offset, 0) + 1
            if offset == 3 and tries[offset] < 3:
                raise ConnectionError("the service is down")
            finished.append(offset)

    async def attempt_async(ctx: Context[int], value: str) -> None:
        await asyncio.sleep(0)
        attempt(ctx, value)

    retry = Retry(attempts=3, backoff=0.5, max_backoff=0.5, on=(ConnectionError,))
    graph = retried_graph(attempt_async if kind == "async" else attempt, retry=retry,
                          concurrency=concurrency)  # fmt: skip
    messages = [msg(o, "flaky" if o in (3, 5) else f"k{o}") for o in range(12)]
    result = Engine(graph, 0, store={}.get, on_error="fail").process(messages)
    assert tries[3] == 3 and result.failed == []
    assert emitted(result) == [f"{o}:{2 if o == 5 else 1}".encode() for o in range(12)]
    assert finished.index(5) > finished.index(3)  # the key waited for its retried record
    if concurrency > 1:  # the others did not
        assert finished.index(3) > finished.index(11)


def test_tries_spent_the_policy_handles_the_last_failure() -> None:
    calls = []

    def always(ctx: Context[int], value: str) -> None:
        calls.append(value)
        raise ConnectionError(f"down for {value}")

    graph = retried_graph(always, retry=Retry(attempts=2, backoff=0), concurrency=4)
    result = Engine(graph, 0, store={}.get, on_error="skip").process([msg(0, "a"), msg(1, "b")])
    assert sorted(calls) == ["0", "0", "1", "1"]
    assert [m[1] for _, m in result.failed] == [0, 1]
    assert "down for 0" in str(result.failed[0][0].__cause__)
    with pytest.raises(ProcessingError, match="down for 0"):
        Engine(graph, 0, store={}.get, on_error="fail").process([msg(0, "a")])


def test_ctx_fail_is_never_tried_again() -> None:
    calls = []

    def fails(ctx: Context[int], value: str) -> None:
        calls.append(value)
        ctx.fail("bad record")

    graph = retried_graph(fails, retry=Retry(attempts=5, backoff=0), concurrency=2)
    with pytest.raises(ProcessingError, match="bad record"):
        Engine(graph, 0, store={}.get, on_error="skip").process([msg(0, "a")])
    assert calls == ["0"]


@pytest.mark.parametrize("kind", ["async", "plain"])
def test_a_callback_that_never_returns_is_cut_by_the_timeout_and_the_policy_handles_it(
    kind: str,
) -> None:  # fmt: skip
    """Record 1 of key a changes the key's state, then hangs: it is cut by the timeout and
    skipped. Record 2 of key a starts after the cut and sees the state as record 0 left it,
    even though the cut thread (plain) goes on and writes while record 2 runs; what the cut
    thread does goes nowhere. The others are done."""
    cut, written = threading.Event(), threading.Event()

    def count(ctx: Context[int], value: str) -> None:
        ctx.set_value((ctx.value() or 0) + 1)
        ctx.emit("out", ctx.key, f"{value}:{ctx.value()}")

    def hang(ctx: Context[int], value: str) -> None:
        if value == "1":
            ctx.set_value(500)
            cut.wait(30)  # (set by record 2, which starts after the cut)
            ctx.set_value(1000)  # after the cut: goes nowhere
            ctx.emit("out", ctx.key, "late")
            written.set()
            return
        if value == "2":
            cut.set()
            assert written.wait(30)
        count(ctx, value)

    async def hang_async(ctx: Context[int], value: str) -> None:
        if value == "1":
            ctx.set_value(500)
            await asyncio.sleep(30)
        count(ctx, value)

    graph = retried_graph(hang_async if kind == "async" else hang, timeout=1.0, concurrency=4)
    engine = Engine(graph, 0, store={}.get, on_error="skip")
    result = engine.process([msg(0, "a"), msg(1, "a"), msg(2, "a"), msg(3, "b")])
    assert [m[1] for _, m in result.failed] == [1]
    assert "took longer than its timeout of 1 s" in str(result.failed[0][0].__cause__)
    assert "in/0/1 (key 'a')" in str(result.failed[0][0].__cause__)
    assert emitted(result) == [b"0:1", b"2:2", b"3:1"]
    assert result.changes()["a"] == Int64Codec().encode(2)


def test_a_timeout_counts_from_when_the_callback_starts() -> None:
    """Two records hang past the timeout and are cut; a quick record that starts after
    them (concurrency 2: it waits for a slot) is not cut for their time."""
    release = threading.Event()

    def callback(ctx: Context[int], value: str) -> None:
        if value in ("0", "1"):
            release.wait(30)
        ctx.emit("out", ctx.key, value)

    graph = retried_graph(callback, timeout=1.0, concurrency=2)
    try:
        result = Engine(graph, 0, store={}.get, on_error="skip").process(
            [msg(0, "a"), msg(1, "b"), msg(2, "c")])  # fmt: skip
    finally:
        release.set()
    assert [m[1] for _, m in result.failed] == [0, 1]
    assert emitted(result) == [b"2"]


@pytest.mark.parametrize("kind", ["async", "plain"])
def test_a_callback_s_own_timeout_error_is_its_failure_not_a_cut(kind: str) -> None:
    tries = []

    def own(ctx: Context[int], value: str) -> None:
        tries.append(value)
        raise TimeoutError("the service timed out")

    async def own_async(ctx: Context[int], value: str) -> None:
        own(ctx, value)

    for timeout in (None, 5.0):
        tries.clear()
        graph = retried_graph(own_async if kind == "async" else own, concurrency=2,
                              timeout=timeout, retry=Retry(attempts=3, backoff=0,
                                                           on=(TimeoutError,)))  # fmt: skip
        result = Engine(graph, 0, store={}.get, on_error="skip").process([msg(0, "a")])
        assert tries == ["0", "0", "0"]
        cause = result.failed[0][0].__cause__
        assert type(cause) is TimeoutError and "the service timed out" in str(cause)


def test_a_callback_raising_cancelled_error_fails_its_record_under_the_policy() -> None:
    async def cancels(ctx: Context[int], value: str) -> None:
        if value == "1":
            raise asyncio.CancelledError
        ctx.emit("out", ctx.key, value)

    graph = retried_graph(cancels, concurrency=4)
    result = Engine(graph, 0, store={}.get, on_error="skip").process([msg(0, "a"), msg(1, "b")])
    assert [m[1] for _, m in result.failed] == [1]
    assert "raised CancelledError" in str(result.failed[0][0].__cause__)
    assert emitted(result) == [b"0"]


def test_a_system_exit_under_a_timeout_reaches_the_caller_and_the_loop_goes_on() -> None:
    async def exits(ctx: Context[int], value: str) -> None:
        await asyncio.sleep(0)
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        Engine(retried_graph(exits, timeout=5.0), 0, store={}.get).process([msg(0, "a")])

    async def fine(ctx: Context[int], value: str) -> None:
        await asyncio.sleep(0)
        ctx.emit("out", ctx.key, value)

    result = Engine(retried_graph(fine, timeout=5.0), 0, store={}.get).process([msg(1, "a")])
    assert emitted(result) == [b"1"]


def test_a_record_that_cannot_be_decoded_or_misuses_the_context_is_not_tried_again() -> None:
    calls = []

    def too_big(ctx: Context[int], value: str) -> None:
        calls.append(value)
        ctx.emit("elsewhere", ctx.key, value)  # not an output edge: ContextError

    graph = retried_graph(too_big, retry=Retry(attempts=5, backoff=0), concurrency=2)
    result = Engine(graph, 0, store={}.get, on_error="skip").process([msg(0, "a")])
    assert calls == ["0"] and [m[1] for _, m in result.failed] == [0]
    assert Retry(attempts=3000, backoff=1.0, max_backoff=7.0).delay(2999) == 7.0


def test_a_timed_out_try_is_tried_again() -> None:
    tries = []

    async def slow_once(ctx: Context[int], value: str) -> None:
        tries.append(value)
        if len(tries) == 1:
            await asyncio.sleep(30)
        ctx.emit("out", ctx.key, value)

    graph = retried_graph(slow_once, timeout=0.1, retry=Retry(attempts=2, backoff=0))
    result = Engine(graph, 0, store={}.get, on_error="fail").process([msg(0, "a")])
    assert tries == ["0", "0"]
    assert emitted(result) == [b"0"]


def test_a_blocking_call_inside_an_async_callback_is_warned_about_once_with_its_key(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    async def blocks(ctx: Context[int], value: str) -> None:
        await asyncio.sleep(0)
        if ctx.key == "slow":
            time.sleep(0.8)  # a blocking call: every record in flight waits
        ctx.emit("out", ctx.key, value)

    monkeypatch.setattr("goka.group.retries.SLOW_STEP_SECONDS", 0.5)
    graph = retried_graph(blocks, concurrency=4)
    with caplog.at_level("WARNING", logger="goka.group.concurrent"):
        Engine(graph, 0, store={}.get).process([msg(0, "a"), msg(1, "slow"), msg(2, "slow")])
    warned = [r.getMessage() for r in caplog.records if "without awaiting" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "at key 'slow' (in/0/1)" in warned[0] and "blocks" in warned[0]


@pytest.mark.parametrize(("settings", "message"), [
    ({"retry": Retry(attempts=0)}, "attempts must be a whole number of at least 1"),
    ({"retry": Retry(backoff=-1.0)}, "backoff must be a number of at least 0"),
    ({"retry": Retry(multiplier=0.5)}, "multiplier must be a number of at least 1"),
    ({"retry": Retry(backoff=5, max_backoff=1)}, "max_backoff (1) is below backoff (5)"),
    ({"retry": Retry(on=(KeyError, 3))}, "on must be a non-empty tuple of Exception classes"),
    ({"retry": 3}, "retry must be a goka.Retry"),
    ({"timeout": 0}, "timeout must be a positive number"),
    ({"timeout": float("inf")}, "timeout must be a positive number"),
])  # fmt: skip
def test_invalid_retries_and_timeouts_fail_at_declaration(settings: dict[str, Any],
                                                         message: str) -> None:  # fmt: skip
    with pytest.raises(GraphError, match=re.escape(message)):
        retried_graph(_apply, **settings)


# -- the tester -----------------------------------------------------------------------------------


def _finishing_order(seed: int, concurrency: int = 8) -> tuple[list[str], Any]:
    finished: list[str] = []

    async def note(ctx: Context[int], value: str) -> None:
        count = (ctx.value() or 0) + 1
        await asyncio.sleep(0)
        finished.append(f"{ctx.key}:{value}")
        ctx.set_value(count)
        ctx.emit("out", ctx.key, f"{value}:{count}")

    graph = define_group("seeded", input("in", StringCodec(), note), persist(Int64Codec()),
                         output("out", StringCodec()), concurrency=concurrency)  # fmt: skip
    tester = Tester(graph, partitions=2, completion_seed=seed)
    tester.consume_many("in", [(f"k{n % 6}", str(n)) for n in range(30)])
    return finished, tester


def test_the_tester_finishes_records_in_flight_in_a_seeded_random_order() -> None:
    """Records given together finish in an order drawn from the seed (the same for the same
    seed, others for others), each key's in its input order; what comes out (the table, each
    key's outputs) is the same for every seed."""
    runs = {seed: _finishing_order(seed) for seed in range(6)}
    assert _finishing_order(3)[0] == runs[3][0]
    assert len({tuple(finished) for finished, _ in runs.values()}) > 1
    expected = {f"k{k}": 5 for k in range(6)}
    for finished, tester in runs.values():
        assert tester.table("seeded-table") == expected
        for key in expected:
            mine = [int(item.split(":")[1]) for item in finished if item.startswith(f"{key}:")]
            assert mine == sorted(mine)
            told = [r.value for r in tester.messages("out") if r.key == key]
            assert told == [f"{n}:{i + 1}".encode() for i, n in enumerate(mine)]
    one_at_a_time, _ = _finishing_order(0, concurrency=1)  # (in offset order, by partition)
    assert one_at_a_time == _finishing_order(1, concurrency=1)[0]


def test_a_step_slowed_by_a_busy_machine_is_not_taken_for_a_blocking_call(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A step that computes 40 ms while another process shares its one CPU takes about twice
    that on the clock: the time it waited for the CPU is not counted, and nothing is warned;
    a step that computes past the limit is."""
    import os
    import subprocess
    import sys

    if not hasattr(os, "sched_setaffinity") or not os.path.exists("/proc/thread-self/schedstat"):
        pytest.skip("needs Linux's CPU affinity and schedstat")

    def compute(seconds: float) -> None:
        until = time.thread_time() + seconds
        while time.thread_time() < until:
            pass

    async def busy(ctx: Context[int], value: str) -> None:
        await asyncio.sleep(0)
        compute(0.04 if ctx.key == "shared" else 0.25)
        await asyncio.sleep(0)

    monkeypatch.setattr("goka.group.retries.SLOW_STEP_SECONDS", 0.07)
    before = os.sched_getaffinity(0)
    cpu = min(before)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, {cpu})
        os.sched_setaffinity(0, {cpu})
        for thread in threading.enumerate():  # the loop's thread too (affinity is per thread)
            if thread.native_id is not None:
                os.sched_setaffinity(thread.native_id, {cpu})
        with caplog.at_level("WARNING", logger="goka.group.concurrent"):
            Engine(retried_graph(busy, concurrency=2), 0, store={}.get).process(
                [msg(n, "shared") for n in range(4)])  # fmt: skip
            assert not [r for r in caplog.records if "without awaiting" in r.getMessage()]
            Engine(retried_graph(busy, concurrency=2), 0, store={}.get).process([msg(9, "own")])
    finally:
        hog.kill()
        hog.wait()
        os.sched_setaffinity(0, before)
        for thread in threading.enumerate():
            if thread.native_id is not None:
                os.sched_setaffinity(thread.native_id, before)
    warned = [r.getMessage() for r in caplog.records if "without awaiting" in r.getMessage()]
    assert len(warned) == 1 and "at key 'own'" in warned[0]
