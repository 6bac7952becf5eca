"""Running beside Go Goka on the same topics: nil values, keys of any bytes, group offsets.

Go Goka is not installable here, so its side is played by what it leaves on the broker: records
produced with raw key bytes by Sarama's partitioner, nil values, and offsets committed to the
consumer group ``<group>`` (as Sarama's offset manager commits them, without metadata).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

from goka import (
    ConfigurationError,
    Context,
    Int64Codec,
    StringCodec,
    define_group,
    input,
    join,
    key_bytes,
    persist,
)
from goka.partitioner import partition_for
from goka.view import View

from ..integration.test_any_key_bytes import GO_KEYS, read_back, written_as_go_does

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def count(ctx: Context[int], msg: Any) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


def test_a_graph_ported_from_go_counts_as_go_does_with_nil_values_and_any_key_bytes(
    brokers: str, new_topic: Callable[..., str], make_processor: Any, tmp_path: Path
) -> None:
    topic = new_topic()
    records = [(k, b"click" if i % 3 else None) for i, k in enumerate(GO_KEYS * 6)]
    written_as_go_does(brokers, topic, records)
    expected = Counter(k for k, v in records if v is not None)  # NilIgnore, Goka's default
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), count), persist(Int64Codec()))
    run = make_processor(graph).run_until_caught_up(timeout=300)
    assert run.processed == len(records)  # nil messages count as processed
    table = read_back(brokers, graph.table, 4)
    assert {k: int(v or b"0") for _, k, v in table} == expected
    assert all(p == partition_for(k, 4) for p, k, _ in table)  # where Go keeps these keys
    view = View(brokers, graph.table, Int64Codec(), path=tmp_path / "view").start()
    try:
        view.wait_recovered(60)
        assert {key_bytes(k): v for k, v in view.items()} == expected
    finally:
        view.close()


def committed_offsets(brokers: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": brokers})
    request = [confluent_kafka.ConsumerGroupTopicPartitions(str(group))]
    answer = admin.list_consumer_group_offsets(request)[str(group)].result(30)
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions}


def test_offsets_a_go_processor_committed_are_picked_up_with_starting_offsets_group(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    topic = new_topic(partitions=2)
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), count), persist(Int64Codec()))
    keys = [b"a", b"b", b"c", b"d"]
    written_as_go_does(brokers, topic, [(k, b"x") for k in keys * 10])
    ends = Counter(partition_for(k, 2) for k in keys * 10)
    # a Go processor of the group got to offset 6 of partition 0 and committed; partition 1 has
    # no commit (it starts at the earliest offset)
    go = confluent_kafka.Consumer({"bootstrap.servers": brokers, "group.id": graph.group})
    go.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 6)], asynchronous=False)
    go.close()
    run = make_processor(graph, starting_offsets="group").run_until_caught_up(timeout=300)
    assert run.processed == ends[0] - 6 + ends[1]
    table = {k: int(v or b"0") for _, k, v in read_back(brokers, graph.table, 2)}
    assert table == {b"a": 10 - 3, b"b": 10, b"c": 10 - 3, b"d": 10}  # a, c: partition 0
    # and goka-py committed where it stopped, as Go Goka would read it to take the group back
    assert committed_offsets(brokers, graph.group) == {(topic, 0): ends[0], (topic, 1): ends[1]}


def test_offsets_are_committed_to_the_group_for_inputs_but_not_for_joined_tables(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    topic, users = new_topic(partitions=2), new_topic(partitions=2, table=True)
    written_as_go_does(brokers, users, [(b"a", b"10"), (b"b", b"20")])
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), count),
                         join(users, Int64Codec()), persist(Int64Codec()))  # fmt: skip
    written_as_go_does(brokers, topic, [(k, b"x") for k in [b"a", b"b", b"c"] * 3])
    make_processor(graph).run_until_caught_up(timeout=300)
    ends = Counter(partition_for(k, 2) for k in [b"a", b"b", b"c"] * 3)
    assert committed_offsets(brokers, graph.group) == {(topic, p): ends[p] for p in ends}


def test_bad_starting_offsets_fail_at_declaration(make_processor: Any) -> None:
    graph = define_group("parity-g", input("parity-in", StringCodec(), count))
    with pytest.raises(ConfigurationError, match="starting_offsets must be earliest, latest"):
        make_processor(graph, starting_offsets="newest")
    with pytest.raises(ConfigurationError, match="starting_offsets must be"):
        make_processor(graph, starting_offsets='{"parity-in": {"0": -1}}')
