"""A processor's producer on the development broker gets its producer ID at once: librdkafka's
idempotent producer asks for it as it starts, finds no broker connection up and asks again
half a second later, unless a metadata request connected it first
(:meth:`goka.kafka.producer.KafkaProducer.connect`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from goka import StringCodec, TopicManager, define_group, input, persist
from goka.kafka.config import producer_config
from goka.kafka.producer import CONNECTED_START, IDEMPOTENT_START, KafkaProducer, ready_in
from goka.processing.clients import Clients
from goka.processing.config import TaskConfig
from goka.processing.worker import Worker

pytestmark = pytest.mark.kafka


def _first_delivery(producer: Any, topic: str, started: float) -> float:
    """Seconds from ``started`` to the delivery report of a first record to ``topic``."""
    delivered: list[tuple[Any, float]] = []
    producer.produce(topic, b"v", b"k", partition=0,
                     on_delivery=lambda e, m: delivered.append((e, time.monotonic())))  # fmt: skip
    assert producer.flush(10) == 0
    error, at = delivered[0]
    assert error is None
    return at - started


def test_a_processors_producer_delivers_at_once_not_after_librdkafkas_retry(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=1)
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), lambda ctx, m: None),
                         persist(StringCodec()))  # fmt: skip
    TopicManager(brokers).ensure_table_exists(graph.table, 1)
    warm = KafkaProducer(producer_config(brokers))  # (a new broker's first producer ID waits
    _first_delivery(warm, topic, warm.started)  # for its coordinator to load: not measured)
    worker = Worker()
    try:
        clients, took = Clients(TaskConfig(graph, brokers, state_dir=str(tmp_path)), worker), []
        for _ in range(7):  # (now and then one still waits for the retry: 1 start in 16)
            started = time.monotonic()
            producer = clients.producer()
            assert isinstance(producer, KafkaProducer) and producer.idempotent
            assert ready_in(producer) <= CONNECTED_START  # warm_up waits no more than that
            took.append(_first_delivery(producer, topic, started))
            clients.discard_producer()
        assert sum(t < IDEMPOTENT_START for t in took) >= 4, took
        # the same producer built bare waits for librdkafka's retry: what the test stands on
        bare = KafkaProducer(producer_config(brokers, {"linger.ms": 10}))
        assert _first_delivery(bare, topic, bare.started) >= IDEMPOTENT_START
    finally:
        worker.close()
