"""Processor groups on a real local SparkSession against the embedded broker."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from prometheus_client import REGISTRY

from goka import (
    Context,
    Int64Codec,
    JsonCodec,
    StringCodec,
    TopicError,
    TopicManager,
    define_group,
    input,
    inputs,
    join,
    lookup,
    loop,
    output,
    persist,
)
from goka.kafka.consumer import read_to_end
from goka.spark import ProcessorFailed
from goka.topic_manager import TopicManagerConfig

from ..helpers import produce, wait_for
from .fixtures import clicks, count, table_of
from .truth import stores

pytestmark = [pytest.mark.cost(75), pytest.mark.spark, pytest.mark.kafka]


@pytest.mark.smoke
def test_click_count_restart_from_checkpoint(
    brokers: str, new_topic: Callable[..., str], make_processor: Any, tmp_path: Path
) -> None:
    topic = new_topic(partitions=4)
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), count), persist(Int64Codec()))
    sent = clicks(brokers, topic, 3_000)
    first = make_processor(graph).run_until_caught_up(timeout=300)
    assert first.processed == 3_000
    assert table_of(brokers, graph.table, Int64Codec()) == dict(sent)
    # the run ended: the Python workers let go of its stores (LevelDB admits one process)
    assert stores(tmp_path / "state", graph.group, graph.table)[0] == dict(sent)
    sent += clicks(brokers, topic, 500, seed=2)
    second = make_processor(graph).run_until_caught_up(timeout=300)  # same checkpoint
    assert second.processed == 500  # only the new input
    assert second.skipped_applied == 0 and second.stores["rebuilt"] == 0
    assert table_of(brokers, graph.table, Int64Codec()) == dict(sent)


@pytest.mark.parametrize("snapshots", [True, False], ids=["restored", "rebuilt"])
def test_a_lost_state_directory_is_restored_from_snapshots_or_rebuilt_from_the_table(
    snapshots: bool, brokers: str, new_topic: Callable[..., str], make_processor: Any,
    tmp_path: Path,
) -> None:  # fmt: skip
    topic = new_topic(partitions=2)
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), count), persist(Int64Codec()))
    interval = 30.0 if snapshots else 0.0
    sent = clicks(brokers, topic, 1_000)
    make_processor(graph, snapshot_interval=interval).run_until_caught_up(timeout=300)
    published = tmp_path / "checkpoint" / "state" / graph.group
    if snapshots:  # the first commit of each partition is snapshotted, uploaded in background
        wait_for(lambda: all(any((published / f"{p}" / "manifests").glob("*.json"))
                             for p in (0, 1)), 60, "a snapshot of each partition")  # fmt: skip
    shutil.rmtree(tmp_path / "state" / graph.group)  # a new machine, a lost disk
    sent += clicks(brokers, topic, 300, seed=3)
    run = make_processor(graph, snapshot_interval=interval).run_until_caught_up(timeout=300)
    stores = run.stores
    assert stores["restored" if snapshots else "rebuilt"] == 2, stores
    assert stores["rebuilt" if snapshots else "restored"] == 0
    assert run.table_records == (0 if snapshots else 1_000)
    assert table_of(brokers, graph.table, Int64Codec()) == dict(sent)
    assert published.exists() == snapshots
    origin = "restored" if snapshots else "rebuilt"
    for partition in ("0", "1"):  # the first run created both stores, the second recovered them
        labels = {"group": graph.group, "partition": partition}
        assert REGISTRY.get_sample_value("goka_processor_store_recoveries_total",
                                         {**labels, "origin": origin}) == 1  # fmt: skip
    restored = REGISTRY.get_sample_value("goka_processor_restored_bytes_total",
                                         {"group": graph.group})  # fmt: skip
    assert (restored is not None and restored > 0) == snapshots


def test_delete_writes_tombstones(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    topic = new_topic(partitions=2)

    def handle(ctx: Context[int], msg: str) -> None:
        ctx.delete() if msg == "forget" else count(ctx, msg)

    graph = define_group(f"{topic}-g", input(topic, StringCodec(), handle), persist(Int64Codec()))
    produce(brokers, topic, StringCodec(), [("a", "+"), ("b", "+"), ("a", "+"), ("a", "forget")])
    make_processor(graph).run_until_caught_up(timeout=300)
    assert table_of(brokers, graph.table, Int64Codec()) == {"b": 1}
    records = [r for r in read_to_end(brokers, graph.table) if r.key == b"a"]
    assert [r.value for r in records] == [b"1", b"2", None]
    assert dict(records[-1].headers)["goka-src-topic"] == topic.encode()


def test_multiple_inputs(brokers: str, new_topic: Callable[..., str], make_processor: Any) -> None:
    a, b = new_topic(partitions=3), new_topic(partitions=3)
    graph = define_group(f"{a}-g", inputs([a, b], StringCodec(), count), persist(Int64Codec()))
    produce(brokers, a, StringCodec(), [("k", "x")] * 5)
    produce(brokers, b, StringCodec(), [("k", "y")] * 7 + [("j", "y")])
    make_processor(graph).run_until_caught_up(timeout=300)
    assert table_of(brokers, graph.table, Int64Codec()) == {"k": 12, "j": 1}


def test_join_reads_the_copartitioned_table(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    topic, profiles = new_topic(partitions=4), new_topic(partitions=4, table=True)

    def enrich(ctx: Context[Any], page: str) -> None:
        profile = ctx.join(profiles) or {}
        ctx.set_value({"page": page, "country": profile.get("country")})

    graph = define_group(f"{topic}-g", input(topic, StringCodec(), enrich),
                         join(profiles, JsonCodec()), persist(JsonCodec()))  # fmt: skip
    produce(brokers, profiles, JsonCodec(), [(f"u{i}", {"country": f"c{i}"}) for i in range(20)])
    produce(brokers, topic, StringCodec(), [(f"u{i}", f"/p{i}") for i in range(25)])
    make_processor(graph).run_until_caught_up(timeout=300)
    result = table_of(brokers, graph.table, JsonCodec())
    assert result["u3"] == {"page": "/p3", "country": "c3"}
    assert result["u22"] == {"page": "/p22", "country": None}


def test_lookup_reads_any_key(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    topic, devices = (
        new_topic(partitions=2),
        new_topic(partitions=3, table=True),
    )  # not co-partitioned

    def handle(ctx: Context[Any], device: str) -> None:
        ctx.set_value(ctx.lookup(devices, device) or "unknown")

    graph = define_group(f"{topic}-g", input(topic, StringCodec(), handle),
                         lookup(devices, StringCodec()), persist(StringCodec()))  # fmt: skip
    produce(brokers, devices, StringCodec(), [("d1", "phone"), ("d2", "laptop")])
    produce(brokers, topic, StringCodec(), [("alice", "d1"), ("bob", "d2"), ("carol", "d9")])
    make_processor(graph).run_until_caught_up(timeout=300)
    assert table_of(brokers, graph.table, StringCodec()) == {
        "alice": "phone",
        "bob": "laptop",
        "carol": "unknown",
    }


def test_loop_rekeys_messages(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    topic = new_topic(partitions=3)

    def by_user(ctx: Context[Any], page: str) -> None:
        ctx.loopback(page, ctx.key)

    graph = define_group(f"{topic}-g", input(topic, StringCodec(), by_user),
                         loop(StringCodec(), count), persist(Int64Codec()))  # fmt: skip
    pages = Counter()
    items = []
    for i in range(200):
        page = f"/page-{i % 7}"
        pages[page] += 1
        items.append((f"user-{i % 13}", page))
    produce(brokers, topic, StringCodec(), items)
    assert make_processor(graph).run_until_caught_up(timeout=300).loopbacks == 200
    assert table_of(brokers, graph.table, Int64Codec()) == dict(pages)


def test_emit_to_an_output_topic(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    topic, out = new_topic(partitions=2), new_topic(partitions=2)

    def shout(ctx: Context[Any], text: str) -> None:
        ctx.emit(out, ctx.key, text.upper(), headers={"origin": b"test"})

    graph = define_group(
        f"{topic}-g", input(topic, StringCodec(), shout), output(out, StringCodec())
    )
    produce(brokers, topic, StringCodec(), [("a", "hi"), ("b", "there")])
    make_processor(graph).run_until_caught_up(timeout=300)
    emitted = {r.key: (r.value, dict(r.headers)) for r in read_to_end(brokers, out)}
    assert emitted == {b"a": (b"HI", {"origin": b"test"}), b"b": (b"THERE", {"origin": b"test"})}


def _bad_input(brokers: str, topic: str) -> None:
    produce(brokers, topic, StringCodec(), [("k", "1"), ("k", "2")])
    with __import__("goka").Emitter(brokers, topic, __import__("goka").BytesCodec()) as emitter:
        emitter.emit_sync("poison", b"not a number")
    produce(brokers, topic, StringCodec(), [("k", "3")])


def test_fail_policy_stops_the_query_naming_the_message(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    topic = new_topic(partitions=1)
    graph = define_group(f"{topic}-g", input(topic, Int64Codec(), count), persist(Int64Codec()))
    _bad_input(brokers, topic)
    with pytest.raises(
        ProcessorFailed,
        match=rf"group '{graph.group}': topic '{topic}' partition 0 offset 2 key 'poison': cannot decode the value: int64 codec",
    ):
        make_processor(graph).run_until_caught_up(timeout=300)


def test_skip_policy_counts_and_goes_on(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    topic = new_topic(partitions=1)
    graph = define_group(f"{topic}-g", input(topic, Int64Codec(), count), persist(Int64Codec()))
    _bad_input(brokers, topic)
    before = (
        REGISTRY.get_sample_value(
            "goka_processor_failed_messages_total", {"group": graph.group, "policy": "skip"}
        )
        or 0
    )
    run = make_processor(graph, on_error="skip").run_until_caught_up(timeout=300)
    assert run.failed == 1
    assert "offset 2 key 'poison'" in run.errors[0]
    assert table_of(brokers, graph.table, Int64Codec()) == {"k": 3}
    after = REGISTRY.get_sample_value(
        "goka_processor_failed_messages_total", {"group": graph.group, "policy": "skip"}
    )
    assert after == before + 1


def test_dead_letter_policy_writes_the_raw_record(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    topic = f"{new_topic()}-big"  # a topic that takes records of up to 10 MB
    big = TopicManagerConfig(stream_config={"max.message.bytes": "10000000"})
    TopicManager(brokers, big).ensure_stream_exists(topic, 1)
    graph = define_group(f"{topic}-g", input(topic, Int64Codec(), count), persist(Int64Codec()))
    _bad_input(brokers, topic)
    huge = b"9" * 3_000_000 + b"x"  # not a number, and three times the producer's limit
    failed: list[Any] = []
    with confluent_kafka.Producer({"bootstrap.servers": brokers,
                                   "message.max.bytes": 10_000_000}) as producer:  # fmt: skip
        producer.produce(topic, huge, b"huge", on_delivery=lambda err, _: failed.append(err))
        assert producer.flush(30) == 0 and failed == [None]
    produce(brokers, topic, StringCodec(), [("k", "4")])
    run = make_processor(graph, on_error="dead-letter").run_until_caught_up(timeout=300)
    assert run.dead_letters == 2
    letter, cut = list(read_to_end(brokers, f"{graph.group}-dlq"))
    headers = dict(letter.headers)
    assert (letter.key, letter.value) == (b"poison", b"not a number")
    assert headers["goka-src-topic"] == topic.encode() and headers["goka-src-offset"] == b"2"
    assert b"cannot decode the value" in headers["goka-error"]
    assert "goka-truncated" not in headers
    headers = dict(cut.headers)
    assert headers["goka-truncated"] == b"true" and headers["goka-original-size"] == b"3000001"
    assert cut.key == b"huge" and 900_000 < len(cut.value) < 1_000_000
    assert cut.value == huge[: len(cut.value)] and headers["goka-src-offset"] == b"4"
    assert table_of(brokers, graph.table, Int64Codec()) == {"k": 4}  # nothing else lost


def test_max_offsets_per_trigger_splits_batches(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    topic = new_topic(partitions=2)
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), count), persist(Int64Codec()))
    sent = clicks(brokers, topic, 1_000)
    run = make_processor(graph, max_offsets_per_trigger=300).run_until_caught_up(timeout=300)
    assert run.batches >= 4 and all(b.processed <= 300 for b in run.recent)
    assert table_of(brokers, graph.table, Int64Codec()) == dict(sent)


def test_inputs_not_copartitioned_fail_at_start(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    a, b = new_topic(partitions=2), new_topic(partitions=3)
    graph = define_group(f"{a}-g", inputs([a, b], StringCodec(), count), persist(Int64Codec()))
    with pytest.raises(TopicError, match=rf"not co-partitioned .*'{a}': 2, '{b}': 3"):
        make_processor(graph).run_until_caught_up(timeout=60)
    missing = define_group("missing-g", input("no-such-input", StringCodec(), count))
    with pytest.raises(TopicError, match="topics do not exist: 'no-such-input'"):
        make_processor(missing).run_until_caught_up(timeout=60)
    assert TopicManager(brokers).exists(a)


def test_a_failed_delivery_fails_the_batch_and_nothing_is_lost(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    """Table records over the producer's size limit fail their message (under ``fail``, the
    query); no state is committed, so a run with a sane limit ends exact."""
    topic = new_topic(partitions=2)

    def pad(ctx: Context[str], msg: str) -> None:
        ctx.set_value((ctx.value() or "") + msg)

    graph = define_group(f"{topic}-g", input(topic, StringCodec(), pad), persist(StringCodec()))
    produce(brokers, topic, StringCodec(), [("k", "x" * 600)] * 4 + [("j", "y")])
    tight = {"message.max.bytes": 2000}
    with pytest.raises(ProcessorFailed, match="MessageTooLargeError: .* over the limit of 1,500"):
        make_processor(graph, producer_config=tight).run_until_caught_up(timeout=300)
    assert table_of(brokers, graph.table, StringCodec()).get("k", "") != "x" * 2400
    make_processor(graph).run_until_caught_up(timeout=300)
    assert table_of(brokers, graph.table, StringCodec()) == {"k": "x" * 2400, "j": "y"}


def test_starting_offsets_latest_and_explicit(
    brokers: str, new_topic: Callable[..., str], make_processor: Any, tmp_path: Path
) -> None:
    topic = new_topic(partitions=1)
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), count), persist(Int64Codec()))
    produce(brokers, topic, StringCodec(), [("old", "x")] * 10)
    latest = make_processor(graph, starting_offsets="latest")
    assert latest.run_until_caught_up(timeout=300).processed == 0
    produce(brokers, topic, StringCodec(), [("new", "x")] * 5)
    again = make_processor(graph, starting_offsets="latest")
    assert again.run_until_caught_up(timeout=300).processed == 5
    assert table_of(brokers, graph.table, Int64Codec()) == {"new": 5}
    explicit = define_group(f"{topic}-e", input(topic, StringCodec(), count), persist(Int64Codec()))
    run = make_processor(
        explicit,
        starting_offsets=f'{{"{topic}": {{"0": 8}}}}',
        checkpoint_dir=tmp_path / "explicit",
    ).run_until_caught_up(timeout=300)
    assert run.processed == 7  # offsets 8..14
    assert table_of(brokers, explicit.table, Int64Codec()) == {"old": 2, "new": 5}


def test_a_checkpoint_of_another_query_is_refused_by_name(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    """Two groups given one checkpoint directory: the second says so, not a KeyError."""
    first, second = new_topic(), new_topic()
    clicks(brokers, first, 20)
    clicks(brokers, second, 20)
    one = define_group(f"{first}-g", input(first, StringCodec(), count), persist(Int64Codec()))
    two = define_group(f"{second}-g", input(second, StringCodec(), count), persist(Int64Codec()))
    make_processor(one).run_until_caught_up(timeout=300)
    with pytest.raises(ProcessorFailed, match="another query's checkpoint"):
        make_processor(two).run_until_caught_up(timeout=300)
