"""A processor whose input or group table comes back shorter (deleted and created again; on
Tansu, the broker replaced without its data) fails with the topic, partition and offsets instead of
skipping records and ending with wrong state, in micro-batch and continuous mode."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from goka import Int64Codec, StringCodec, define_group, input, persist
from goka.dev.broker import EmbeddedBroker
from goka.group.graph import GroupGraph
from goka.spark import Processor, ProcessorFailed
from goka.topic_manager import TopicManager

from ..helpers import wait_for
from ..integration.rewinds import gone
from .fixtures import Running, clicks, count, table_of

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


@pytest.fixture
def graph() -> GroupGraph:
    """The count group of this test's own: group ``rewound-<n>`` on input ``clicks-<n>``."""
    n = next(_tests)
    return define_group(f"rewound-{n}", input(f"clicks-{n}", StringCodec(), count),
                        persist(Int64Codec()))  # fmt: skip


_tests = itertools.count()


def topic(graph: GroupGraph) -> str:
    return next(iter(graph.inputs))


def processor(spark: Any, broker: EmbeddedBroker, graph: GroupGraph, tmp_path: Path,
              **options: Any) -> Processor:  # fmt: skip
    made = Processor(graph, broker.bootstrap, spark=spark, state_dir=tmp_path / "state",
                     checkpoint_dir=tmp_path / "checkpoint", **options)  # fmt: skip
    made.prepare_topics()
    return made


#: For a processor started on the replaced broker. Python workers keep Kafka clients between
#: tasks, keyed by their settings: an idempotent producer of the old broker never delivers to
#: the new one (it times out: a DeliveryError instead of the rewound topic this file is about;
#: the worker then builds a new one, but only for the next task).
NEW_CLIENTS = {"kafka_config": {"client.id": "after-replace"}}


def replace(broker: EmbeddedBroker, graph: GroupGraph, records: int) -> None:
    """The input and the group table gone (deleted; on Tansu, with the broker), the input
    written again with ``records``."""
    gone(broker, topic(graph), graph.table)
    TopicManager(broker.bootstrap).ensure_stream_exists(topic(graph), 2)
    clicks(broker.bootstrap, topic(graph), records, seed=7)


def test_an_input_that_came_back_shorter_fails_the_batch_query(
    spark: Any, broker: EmbeddedBroker, graph: GroupGraph, tmp_path: Path
) -> None:
    TopicManager(broker.bootstrap).ensure_stream_exists(topic(graph), 2)
    sent = clicks(broker.bootstrap, topic(graph), 300)
    processor(spark, broker, graph, tmp_path).run_until_caught_up(timeout=120)
    assert table_of(broker.bootstrap, graph.table, Int64Codec()) == dict(sent)
    replace(broker, graph, 40)
    with pytest.raises(
        ProcessorFailed,
        match=rf"TopicRewoundError: topic '{topic(graph)}' partition \d "
        rf"ends at offset \d+, but group '{graph.group}' has read it up to offset \d+",
    ):
        processor(spark, broker, graph, tmp_path, **NEW_CLIENTS).run_until_caught_up(timeout=120)


def test_a_group_table_that_came_back_empty_fails_before_a_commit(
    spark: Any, broker: EmbeddedBroker, graph: GroupGraph, tmp_path: Path
) -> None:
    TopicManager(broker.bootstrap).ensure_stream_exists(topic(graph), 2)
    clicks(broker.bootstrap, topic(graph), 300)
    processor(spark, broker, graph, tmp_path).run_until_caught_up(timeout=120)
    replace(broker, graph, 400)  # the input is longer than before; the group table is empty
    with pytest.raises(ProcessorFailed, match=rf"TopicRewoundError: topic '{graph.table}' "
                       rf"partition \d ends at offset \d+, but group '{graph.group}'"):  # fmt: skip
        processor(spark, broker, graph, tmp_path, **NEW_CLIENTS).run_until_caught_up(timeout=120)


def test_an_input_that_comes_back_shorter_during_an_epoch_fails_the_continuous_query(
    spark: Any, broker: EmbeddedBroker, graph: GroupGraph, tmp_path: Path
) -> None:
    TopicManager(broker.bootstrap).ensure_stream_exists(topic(graph), 2)
    sent = clicks(broker.bootstrap, topic(graph), 300)
    running = Running(processor(spark, broker, graph, tmp_path, mode="continuous", epoch=600))
    wait_for(lambda: table_of(broker.bootstrap, graph.table, Int64Codec()) == dict(sent), 120,
             "the first records")  # fmt: skip
    replace(broker, graph, 40)
    running.thread.join(60)
    assert not running.thread.is_alive(), "still running a minute after its input went back"
    assert isinstance(running.error, ProcessorFailed)
    assert f"TopicRewoundError: topic '{topic(graph)}' partition" in str(running.error)
