from __future__ import annotations

from typing import Any

import pytest

from goka import (
    CodecError,
    ConfigurationError,
    Context,
    Emitter,
    GokaError,
    Int64Codec,
    JsonCodec,
    ProcessingError,
    StringCodec,
    define_group,
    input,
    join,
    lookup,
    loop,
    output,
    persist,
)
from goka.partitioner import partition_for
from goka.tester import Tester


def count(ctx: Context[int], m: Any) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


CLICKS = define_group("clicks", input("user-clicks", StringCodec(), count), persist(Int64Codec()))


def test_consume_runs_the_callback_and_keeps_state() -> None:
    tester = Tester(CLICKS)
    for user in ["alice", "bob", "alice"]:
        tester.consume("user-clicks", user, "/home")
    assert tester.table_value("clicks-table", "alice") == 2
    assert tester.table_value("clicks-table", "bob") == 1
    assert tester.table_value("clicks-table", "carol") is None
    assert tester.table("clicks-table") == {"alice": 2, "bob": 1}


def test_table_updates_and_tombstones_are_written_to_the_table_topic() -> None:
    def handle(ctx: Context[int], m: str) -> None:
        ctx.delete() if m == "reset" else count(ctx, m)

    tester = Tester(define_group("g", input("in", StringCodec(), handle), persist(Int64Codec())))
    tester.consume("in", "k", "+")
    tester.consume("in", "k", "reset")
    assert [(r.key, r.value, r.offset) for r in tester.messages("g-table")] == [
        ("k", b"1", 0),
        ("k", None, 1),
    ]
    assert tester.table_value("g-table", "k") is None


def test_groups_are_connected_through_their_topics() -> None:
    """A counts clicks and announces milestones; B consumes them and joins A's table."""

    def announce(ctx: Context[int], page: str) -> None:
        total = (ctx.value() or 0) + 1
        ctx.set_value(total)
        if total % 2 == 0:
            ctx.emit("milestones", ctx.key, {"clicks": total, "page": page})

    def record(ctx: Context[Any], event: dict[str, Any]) -> None:
        ctx.set_value(
            {"event": event, "table": ctx.join("a-table"), "vip": ctx.lookup("vips", ctx.key)}
        )

    a = define_group("a", input("clicks", StringCodec(), announce), output("milestones", JsonCodec()),
                     persist(Int64Codec()))  # fmt: skip
    b = define_group("b", input("milestones", JsonCodec(), record), join("a-table", Int64Codec()),
                     lookup("vips", StringCodec()), persist(JsonCodec()))  # fmt: skip
    tester = Tester(a, b)
    tester.set_table_value("vips", "ann", "gold")
    tracker = tester.queue_tracker("milestones")
    for page in ["/1", "/2", "/3", "/4"]:
        tester.consume("clicks", "ann", page)
    assert tester.table_value("b-table", "ann") == {
        "event": {"clicks": 4, "page": "/4"},
        "table": 4,
        "vip": "gold",
    }
    assert list(tracker) == [
        ("ann", {"clicks": 2, "page": "/2"}),
        ("ann", {"clicks": 4, "page": "/4"}),
    ]


def test_loopback_messages_are_delivered_automatically() -> None:
    """Re-key clicks by page through the loop topic and count per page."""

    def by_user(ctx: Context[Any], page: str) -> None:
        ctx.loopback(page, ctx.key)

    def by_page(ctx: Context[int], user: str) -> None:
        count(ctx, user)

    graph = define_group("pages", input("clicks", StringCodec(), by_user),
                         loop(StringCodec(), by_page), persist(Int64Codec()))  # fmt: skip
    tester = Tester(graph)
    for user, page in [("a", "/x"), ("b", "/x"), ("a", "/y")]:
        tester.consume("clicks", user, page)
    assert tester.table("pages-table") == {"/x": 2, "/y": 1}
    assert [(r.key, r.value) for r in tester.messages("pages-loop")] == [
        ("/x", b"a"),
        ("/x", b"b"),
        ("/y", b"a"),
    ]


def test_queue_tracker_starts_at_the_end_and_reports_positions() -> None:
    graph = define_group("g", input("in", StringCodec(), lambda ctx, m: ctx.emit("out", ctx.key, m)),
                         output("out", StringCodec()))  # fmt: skip
    tester = Tester(graph)
    tester.consume("in", "early", "not seen")
    tracker = tester.queue_tracker("out")
    assert (tracker.hwm, tracker.next_offset, len(tracker), tracker.next()) == (1, 1, 0, None)
    tester.consume("in", "k1", "v1")
    tester.consume("in", "k2", "v2")
    assert tracker.hwm == 3 and len(tracker) == 2
    assert tracker.next() == ("k1", "v1")
    assert tracker.next_offset == 2
    assert list(tracker) == [("k2", "v2")]
    assert tracker.next() is None


