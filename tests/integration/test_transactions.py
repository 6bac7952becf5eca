"""A group partition's transactions (goka.kafka.transactions) on the development broker: what a
commit holds is read committed all at once with the group's offsets, an abort never; a twin
of the partition and a writer paused past its transaction's timeout are fenced; whether the
broker hides aborted records is found out by a probe (Tansu does not)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from goka.errors import ConfigurationError
from goka.kafka.transactions import FencedError, Transactions, isolates_aborted, probe_topic

from ..helpers import wait_for

pytestmark = pytest.mark.kafka


def _reader(brokers: str, isolation: str = "read_committed") -> Consumer:
    return Consumer({"bootstrap.servers": brokers, "group.id": "txn-readers",
                     "isolation.level": isolation, "enable.auto.commit": False})  # fmt: skip


def _values(brokers: str, topic: str, isolation: str = "read_committed") -> list[bytes]:
    """Every record of ``topic``'s partition 0 a reader of ``isolation`` reads."""
    reader = _reader(brokers, isolation)
    try:
        end = reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        reader.assign([TopicPartition(topic, 0, 0)])
        found: list[bytes] = []
        while reader.position([TopicPartition(topic, 0)])[0].offset < end:
            found += [m.value() or b"" for m in reader.consume(100, 0.5) if m.error() is None]
        return found
    finally:
        reader.close()


def _group(brokers: str, group: str) -> Any:
    return Consumer({"bootstrap.servers": brokers, "group.id": group})


def test_a_commit_shows_its_records_and_offsets_at_once_and_an_abort_never(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    out, source = new_topic(partitions=1), new_topic(partitions=1)
    group = _group(brokers, f"{out}-g")
    writer = Transactions({"bootstrap.servers": brokers}, f"{out}-g", 0)
    try:
        writer.begin()
        for value in (b"a1", b"a2"):
            writer.producer.produce(out, value, b"k", partition=0)
        writer.commit({source: 2})
        writer.begin()
        writer.producer.produce(out, b"b", b"k", partition=0)
        writer.producer.flush(10)  # on the broker, then aborted
        writer.abort()
        writer.begin()
        writer.producer.produce(out, b"c", b"k", partition=0)
        writer.commit({source: 3})
        assert _values(brokers, out) == [b"a1", b"a2", b"c"]
        assert _values(brokers, out, "read_uncommitted") == [b"a1", b"a2", b"b", b"c"]
        committed = group.committed([TopicPartition(source, 0)], timeout=10)
        assert committed[0].offset == 3
    finally:
        writer.close()
        group.close()


def test_a_twin_of_a_partition_fences_the_first_at_its_next_write(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    out = new_topic(partitions=1)
    name = f"{out}-g"
    first = Transactions({"bootstrap.servers": brokers}, name, 3)
    first.begin()
    first.producer.produce(out, b"zombie", b"k", partition=0)
    first.producer.flush(10)
    twin = Transactions({"bootstrap.servers": brokers}, name, 3)  # as Spark running it again
    try:
        with pytest.raises(FencedError) as fenced:
            first.commit({out: 1})
        assert fenced.value.transactional_id == f"{name}-3"
        assert f"group {name!r} partition 3: fenced by a newer writer" in str(fenced.value)
        twin.begin()
        twin.producer.produce(out, b"twin", b"k", partition=0)
        twin.commit({})
        assert _values(brokers, out) == [b"twin"]
    finally:
        first.close()
        twin.close()


def test_a_writer_paused_past_its_transaction_timeout_is_fenced(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    out = new_topic(partitions=1)
    writer = Transactions({"bootstrap.servers": brokers}, f"{out}-g", 0,
                          transaction_timeout_ms=1_000)  # fmt: skip
    reader = _reader(brokers)
    try:
        writer.begin()
        writer.producer.produce(out, b"late", b"k", partition=0)
        writer.producer.flush(10)
        part = TopicPartition(out, 0)
        # the broker aborts it (its check runs every 10 s): the stable end reaches the end
        wait_for(lambda: reader.get_watermark_offsets(part, timeout=10, cached=False)[1] >= 2,
                 timeout=60, what="the broker aborting the transaction")  # fmt: skip
        with pytest.raises(FencedError):
            writer.commit({out: 1})
        assert _values(brokers, out) == []
    finally:
        reader.close()
        writer.close()


@pytest.mark.smoke
def test_the_probe_finds_whether_aborted_records_are_hidden(
    brokers: str, request: pytest.FixtureRequest
) -> None:
    kind = request.config.getoption("--broker")
    assert isolates_aborted({"bootstrap.servers": brokers}, "probing-g") is (kind == "kafka")
    # settings scoped to one kind of client reach only those (a consumer's made the probe's
    # transactional producer refuse to start: an exactly-once processor never began)
    scoped = {"bootstrap.servers": brokers, "consumer.fetch.wait.max.ms": 10,
              "producer.linger.ms": 1}  # fmt: skip
    assert isolates_aborted(scoped, "probing-g") is (kind == "kafka")


def test_probes_of_processors_starting_at_once_do_not_fence_each_other(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    """Each probe has a transactional id of its own, under ``<group>-``: two processors of a
    group starting at once both find the brokers isolating (one probe id for every processor
    made the later start fence the other's probe, and the first failed naming a group of
    goka's own)."""
    from concurrent.futures import ThreadPoolExecutor

    group = f"{new_topic()}-g"
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda _: isolates_aborted({"bootstrap.servers": brokers}, group),
                              range(4)))  # fmt: skip
    assert found == [True] * 4
    assert probe_topic(group) == f"{group}-transactions-check"


@pytest.mark.smoke
def test_an_exactly_once_processor_starts_only_where_aborted_records_are_hidden(
    brokers: str, new_topic: Callable[..., str], request: pytest.FixtureRequest
) -> None:
    from goka import Int64Codec, StringCodec, define_group, input, persist
    from goka.spark import Processor
    from goka.tester import Tester  # the tester takes the setting and ignores it

    topic = new_topic(partitions=1)
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), _count), persist(Int64Codec()))
    processor = Processor(graph, brokers, guarantee="exactly-once")
    if request.config.getoption("--broker") == "kafka":
        assert processor.prepare_topics() == 1
    else:
        with pytest.raises(ConfigurationError, match=rf"group '{topic}-g': guarantee="
                           r"'exactly-once' needs brokers that hide aborted transactions"):  # fmt: skip
            processor.prepare_topics()
    tester = Tester(graph, guarantee="exactly-once")
    tester.consume(topic, "k", "/")
    assert tester.table_value(graph.table, "k") == 1


def _count(ctx: Any, page: str) -> None:
    ctx.set_value((ctx.value() or 0) + 1)
