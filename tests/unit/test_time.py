"""Time in the tester: event time, windows, timers and TTL, against plain-Python references
computed in each test from the same input."""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from typing import Any

import pytest

from goka import (
    Calendar,
    Context,
    GraphError,
    Hopping,
    Int64Codec,
    JsonCodec,
    ProcessingError,
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
from goka.tester import Tester
from goka.time.rows import WINDOW_START, Timer

NOW = 1_800_000_000_000  # the tester's wall clock: 2027-01-15
MINUTE = 60_000


def count_minutes(ctx: Context[int], page: str) -> None:
    ctx.window("minute").update(lambda n: (n or 0) + 1)


def minute_graph(grace: int) -> Any:
    return define_group(
        "views",
        input("pages", StringCodec(), count_minutes),
        window(
            "minute",
            Tumbling(minutes=1),
            Int64Codec(),
            grace=grace,
            emit="final",
            output="per-minute",
        ),
        output("per-minute", Int64Codec()),
        persist(Int64Codec()),
    )


def test_tumbling_windows_emit_one_final_result_each_and_drop_late_records() -> None:
    rng = random.Random(7)
    grace = 20_000
    start = NOW - 3_600_000
    records = []
    for i in range(600):  # time moves forward with jitter: some records are late
        at = start + i * 1_000 + rng.randint(-45_000, 5_000)
        records.append((f"user-{rng.randint(0, 4)}", at))
    tester = Tester(minute_graph(grace), now=NOW)
    for key, at in records:
        tester.consume("pages", key, "/p", timestamp=at)
    tester.advance_stream_time("views", start + 10_000_000)  # close every window

    expected: Counter[tuple[str, int]] = Counter()
    stream, late = -1, 0
    for key, at in records:
        stream = max(stream, at)
        window_start = at - at % MINUTE
        if window_start + MINUTE + grace <= stream:
            late += 1
        else:
            expected[(key, window_start)] += 1
    finals = [(r.key, int(dict(r.headers)[WINDOW_START]), int(r.value or b"0"))
              for r in tester.messages("per-minute")]  # fmt: skip
    assert late > 10  # the input has late records, or this test shows nothing
    assert Counter((k, s) for k, s, _ in finals) == Counter(expected.keys())  # once each
    assert {(k, s): n for k, s, n in finals} == dict(expected)


def test_hopping_windows_hold_each_record_in_every_window_it_falls_into() -> None:
    def count(ctx: Context[int], msg: str) -> None:
        for state in ctx.window("five"):
            state.set_value((state.value() or 0) + 1)

    graph = define_group(
        "hops", input("pages", StringCodec(), count),
        window("five", Hopping(5 * MINUTE, MINUTE), Int64Codec(), retention=10**9),
        persist(Int64Codec()),
    )  # fmt: skip
    rng = random.Random(3)
    times = sorted(NOW - rng.randint(0, 30 * MINUTE) for _ in range(300))
    tester = Tester(graph, now=NOW)
    for at in times:
        tester.consume("pages", "k", "/", timestamp=at)
    expected: Counter[int] = Counter()
    for at in times:
        last = at - at % MINUTE
        for first in range(last - 4 * MINUTE, last + 1, MINUTE):
            expected[first] += 1
    found = {w.start: n for w, n in tester.windows("hops", "five", "k")}
    assert found == dict(expected)


def test_a_calendar_day_across_the_dst_switch_is_one_25_hour_window() -> None:
    def count(ctx: Context[int], msg: str) -> None:
        ctx.window("day").update(lambda n: (n or 0) + 1)

    graph = define_group(
        "days", input("pages", StringCodec(), count),
        window("day", Calendar("day", tz="Europe/Berlin"), Int64Codec(), retention=10**12),
        persist(Int64Codec()), max_future=None,
    )  # fmt: skip
    tester = Tester(graph, now=NOW)
    first = int(dt.datetime.fromisoformat("2026-10-24T23:30:00+02:00").timestamp() * 1000)
    times = [first + i * 30 * MINUTE for i in range(60)]  # 30 hours, every half hour
    for at in times:
        tester.consume("pages", "k", "/", timestamp=at)
    windows = tester.windows("days", "day", "k")
    day = int(dt.datetime.fromisoformat("2026-10-25T00:00:00+02:00").timestamp() * 1000)
    lengths = {w.start: (w.end - w.start) // 3_600_000 for w, _ in windows}
    assert lengths[day] == 25
    counts = {w.start: n for w, n in windows}
    assert counts[day] == sum(1 for t in times if day <= t < day + 25 * 3_600_000) == 50
    assert sum(counts.values()) == len(times)


def test_sessions_merge_when_a_record_bridges_them_and_the_merged_ones_are_deleted() -> None:
    def count(ctx: Context[int], msg: str) -> None:
        ctx.window("visits").update(lambda n: (n or 0) + 1)

    graph = define_group(
        "sessions", input("pages", StringCodec(), count),
        window("visits", Session(10 * MINUTE), Int64Codec(), grace=10**9, retention=10**12,
               merge=lambda a, b: a + b),
        persist(Int64Codec()),
    )  # fmt: skip
    rng = random.Random(5)
    times = [NOW - rng.randint(0, 600 * MINUTE) for _ in range(40)]  # out of order
    tester = Tester(graph, now=NOW)
    for at in times:
        tester.consume("pages", "k", "/", timestamp=at)
    expected = []  # sessions of the sorted times: a gap of 10 minutes or more splits them
    for at in sorted(times):
        if expected and at - (expected[-1][1] - 1) < 10 * MINUTE:
            expected[-1] = (expected[-1][0], at + 1, expected[-1][2] + 1)
        else:
            expected.append((at, at + 1, 1))
    found = [(w.start, w.end, n) for w, n in tester.windows("sessions", "visits", "k")]
    assert found == expected
    assert len(expected) > 3  # the input has several sessions
    deleted = [r for r in tester.messages("sessions-window-visits") if r.value is None]
    assert deleted  # sessions merged away left tombstones


def remind(ctx: Context[Any], msg: dict[str, Any]) -> None:
    if msg["op"] == "set":
        ctx.schedule(msg["at"], msg["name"], domain=msg["domain"], data=msg.get("data"))
    elif msg["op"] == "cancel":
        ctx.cancel(msg["name"])


def fired(ctx: Context[Any], timer: Timer) -> None:
    ctx.emit("fired", ctx.key, {"name": timer.name, "at": timer.at_ms, "data": timer.data,
                                "stream": ctx.stream_time_ms})  # fmt: skip


def timer_graph() -> Any:
    return define_group(
        "reminders", input("ops", JsonCodec(), remind), timers(fired),
        output("fired", JsonCodec()), persist(JsonCodec()),
    )  # fmt: skip


def test_stream_timers_fire_in_time_order_once_after_the_record_that_makes_them_due() -> None:
    tester = Tester(timer_graph(), now=NOW)
    t0 = NOW - 100 * MINUTE

    def op(key: str, when: int, **body: Any) -> None:
        tester.consume("ops", key, {"domain": "stream", **body}, timestamp=when)

    op("a", t0, op="set", name="x", at=t0 + 5 * MINUTE, data=[1])
    op("b", t0, op="set", name="x", at=t0 + 3 * MINUTE)
    op("a", t0, op="set", name="y", at=t0 - MINUTE)  # in the past: fires after this record
    op("c", t0, op="set", name="x", at=t0 + MINUTE)
    op("c", t0, op="cancel", name="x")
    op("b", t0, op="set", name="x", at=t0 + 4 * MINUTE)  # rescheduled later
    op("d", t0 + 10 * MINUTE, op="noop", name="")
    got = [(r.key, r.value) for r in tester.messages("fired")]
    decoded = [(k, JsonCodec().decode(v or b"")) for k, v in got]
    assert [(k, v["name"], v["at"]) for k, v in decoded] == [
        ("a", "y", t0 - MINUTE), ("b", "x", t0 + 4 * MINUTE), ("a", "x", t0 + 5 * MINUTE),
    ]  # fmt: skip
    assert decoded[0][1]["stream"] == t0 and decoded[2][1]["data"] == [1]
    assert decoded[1][1]["stream"] == t0 + 10 * MINUTE
    op("e", t0 + 20 * MINUTE, op="noop", name="")
    assert len(tester.messages("fired")) == 3  # none fires twice


def test_wall_timers_fire_when_the_clock_moves_without_any_record() -> None:
    tester = Tester(timer_graph(), now=NOW)
    tester.consume("ops", "a", {"op": "set", "name": "w", "at": NOW + 30_000,
                                "domain": "wall"}, timestamp=NOW)  # fmt: skip
    tester.advance_time(29_999)
    assert tester.messages("fired") == []
    tester.advance_time(1)
    assert [r.key for r in tester.messages("fired")] == ["a"]
    tester.advance_time(dt.timedelta(hours=1))
    assert len(tester.messages("fired")) == 1


@pytest.mark.parametrize("domain", ["stream", "wall"])
def test_keys_expire_after_their_ttl_and_read_as_none_before_their_deletion(domain: str) -> None:
    seen: list[Any] = []

    def put(ctx: Context[int], msg: str) -> None:
        seen.append(ctx.value())
        ctx.set_value(int(msg))

    graph = define_group(
        "carts", input("items", StringCodec(), put),
        persist(Int64Codec(), ttl=dt.timedelta(minutes=10), ttl_domain=domain),
    )  # fmt: skip
    tester = Tester(graph, now=NOW)
    tester.consume("items", "a", "1", timestamp=NOW)
    if domain == "wall":
        tester.advance_time(5 * MINUTE)
    tester.consume("items", "b", "2", timestamp=NOW + 5 * MINUTE)
    tester.consume("items", "a", "3", timestamp=NOW + 5 * MINUTE)  # a lives on
    if domain == "wall":
        tester.advance_time(7 * MINUTE)
    else:
        tester.advance_stream_time("carts", NOW + 12 * MINUTE)
    assert tester.table("carts-table") == {"a": 3, "b": 2}
    if domain == "wall":
        tester.advance_time(4 * MINUTE)
    else:
        tester.advance_stream_time("carts", NOW + 16 * MINUTE)
    assert tester.table("carts-table") == {}
    tombstones = [r.key for r in tester.messages("carts-table") if r.value is None]
    assert sorted(tombstones) == ["a", "b"]
    assert seen == [None, None, 1]


@pytest.mark.parametrize(
    ("extract", "found"),
    [
        (lambda v: v["ts"], "returned 'soon'"),
        (lambda v: v["missing"], "extractor raised KeyError"),
        (lambda v: -5, "before 1970"),
        (lambda v: NOW + 2 * 86_400_000, "ahead of the wall clock"),
    ],
)
def test_a_record_without_a_usable_event_time_fails_naming_the_record(
    extract: Any, found: str
) -> None:
    graph = define_group(
        "timed", input("events", JsonCodec(), lambda ctx, m: None, event_time=extract),
        window("w", Tumbling(minutes=1), Int64Codec()), persist(Int64Codec()),
    )  # fmt: skip
    tester = Tester(graph, now=NOW)
    with pytest.raises(ProcessingError, match=found) as caught:
        tester.consume("events", "k1", {"ts": "soon"})
    assert "topic 'events' partition 0 offset 0 key 'k1'" in str(caught.value)
    assert "'soon'" in str(caught.value)  # the value found


def test_the_future_bound_moves_with_the_wall_clock_and_is_checked_after_it_was_met() -> None:
    """The wall clock is read only for an event time past the bound it gave last
    (goka.time.event_time): a record beyond the bound still fails after records within it,
    and the same record is taken once the clock moved on."""
    graph = define_group(
        "future", input("events", JsonCodec(), lambda ctx, m: None, event_time=lambda v: v["at"]),
        window("w", Tumbling(minutes=1), Int64Codec()), persist(Int64Codec()),
        max_future=dt.timedelta(minutes=10),
    )  # fmt: skip
    tester = Tester(graph, now=NOW)
    for ahead in (0, 5, 10):  # within the bound (its edge included)
        tester.consume("events", "k", {"at": NOW + ahead * MINUTE})
    for beyond in (10 * MINUTE + 1, 11 * MINUTE):
        with pytest.raises(ProcessingError, match="ahead of the wall clock"):
            tester.consume("events", "k", {"at": NOW + beyond})
    tester.advance_time(2 * MINUTE)
    tester.consume("events", "k", {"at": NOW + 11 * MINUTE})  # (within the bound now)
    with pytest.raises(ProcessingError, match="ahead of the wall clock"):
        tester.consume("events", "k", {"at": NOW + 13 * MINUTE})


def test_record_timestamps_meet_the_future_bound_and_1970_as_extracted_times_do() -> None:
    """Without an extractor the engine takes a record's timestamp as its event time without
    a call (goka.group.firing): a timestamp past the bound, or before 1970, still fails, and
    the bound moves with the wall clock."""
    seen: list[int] = []
    graph = define_group(
        "stamps", input("events", StringCodec(), lambda ctx, m: seen.append(ctx.event_time_ms)),
        window("w", Tumbling(minutes=1), Int64Codec()), persist(Int64Codec()),
        max_future=dt.timedelta(minutes=10),
    )  # fmt: skip
    tester = Tester(graph, now=NOW)
    for ahead in (0, 5, 10):  # within the bound (its edge included)
        tester.consume("events", "k", "x", timestamp=NOW + ahead * MINUTE)
    for beyond in (10 * MINUTE + 1, 11 * MINUTE):
        with pytest.raises(ProcessingError, match="ahead of the wall clock"):
            tester.consume("events", "k", "x", timestamp=NOW + beyond)
    tester.advance_time(2 * MINUTE)
    tester.consume("events", "k", "x", timestamp=NOW + 11 * MINUTE)
    with pytest.raises(ProcessingError, match="before 1970"):
        tester.consume("events", "k", "x", timestamp=-5)
    assert seen == [NOW + m * MINUTE for m in (0, 5, 10, 11)]


def test_event_time_from_the_value_drives_windows() -> None:
    def count(ctx: Context[int], event: dict[str, Any]) -> None:
        ctx.window("minute").update(lambda n: (n or 0) + 1)

    graph = define_group(
        "by-value",
        input("events", JsonCodec(), count,
              event_time=lambda v: dt.datetime.fromisoformat(v["at"])),
        window("minute", Tumbling(minutes=1), Int64Codec()), persist(Int64Codec()),
    )  # fmt: skip
    tester = Tester(graph, now=NOW)
    tester.consume("events", "k", {"at": "2027-01-01T10:00:30+00:00"}, timestamp=NOW)
    ((window_, n),) = tester.windows("by-value", "minute", "k")
    assert window_.start_time.isoformat() == "2027-01-01T10:00:00+00:00" and n == 1


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: window("w", Tumbling(1000), Int64Codec(), emit="final"), "needs output"),
        (lambda: window("w", Tumbling(1000), Int64Codec(), grace=-1), "grace must not be"),
        (lambda: window("w", Session(1000), Int64Codec()), "need merge"),
        (lambda: window("w", Tumbling(1000), Int64Codec(), merge=max), "session windows only"),
        (lambda: window("w", 60_000, Int64Codec()), "spec must be"),  # type: ignore[arg-type]
        (lambda: window("a b", Tumbling(1000), Int64Codec()), "name must be"),
        (lambda: persist(Int64Codec(), ttl=1000), "needs ttl_domain"),
        (lambda: persist(Int64Codec(), ttl=0, ttl_domain="wall"), "must be positive"),
        (
            lambda: define_group(
                "g",
                input("i", StringCodec(), count_minutes),
                window("w", Tumbling(1000), Int64Codec()),
            ),
            "needs a persist",
        ),
        (
            lambda: define_group(
                "g",
                input("i", StringCodec(), count_minutes),
                window("w", Tumbling(1000), Int64Codec(), emit="final", output="out"),
                persist(Int64Codec()),
            ),
            "not an output",
        ),
        (
            lambda: define_group(
                "g",
                input("i", StringCodec(), count_minutes),
                timers(lambda ctx: None),
                persist(Int64Codec()),
            ),
            "(ctx, timer)",
        ),
    ],
)
def test_invalid_time_declarations_fail_at_define_group_naming_the_edge(
    build: Any, message: str
) -> None:
    with pytest.raises(GraphError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()


def test_an_expired_key_reads_as_none_in_the_record_that_finds_it_expired() -> None:
    seen: list[Any] = []

    def put(ctx: Context[int], msg: str) -> None:
        seen.append(ctx.value())
        ctx.set_value(int(msg))

    graph = define_group(
        "carts", input("items", StringCodec(), put),
        persist(Int64Codec(), ttl=10 * MINUTE, ttl_domain="stream"),
    )  # fmt: skip
    tester = Tester(graph, now=NOW)
    tester.consume("items", "a", "1", timestamp=NOW)
    tester.consume("items", "a", "2", timestamp=NOW + 11 * MINUTE)  # expired, not deleted yet
    assert seen == [None, None]
    assert tester.table("carts-table") == {"a": 2}  # set again: its TTL starts anew


def test_a_skipped_record_leaves_no_window_or_timer_change_but_moves_the_stream_time() -> None:
    """Its event time was read: the stream time moves (as Kafka Streams' does when a
    processing exception is skipped), and what that makes due fires after it; its own window
    and timer changes are undone."""
    from goka.group.engine import Engine
    from goka.storage.memory import MemoryStorage

    def flaky(ctx: Context[int], msg: str) -> None:
        ctx.window("minute").update(lambda n: (n or 0) + 1)
        ctx.schedule(dt.timedelta(minutes=1), "t")
        if msg == "bad":
            raise ValueError("bad record")

    graph = define_group(
        "flaky", input("pages", StringCodec(), flaky),
        window("minute", Tumbling(minutes=1), Int64Codec()), timers(fired),
        output("fired", JsonCodec()), persist(Int64Codec()),
    )  # fmt: skip
    timers_section, minute = MemoryStorage("t"), MemoryStorage("w")
    engine = Engine(graph, 0, store=lambda k: None, on_error="skip", timers=timers_section,
                    windows={"minute": minute}, clock=lambda: NOW)  # fmt: skip
    good = ("pages", 0, b"k", b"ok", NOW, None)
    bad = ("pages", 1, b"k", b"bad", NOW + 5 * MINUTE, None)
    result = engine.process([good, bad])
    assert [m[1] for _, m in result.failed] == [1]
    assert engine.time is not None and engine.time.stream_time == NOW + 5 * MINUTE
    window_rows = [e[2] for e in result.effects if e[0] == 4]
    assert len(set(window_rows)) == 1  # only the good record's window
    timer_rows = [(e[2], e[3] is None) for e in result.effects if e[0] == 3]
    assert ("kt\x00k", False) in timer_rows and ("kt\x00k", True) in timer_rows  # set, fired
    assert [e[5][1] for e in result.effects if e[1] == "fired"] == [1]  # (after the bad one)
    said = [
        e
        for e in result.effects
        if e[5][1] == 1
        and e[0] == 3
        and (e[2] == "s0000" or any(h == "goka-stream-time" for h, _ in e[4] or []))
    ]
    assert said  # (a replay that stops after the bad record reaches its stream time)


@pytest.mark.parametrize("changes", [False, True])
def test_a_failed_timer_undoes_only_its_own_change_of_its_key(changes: bool) -> None:
    """A timer that fails under skip restores its key's state as the timer found it: not as
    the record before it found it (it restored the record's old value, 7, over the record's
    5, which the table had; the key's next record read 7)."""
    from goka.group.effects import TABLE
    from goka.group.engine import Engine
    from goka.storage.memory import MemoryStorage

    seen: list[int | None] = []

    def record(ctx: Context[int], msg: str) -> None:
        if msg == "read":
            seen.append(ctx.value())
            return
        ctx.set_value(int(msg))
        ctx.schedule(0, "t")  # (due at once: fires after this record)

    def failing(ctx: Context[int], timer: Timer) -> None:
        if changes:
            ctx.set_value(99)
        raise ValueError("the timer fails")

    graph = define_group("undo", input("in", StringCodec(), record), persist(Int64Codec()),
                         timers(failing))  # fmt: skip
    stored = {"b": Int64Codec().encode(7)}
    engine = Engine(graph, 0, store=stored.get, on_error="skip", timers=MemoryStorage("t"),
                    windows={}, clock=lambda: NOW)  # fmt: skip
    result = engine.process([("in", 0, b"b", b"5", NOW, None), ("in", 1, b"b", b"read", NOW, None)])
    assert [str(exc.__cause__) for exc, _ in result.failed] == ["the timer fails"]
    assert [e[3] for e in result.effects if e[0] == TABLE] == [Int64Codec().encode(5)]
    assert seen == [5]


@pytest.mark.parametrize(
    ("trigger", "seconds"),
    [("200 milliseconds", 0.2), ("1 second", 1.0), ("2 minutes", 120.0), ("1 minute 30 seconds", 90.0),
     ("10 milliseconds", 0.1), ("available-now", 1.0)],
)  # fmt: skip
def test_micro_batches_tick_every_trigger_interval(trigger: str, seconds: float) -> None:
    from goka.spark.ticker import trigger_seconds

    assert trigger_seconds(trigger) == pytest.approx(seconds)


def test_a_group_that_allows_wall_timers_ticks_and_one_that_does_not_refuses_them() -> None:
    ticking = timer_graph()
    assert ticking.ticking and ticking.group.ticks in ticking.input_topics()
    stream_only = define_group(
        "stream-only", input("ops", JsonCodec(), remind), timers(fired, wall=False),
        output("fired", JsonCodec()), persist(JsonCodec()),
    )  # fmt: skip
    assert not stream_only.ticking and stream_only.input_topics() == ["ops"]
    tester = Tester(stream_only, now=NOW)
    with pytest.raises(ProcessingError, match="stream-time timers only"):
        tester.consume("ops", "a", {"op": "set", "name": "w", "at": NOW, "domain": "wall"})


def test_the_engine_skips_the_firing_only_while_nothing_can_be_due() -> None:
    """``PartitionTime.quiet``, the engine's cheap check after each record: true only while
    the stream time is below every queued stream timer and window close, and the wall clock
    below every wall timer; what is due fires all the same."""
    import json

    from goka.group.engine import Engine
    from goka.storage.memory import MemoryStorage

    wall = [NOW]
    engine = Engine(timer_graph(), 0, store=lambda k: None, timers=MemoryStorage("t"),
                    windows={}, clock=lambda: wall[0])  # fmt: skip
    time = engine.time
    assert time is not None
    offsets = iter(range(100))

    def op(when: int, **body: Any) -> list[str]:
        message = ("ops", next(offsets), b"k", json.dumps(body).encode(), when, None)
        result = engine.process([message])
        return [json.loads(e[3])["name"] for e in result.effects if e[0] == 1]  # emits

    t0 = NOW - 100 * MINUTE
    assert op(t0, op="set", at=t0 + 2 * MINUTE, name="s", domain="stream") == []
    assert op(t0 + MINUTE, op="noop") == [] and time.quiet()  # stream timer 1 min ahead
    assert op(t0 + 2 * MINUTE, op="noop") == ["s"]
    assert op(t0 + 3 * MINUTE, op="set", at=NOW + MINUTE, name="w", domain="wall") == []
    assert time.quiet()  # the wall timer is a minute ahead of the clock
    wall[0] = NOW + MINUTE
    assert not time.quiet()
    assert op(t0 + 3 * MINUTE, op="noop") == ["w"]
    assert time.quiet()  # nothing queued
