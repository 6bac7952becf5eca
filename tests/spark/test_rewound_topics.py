"""A processor whose input or group table comes back shorter (here: the broker replaced
without its data, as the issue saw it) fails with the topic, partition and offsets instead of
skipping records and ending with wrong state, in micro-batch and continuous mode."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from goka import Int64Codec, StringCodec, define_group, input, persist
from goka.dev.broker import EmbeddedBroker
from goka.spark import Processor, ProcessorFailed
from goka.topic_manager import TopicManager

from ..helpers import wait_for
from ..integration.rewinds import gone
from .fixtures import Running, clicks, count, table_of

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

GRAPH = define_group("rewound", input("clicks", StringCodec(), count), persist(Int64Codec()))


@pytest.fixture
def broker(make_broker: Callable[..., EmbeddedBroker]) -> EmbeddedBroker:
    """A broker of this test's own (of the session's kind), to be replaced."""
    return make_broker()


def processor(spark: Any, broker: EmbeddedBroker, tmp_path: Path, **options: Any) -> Processor:
    made = Processor(GRAPH, broker.bootstrap, spark=spark, state_dir=tmp_path / "state",
                     checkpoint_dir=tmp_path / "checkpoint", **options)  # fmt: skip
    made.prepare_topics()
    return made


#: For a processor started on the replaced broker. Python workers keep Kafka clients between
#: tasks, keyed by their settings: an idempotent producer of the old broker never delivers to
#: the new one (it times out: a DeliveryError instead of the rewound topic this file is about;
#: the worker then builds a new one, but only for the next task).
NEW_CLIENTS = {"kafka_config": {"client.id": "after-replace"}}


def replace(broker: EmbeddedBroker, records: int) -> None:
    """``clicks`` and the group table gone (deleted; on Tansu, with the broker), ``clicks``
    written again with ``records``."""
    gone(broker, "clicks", GRAPH.table)
    TopicManager(broker.bootstrap).ensure_stream_exists("clicks", 2)
    clicks(broker.bootstrap, "clicks", records, seed=7)


def test_an_input_that_came_back_shorter_fails_the_batch_query(
    spark: Any, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    TopicManager(broker.bootstrap).ensure_stream_exists("clicks", 2)
    sent = clicks(broker.bootstrap, "clicks", 300)
    processor(spark, broker, tmp_path).run_until_caught_up(timeout=120)
    assert table_of(broker.bootstrap, GRAPH.table, Int64Codec()) == dict(sent)
    replace(broker, 40)
    with pytest.raises(
        ProcessorFailed,
        match=r"TopicRewoundError: topic 'clicks' partition \d "
        r"ends at offset \d+, but group 'rewound' has read it up to offset \d+",
    ):
        processor(spark, broker, tmp_path, **NEW_CLIENTS).run_until_caught_up(timeout=120)


def test_a_group_table_that_came_back_empty_fails_before_a_commit(
    spark: Any, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    TopicManager(broker.bootstrap).ensure_stream_exists("clicks", 2)
    clicks(broker.bootstrap, "clicks", 300)
    processor(spark, broker, tmp_path).run_until_caught_up(timeout=120)
    replace(broker, 400)  # the input is longer than before; the group table is empty
    with pytest.raises(ProcessorFailed, match=r"TopicRewoundError: topic 'rewound-table' "
                       r"partition \d ends at offset \d+, but group 'rewound'"):  # fmt: skip
        processor(spark, broker, tmp_path, **NEW_CLIENTS).run_until_caught_up(timeout=120)


def test_an_input_that_comes_back_shorter_during_an_epoch_fails_the_continuous_query(
    spark: Any, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    TopicManager(broker.bootstrap).ensure_stream_exists("clicks", 2)
    sent = clicks(broker.bootstrap, "clicks", 300)
    running = Running(processor(spark, broker, tmp_path, mode="continuous", epoch=600))
    wait_for(lambda: table_of(broker.bootstrap, GRAPH.table, Int64Codec()) == dict(sent), 120,
             "the first records")  # fmt: skip
    replace(broker, 40)
    running.thread.join(60)
    assert not running.thread.is_alive(), "still running a minute after its input went back"
    assert isinstance(running.error, ProcessorFailed)
    assert "TopicRewoundError: topic 'clicks' partition" in str(running.error)