def test_values_go_through_the_real_codecs() -> None:
    graph = define_group("g", input("in", Int64Codec(), lambda ctx, m: ctx.emit("out", ctx.key, m)),
                         output("out", StringCodec()))  # fmt: skip
    tester = Tester(graph)
    with pytest.raises(CodecError, match="int64 codec: expected int, got str"):
        tester.consume("in", "k", "12")
    with pytest.raises(ProcessingError, match="string codec: expected str, got int") as info:
        tester.consume("in", "k", 12)  # the callback emits an int to a string topic
    assert info.value.topic == "in" and info.value.key == "k"


def test_bad_raw_input_fails_like_in_production() -> None:
    strict = define_group("clicks", input("user-clicks", StringCodec(strict=True), count),
                          persist(Int64Codec()))  # fmt: skip
    tester = Tester(strict)
    with pytest.raises(
        ProcessingError, match=r"cannot decode the value: string codec: invalid UTF-8"
    ):
        tester.consume_raw("user-clicks", "k", b"\xff")
    assert tester.table_value("clicks-table", "k") is None


def test_the_tester_follows_nil_handling_and_takes_any_key_bytes() -> None:
    seen: list[Any] = []

    def note(ctx: Context[int], msg: str | None) -> None:
        seen.append((ctx.raw_key, msg))
        ctx.set_value((ctx.value() or 0) + 1)

    for nil_handling, calls in [("ignore", 1), ("process", 2)]:
        seen.clear()
        graph = define_group("g", input("in", StringCodec(), note), persist(Int64Codec()),
                             nil_handling=nil_handling)  # type: ignore[arg-type]  # fmt: skip
        tester = Tester(graph)
        tester.consume("in", b"\xff\x00", None)
        tester.consume("in", b"\xff\x00", "v\udcfe")  # lossless: any value bytes too
        assert len(seen) == calls
        assert seen[-1] == (b"\xff\x00", "v\udcfe")
        assert tester.table_value("g-table", b"\xff\x00") == calls
        assert tester.table_value("g-table", "\udcff\x00") == calls  # the same key as str


def test_unknown_topics_and_tables_are_reported() -> None:
    tester = Tester(CLICKS)
    with pytest.raises(ConfigurationError, match="no registered group declares topic 'nope'"):
        tester.consume("nope", "k", "v")
    with pytest.raises(ConfigurationError, match="'nope' is not a table of a registered group"):
        tester.table_value("nope", "k")
    with pytest.raises(ConfigurationError, match="group 'clicks' is already registered"):
        tester.add(CLICKS)
    with pytest.raises(
        ConfigurationError, match="on_error one of .* got 'at-least-once', 'ignore'"
    ):
        Tester(CLICKS, on_error="ignore")  # type: ignore[arg-type]


def test_groups_feeding_each_other_forever_are_stopped() -> None:
    a = define_group("a", input("ping", StringCodec(), lambda ctx, m: ctx.emit("pong", ctx.key, m)),
                     output("pong", StringCodec()))  # fmt: skip
    b = define_group("b", input("pong", StringCodec(), lambda ctx, m: ctx.emit("ping", ctx.key, m)),
                     output("ping", StringCodec()))  # fmt: skip
    with pytest.raises(GokaError, match="caused more than 50 messages"):
        Tester(a, b, max_messages=50).consume("ping", "k", "v")


def test_messages_are_spread_over_partitions_like_goka() -> None:
    seen: dict[str, int] = {}
    graph = define_group(
        "g", input("in", StringCodec(), lambda ctx, m: seen.setdefault(ctx.key, ctx.partition))
    )
    tester = Tester(graph, partitions=8)
    keys = [f"user-{i}" for i in range(40)]
    for key in keys:
        tester.consume("in", key, "v")
    assert seen == {key: partition_for(key.encode(), 8) for key in keys}
    assert len(set(seen.values())) > 4


def test_an_emitter_can_write_into_the_tester() -> None:
    tester = Tester(CLICKS)
    with Emitter(
        "unused", "user-clicks", StringCodec(), producer_builder=tester.producer_builder
    ) as emitter:
        delivery = emitter.emit_sync("dora", "/home")
        emitter.emit("dora", "/about").result(timeout=5)
    assert (delivery.topic, delivery.offset) == ("user-clicks", 0)
    assert tester.table_value("clicks-table", "dora") == 2
