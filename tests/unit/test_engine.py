"""The engine core and the context callbacks see, driven directly (no tester, no Kafka)."""

from __future__ import annotations

import datetime as dt
import gc
from typing import Any

import pytest

from goka import (
    CodecError,
    ConfigurationError,
    ContextError,
    GraphError,
    Int64Codec,
    JsonCodec,
    MessageTooLargeError,
    ProcessingError,
    StringCodec,
    define_group,
    input,
    join,
    key_bytes,
    lookup,
    loop,
    output,
    persist,
)
from goka.group.context import Context
from goka.group.effects import EMIT, LOOP, TABLE, Message
from goka.group.engine import Engine


def msg(offset: int, key: str | None, value: bytes | None, topic: str = "in", *,
        timestamp: int = 1_700_000_000_000, headers: Any = None) -> Message:  # fmt: skip
    return (topic, offset, None if key is None else key.encode(), value, timestamp, headers)


def counter(ctx: Context[int], m: Any) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


COUNT = define_group("count", input("in", StringCodec(), counter), persist(Int64Codec()))


def test_state_changes_are_visible_to_the_next_message_of_the_key() -> None:
    engine = Engine(COUNT, 0, store={}.get)
    result = engine.process([msg(0, "a", b"x"), msg(1, "b", b"x"), msg(2, "a", b"x")])
    assert [(e[0], e[1], e[2], e[3]) for e in result.effects] == [
        (TABLE, "count-table", "a", b"1"),
        (TABLE, "count-table", "b", b"1"),
        (TABLE, "count-table", "a", b"2"),
    ]
    assert result.changes() == {"a": b"2", "b": b"1"}
    assert result.processed == 3


def test_committed_state_is_read_from_the_store() -> None:
    store = {"a": b"41"}
    result = Engine(COUNT, 0, store=store.get).process([msg(5, "a", b"x")])
    assert result.changes() == {"a": b"42"}


def test_every_effect_names_its_source_message() -> None:
    message = msg(7, "a", b"x")
    (effect,) = Engine(COUNT, 0, store={}.get).process([message]).effects
    assert effect[5] is message


def test_context_describes_the_message() -> None:
    seen: dict[str, Any] = {}

    def inspect(ctx: Context[Any], m: Any) -> None:
        seen.update(group=ctx.group, topic=ctx.topic, partition=ctx.partition, offset=ctx.offset,
                    key=ctx.key, timestamp=ctx.timestamp, ms=ctx.timestamp_ms,
                    headers=ctx.headers, msg=m, repr=repr(ctx))  # fmt: skip

    graph = define_group("g", input("in", JsonCodec(), inspect))
    Engine(graph, 3, store={}.get).process(
        [msg(9, "k", b'{"n":1}', timestamp=1_700_000_000_123, headers=[("h", b"v")])]
    )
    assert seen == {
        "group": "g", "topic": "in", "partition": 3, "offset": 9, "key": "k",
        "timestamp": dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC),
        "ms": 1_700_000_000_123, "headers": {"h": b"v"}, "msg": {"n": 1},
        "repr": "<Context group='g' topic='in' partition=3 offset=9 key='k'>",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("nil_handling", "codec", "expected"),
    [
        ("ignore", StringCodec(), [("", "v")]),  # Goka's default: NilIgnore
        ("process", StringCodec(), [("k", None), ("", "v")]),
        ("decode", StringCodec(), [("k", ""), ("", "v")]),  # Go decodes a nil slice
        ("decode", JsonCodec(), "cannot decode the value: json codec"),  # as Go's would fail
    ],
)
def test_nil_values_are_handled_as_goka_does_and_missing_keys_are_empty(
    nil_handling: Any, codec: Any, expected: Any
) -> None:
    seen: list[Any] = []
    graph = define_group("g", input("in", codec, lambda ctx, m: seen.append((ctx.key, m))),
                         nil_handling=nil_handling)  # fmt: skip
    messages = [msg(0, "k", None), msg(1, None, b'"v"' if codec.name == "json" else b"v")]
    if isinstance(expected, str):
        with pytest.raises(ProcessingError, match=f"offset 0 key 'k': {expected}"):
            Engine(graph, 0, store={}.get).process(messages)
        return
    result = Engine(graph, 0, store={}.get).process(messages)
    assert seen == expected
    assert result.processed == 2  # an ignored message still counts: its offset is committed


def test_nil_handling_is_checked_at_declaration() -> None:
    with pytest.raises(GraphError, match="nil_handling must be one of"):
        define_group("g", input("in", StringCodec(), lambda ctx, m: None), nil_handling="drop")  # type: ignore[arg-type]  # the error under test


