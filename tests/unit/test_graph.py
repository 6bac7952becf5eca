from __future__ import annotations

from typing import Any

import pytest

from goka import (
    GraphError,
    Int64Codec,
    JsonCodec,
    StringCodec,
    Table,
    Tumbling,
    define_group,
    input,
    inputs,
    join,
    lookup,
    loop,
    output,
    persist,
    timers,
    window,
)


def cb(ctx: Any, msg: Any) -> None:
    pass


S, I, J = StringCodec(), Int64Codec(), JsonCodec()


def test_every_edge_type_lands_in_the_graph() -> None:
    graph = define_group(
        "g",
        input("clicks", S, cb),
        inputs(["a", "b"], J, cb),
        output("out", J),
        loop(S, cb),
        join("profiles-table", J),
        lookup("devices-table", J),
        persist(I),
    )
    assert list(graph.inputs) == ["clicks", "a", "b"]
    assert list(graph.outputs) == ["out"]
    assert list(graph.joins) == ["profiles-table"] and list(graph.lookups) == ["devices-table"]
    assert graph.loop is not None and graph.loop.codec is S
    assert graph.persist is not None and graph.persist.codec is I
    assert graph.table == "g-table" and isinstance(graph.table, Table)
    assert graph.loop_topic == "g-loop"
    assert graph.input_topics() == ["clicks", "a", "b", "g-loop"]
    assert graph.copartitioned_topics() == [
        "clicks",
        "a",
        "b",
        "g-loop",
        "profiles-table",
        "g-table",
    ]


def test_describe_lists_every_edge() -> None:
    graph = define_group("g", input("clicks", S, cb), persist(I), loop(S, cb), output("out", J))
    assert graph.describe() == "\n".join([
        "group g",
        "  input   clicks (string) -> cb",
        "  loop    g-loop (string) -> cb",
        "  persist g-table (int64)",
        "  output  out (json)",
    ])  # fmt: skip
    assert repr(graph) == "GroupGraph('g', 1 inputs, table=True)"


def test_callables_of_any_kind_with_two_arguments_are_accepted() -> None:
    class Handler:
        def __call__(self, ctx: Any, msg: Any) -> None:
            pass

    define_group("g", input("a", S, Handler()), input("b", S, lambda ctx, msg: None),
                 input("c", S, lambda *args: None))  # fmt: skip


# -- one test per validation rule ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "has space", "x" * 244, "ümlaut"])
def test_rule_1_group_name_must_be_a_topic_prefix(name: str) -> None:
    with pytest.raises(GraphError, match=f"group name {name!r} is invalid"):
        define_group(name, input("a", S, cb))


def test_rule_2_at_least_one_input() -> None:
    with pytest.raises(GraphError, match="group 'g': needs at least one input edge"):
        define_group("g", persist(I), loop(S, cb))


def test_rule_3_at_most_one_persist() -> None:
    with pytest.raises(GraphError, match="group 'g': 2 persist edges, at most one"):
        define_group("g", input("a", S, cb), persist(I), persist(S))


def test_rule_3_at_most_one_loop() -> None:
    with pytest.raises(GraphError, match="group 'g': 2 loop edges, at most one"):
        define_group("g", input("a", S, cb), loop(S, cb), loop(S, cb))


def test_rule_4_no_topic_declared_twice() -> None:
    with pytest.raises(GraphError, match="topic a declared twice .input and output edges"):
        define_group("g", input("a", S, cb), output("a", S))


def test_rule_4_input_may_not_be_the_own_loop_topic() -> None:
    with pytest.raises(GraphError, match="input edge g-loop is already the group's loop topic"):
        define_group("g", input("g-loop", S, cb), loop(S, cb))


def test_rule_5_outputs_may_not_write_the_group_table() -> None:
    with pytest.raises(
        GraphError, match="output edge g-table writes the group's persist topic; use ctx.set_value"
    ):
        define_group("g", input("a", S, cb), output("g-table", S))


def test_rule_5_outputs_may_not_write_the_loop_topic() -> None:
    with pytest.raises(
        GraphError, match="output edge g-loop writes the group's loop topic; use ctx.loopback"
    ):
        define_group("g", input("a", S, cb), output("g-loop", S))


@pytest.mark.parametrize("edge", [join, lookup])
def test_rule_6_join_and_lookup_may_not_read_the_own_table(edge: Any) -> None:
    with pytest.raises(GraphError, match=f"{edge.__name__} edge g-table is the group's own table"):
        define_group("g", input("a", S, cb), persist(I), edge("g-table", S))


@pytest.mark.parametrize("codec", [None, "json", object()])
def test_rule_7_every_edge_needs_a_codec(codec: Any) -> None:
    with pytest.raises(GraphError, match="group 'g': output edge out: needs a codec with encode"):
        define_group("g", input("a", S, cb), output("out", codec))


def test_rule_7_persist_needs_a_codec() -> None:
    with pytest.raises(GraphError, match="group 'g': persist edge: needs a codec"):
        define_group("g", input("a", S, cb), persist(None))  # type: ignore[arg-type]


def test_rule_8_callbacks_must_be_callable() -> None:
    with pytest.raises(GraphError, match="input edge a: callback must be callable, got 'nope'"):
        define_group("g", input("a", S, "nope"))  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [lambda ctx: None, lambda ctx, msg, extra: None, lambda: None])
def test_rule_8_callbacks_take_ctx_and_msg(bad: Any) -> None:
    with pytest.raises(
        GraphError, match=r"input edge a: callback .*lambda.* must accept \(ctx, msg\)"
    ):
        define_group("g", input("a", S, bad))


def test_rule_8_loop_callbacks_are_checked_too() -> None:
    with pytest.raises(GraphError, match=r"loop edge: callback .* must accept \(ctx, msg\)"):
        define_group("g", input("a", S, cb), loop(S, lambda: None))


def test_rule_8_async_callbacks_are_refused_where_they_are_not_awaited() -> None:
    async def handler(ctx: Any, msg: Any) -> None:
        pass

    with pytest.raises(GraphError, match="late: callback .*handler is async; use a def"):
        window("w", Tumbling(minutes=1), S, late=handler)
    assert define_group("g", input("a", S, handler)).concurrency == 1  # (an input's: awaited)
    assert define_group("g", input("a", S, cb), persist(S), timers(handler))  # (awaited too)


@pytest.mark.parametrize("topic", ["", "with space", "a/b", "x" * 250])
def test_rule_9_topic_names_are_valid(topic: str) -> None:
    with pytest.raises(GraphError, match="topic name .* is invalid"):
        define_group("g", input(topic, S, cb))


def test_non_edges_are_refused() -> None:
    with pytest.raises(GraphError, match="expected an edge .input, output, join, ...., got 42"):
        define_group("g", input("a", S, cb), 42)  # type: ignore[arg-type]


def test_graphs_are_immutable() -> None:
    graph = define_group("g", input("a", S, cb))
    with pytest.raises(AttributeError):
        graph.group = "other"  # type: ignore[misc]


def test_load_graph_imports_module_attribute() -> None:
    from examples.click_count.group import graph
    from goka import ConfigurationError
    from goka.group.graph import load_graph

    assert load_graph("examples.click_count.group:graph") is graph
    with pytest.raises(ConfigurationError, match="expected module:attribute, got 'nope'"):
        load_graph("nope")
    with pytest.raises(ConfigurationError, match="cannot import 'no_such_module'"):
        load_graph("no_such_module:graph")
    with pytest.raises(
        ConfigurationError, match="examples.click_count.group:TOPIC is not a group graph"
    ):
        load_graph("examples.click_count.group:TOPIC")