def test_delete_writes_a_tombstone_and_forgets_the_value() -> None:
    values: list[Any] = []

    def handle(ctx: Context[int], m: str) -> None:
        if m == "del":
            ctx.delete()
        else:
            values.append(ctx.value())

    graph = define_group("g", input("in", StringCodec(), handle), persist(Int64Codec()))
    result = Engine(graph, 0, store={"k": b"5"}.get).process(
        [msg(0, "k", b"get"), msg(1, "k", b"del"), msg(2, "k", b"get")]
    )
    assert values == [5, None]
    assert [(e[0], e[2], e[3]) for e in result.effects] == [(TABLE, "k", None)]
    assert result.changes() == {"k": None}


def test_emit_and_loopback_keep_their_order_with_table_updates() -> None:
    def handle(ctx: Context[int], m: Any) -> None:
        ctx.emit("out", "x-" + ctx.key, {"seen": m}, headers={"trace": b"1"})
        ctx.set_value(1)
        ctx.loopback("other", "again")
        ctx.emit("out", "gone", None)

    graph = define_group("g", input("in", StringCodec(), handle), output("out", JsonCodec()),
                         loop(StringCodec(), lambda ctx, m: None), persist(Int64Codec()))  # fmt: skip
    result = Engine(graph, 0, store={}.get).process([msg(0, "k", b"v")])
    assert [e[:5] for e in result.effects] == [
        (EMIT, "out", "x-k", b'{"seen":"v"}', [("trace", b"1")]),
        (TABLE, "g-table", "k", b"1", None),
        (LOOP, "g-loop", "other", b"again", None),
        (EMIT, "out", "gone", None, None),
    ]


def test_loop_messages_are_routed_to_the_loop_callback() -> None:
    seen: list[Any] = []
    graph = define_group("g", input("in", StringCodec(), lambda ctx, m: None),
                         loop(JsonCodec(), lambda ctx, m: seen.append((ctx.topic, ctx.key, m))))  # fmt: skip
    Engine(graph, 0, store={}.get).process([msg(0, "k", b"[1]", topic="g-loop")])
    assert seen == [("g-loop", "k", [1])]


def test_join_reads_the_same_key_and_lookup_any_key() -> None:
    seen: list[Any] = []

    def handle(ctx: Context[Any], m: str) -> None:
        seen.append((ctx.join("profiles"), ctx.lookup("devices", m), ctx.lookup("devices", "none")))

    graph = define_group("g", input("in", StringCodec(), handle), join("profiles", JsonCodec()),
                         lookup("devices", StringCodec()))  # fmt: skip
    tables = {"profiles": {"alice": b'{"age":30}'}.get, "devices": {"d1": b"phone"}.get}
    Engine(graph, 0, store={}.get, tables=tables).process([msg(0, "alice", b"d1")])
    assert seen == [({"age": 30}, "phone", None)]


def test_tables_without_readers_are_refused_at_construction() -> None:
    graph = define_group("g", input("in", StringCodec(), counter), join("profiles", JsonCodec()))
    with pytest.raises(ConfigurationError, match=r"group 'g': no reader for tables \['profiles'\]"):
        Engine(graph, 0, store={}.get)


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="on_error must be one of"):
        Engine(COUNT, 0, store={}.get, on_error="ignore")  # type: ignore[arg-type]


def _fails(graph: Any, message: Message, match: str, **kwargs: Any) -> ProcessingError:
    with pytest.raises(ProcessingError, match=match) as info:
        Engine(graph, 2, store={}.get, **kwargs).process([msg(0, "ok", b"v"), message])
    return info.value


@pytest.mark.parametrize(
    ("handler", "expected", "cause"),
    [
        (lambda ctx, m: ctx.emit("nowhere", "k", "v"),
         "cannot emit to 'nowhere': not an output edge .outputs: none.", ContextError),
        (lambda ctx, m: ctx.loopback("k", "v"), "has no loop edge", ContextError),
        (lambda ctx, m: ctx.set_value(1), "has no persist edge; declare persist", ContextError),
        (lambda ctx, m: ctx.value(), "has no persist edge, so keys have no value", ContextError),
        (lambda ctx, m: ctx.delete(), "has no persist edge", ContextError),
        (lambda ctx, m: ctx.join("t"), "'t' is not a join table .joins: none.", ContextError),
        (lambda ctx, m: ctx.lookup("t", "k"), "'t' is not a lookup table", ContextError),
        (lambda ctx, m: 1 / 0, "callback .*<lambda> raised ZeroDivisionError: division by zero", ZeroDivisionError),
    ],
)  # fmt: skip
def test_misuse_and_exceptions_name_the_message(handler: Any, expected: str, cause: type) -> None:
    graph = define_group(
        "g", input("in", StringCodec(), lambda ctx, m: m == "bad" and handler(ctx, m))
    )
    error = _fails(graph, msg(41, "user-1", b"bad"), expected)
    assert (error.group, error.topic, error.partition, error.offset, error.key) == (
        "g",
        "in",
        2,
        41,
        "user-1",
    )
    assert str(error).startswith("group 'g': topic 'in' partition 2 offset 41 key 'user-1': ")
    assert isinstance(error.__cause__, cause)


def test_set_value_none_is_refused() -> None:
    graph = define_group("g", input("in", StringCodec(), lambda ctx, m: ctx.set_value(None)),
                         persist(Int64Codec()))  # fmt: skip
    _fails(graph, msg(1, "k", b"v"), r"set_value\(None\) is not allowed; call delete\(\)")


def test_values_the_codec_cannot_encode_fail_the_message() -> None:
    graph = define_group("g", input("in", StringCodec(), lambda ctx, m: ctx.set_value("text")),
                         persist(Int64Codec()))  # fmt: skip
    error = _fails(graph, msg(1, "k", b"v"), "int64 codec: expected int, got str")
    assert isinstance(error.__cause__, CodecError)


def test_undecodable_values_fail_with_the_codec_error() -> None:
    graph = define_group("g", input("in", Int64Codec(), lambda ctx, m: None))
    error = _fails(
        graph, msg(3, "k", b"twelve"), "cannot decode the value: int64 codec: expected decimal"
    )
    assert isinstance(error.__cause__, CodecError)


def test_keys_of_any_bytes_are_processed_and_written_back_unchanged() -> None:
    raw = [b"\xff\xfe", b"caf\xc3\xa9", b"\xc3", b"\xed\xa0\x80", b"\x00k"]  # Go keys: any bytes
    seen: list[tuple[str, bytes | None]] = []

    def handle(ctx: Context[int], m: str) -> None:
        seen.append((ctx.key, ctx.raw_key))
        ctx.set_value(len(ctx.key))
        ctx.emit("out", ctx.key, m)

    graph = define_group("g", input("in", StringCodec(), handle), output("out", StringCodec()),
                         persist(Int64Codec()))  # fmt: skip
    result = Engine(graph, 0, store={}.get).process(
        [("in", i, k, b"v", 0, None) for i, k in enumerate(raw)]
    )
    assert [r for _, r in seen] == raw
    assert seen[1][0] == "café"  # UTF-8 text is the same str as before
    assert [key_bytes(e[2]) for e in result.effects if e[0] == EMIT] == raw
    assert sorted(key_bytes(k) for k in result.changes()) == sorted(raw)


def test_unknown_topics_fail() -> None:
    graph = define_group("g", input("in", StringCodec(), lambda ctx, m: None))
    _fails(graph, msg(3, "k", b"v", topic="elsewhere"), "no input edge for topic 'elsewhere'")


def test_errors_name_the_failing_records_own_key() -> None:
    graph = define_group("g", input("in", StringCodec(strict=True), lambda ctx, m: None))
    engine = Engine(graph, 0, store={}.get)
    engine.process([msg(0, "before", b"ok")])
    with pytest.raises(ProcessingError) as info:
        engine.process([("in", 1, b"\xffk", b"\xfe", 0, None)])
    assert "offset 1 key b'\\xffk': cannot decode the value: string codec: invalid UTF-8" in str(
        info.value
    )
    assert key_bytes(info.value.key or "") == b"\xffk"
    with pytest.raises(ProcessingError, match="offset 2 key 'after': cannot decode"):
        engine.process([("in", 2, b"after", b"\xfe", 0, None)])


def _flaky(ctx: Context[int], m: str) -> None:
    ctx.set_value((ctx.value() or 0) + 1)
    ctx.emit("out", ctx.key, m)
    if m == "boom":
        raise RuntimeError("boom")


FLAKY = define_group("g", input("in", StringCodec(), _flaky), output("out", StringCodec()),
                     persist(Int64Codec()))  # fmt: skip


@pytest.mark.parametrize("policy", ["skip", "dead-letter"])
def test_skip_policies_roll_back_the_failed_message(policy: Any) -> None:
    messages = [msg(0, "k", b"a"), msg(1, "k", b"boom"), msg(2, "k", b"b")]
    result = Engine(FLAKY, 0, store={}.get, on_error=policy).process(messages)
    assert [(e[0], e[3]) for e in result.effects] == [
        (TABLE, b"1"),
        (EMIT, b"a"),
        (TABLE, b"2"),
        (EMIT, b"b"),
    ]  # the failed message's table update and emit are gone; its count did not stick
    ((error, failed),) = result.failed
    assert failed is messages[1]
    assert error.offset == 1 and isinstance(error.__cause__, RuntimeError)


def test_ctx_fail_stops_processing_whatever_the_policy() -> None:
    def handle(ctx: Context[Any], m: str) -> None:
        ctx.fail(ValueError("poison"))

    graph = define_group("g", input("in", StringCodec(), handle))
    with pytest.raises(ProcessingError, match=r"ctx.fail\(\): poison") as info:
        Engine(graph, 0, store={}.get, on_error="skip").process([msg(0, "k", b"v")])
    assert isinstance(info.value.__cause__, ValueError)


def test_mutable_state_is_not_shared_between_messages() -> None:
    seen: list[Any] = []

    def handle(ctx: Context[dict[str, int]], m: str) -> None:
        state = ctx.value() or {"n": 0}
        seen.append(dict(state))
        state["n"] += 100  # mutated, never set: must not leak into the next message
        if m == "set":
            ctx.set_value({"n": 1})

    graph = define_group("g", input("in", StringCodec(), handle), persist(JsonCodec()))
    Engine(graph, 0, store={"k": b'{"n":5}'}.get).process(
        [msg(0, "k", b"get"), msg(1, "k", b"get"), msg(2, "k", b"set"), msg(3, "k", b"get")]
    )
    assert seen == [{"n": 5}, {"n": 5}, {"n": 5}, {"n": 1}]


def test_gc_is_paused_during_a_batch_and_restored() -> None:
    states: list[bool] = []
    graph = define_group(
        "g", input("in", StringCodec(), lambda ctx, m: states.append(gc.isenabled()))
    )
    Engine(graph, 0, store={}.get).process([msg(0, "k", b"v")])
    Engine(graph, 0, store={}.get, pause_gc=False).process([msg(0, "k", b"v")])
    assert states == [False, True]
    assert gc.isenabled()


def test_a_batch_is_independent_of_the_previous_one() -> None:
    engine = Engine(COUNT, 0, store={}.get)  # the driver did not commit batch 1
    engine.process([msg(0, "a", b"x")])
    assert engine.process([msg(1, "a", b"x")]).changes() == {"a": b"1"}


def _big(ctx: Context[str], m: str) -> None:
    if m.startswith("emit"):
        ctx.emit("out", ctx.key, m)
    elif m.startswith("loop"):
        ctx.loopback(ctx.key, m)
    else:
        ctx.set_value(m)


BIG = define_group("big", input("in", StringCodec(), _big), output("out", StringCodec()),
                   loop(StringCodec(), _big), persist(StringCodec()))  # fmt: skip


@pytest.mark.parametrize(
    ("value", "topic"), [("x" * 101, "big-table"), ("emit" + "x" * 97, "out"),
                         ("loop" + "x" * 97, "big-loop")],
)  # fmt: skip
def test_values_over_the_producers_limit_fail_their_message_under_the_policy(
    value: str, topic: str
) -> None:
    messages = [msg(0, "k", b"small"), msg(1, "k", value.encode()), msg(2, "k", b"fine")]
    with pytest.raises(ProcessingError) as failed:
        Engine(BIG, 0, store={}.get, max_message_bytes=100).process(messages)
    text = str(failed.value)
    assert f"the value for topic {topic!r} key 'k' is 101 bytes, over the limit of 100" in text
    assert failed.value.offset == 1 and isinstance(failed.value.__cause__, MessageTooLargeError)
    result = Engine(BIG, 0, store={}.get, max_message_bytes=100, on_error="skip").process(messages)
    assert [e[3] for e in result.effects] == [b"small", b"fine"]  # the big one left no trace
    assert [m[1] for _, m in result.failed] == [1]
    assert Engine(BIG, 0, store={}.get).process(messages).failed == []  # no limit by default


def test_a_message_without_a_key_has_no_state_and_never_changes_the_empty_keys() -> None:
    def forward(ctx: Context[int], m: str) -> None:
        ctx.emit("out", ctx.raw_key or b"none", m)  # stateless use of keyless records is fine

    stateless = define_group("s", input("in", StringCodec(), forward), output("out", StringCodec()))
    result = Engine(stateless, 0, store={}.get).process([msg(0, None, b"a")])
    assert [(e[2], e[3]) for e in result.effects] == [("none", b"a")]
    messages = [msg(0, "", b"x"), msg(1, None, b"y"), msg(2, "", b"z")]
    with pytest.raises(ProcessingError, match="offset 1 has no key .null., so it has no state"):
        Engine(COUNT, 0, store={}.get).process(messages)
    result = Engine(COUNT, 0, store={}.get, on_error="skip").process(messages)
    assert [(e[2], e[3]) for e in result.effects] == [("", b"1"), ("", b"2")]  # "" counted twice
    assert [m[1] for _, m in result.failed] == [1]
