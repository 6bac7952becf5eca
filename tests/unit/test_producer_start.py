"""A new idempotent producer delivers only once it has its producer ID (librdkafka asks for it
half a second after the producer starts): a task waits for that before taking stores over from
a bridge elsewhere, which processes on meanwhile. And changelog rows are produced by position
only where confluent-kafka takes them so."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path

import pytest

import goka.kafka.producer as producer_module
from goka.kafka.config import producer_config
from goka.kafka.producer import (
    IDEMPOTENT_START,
    KafkaProducer,
    connect_soon,
    positional_produce,
    ready_in,
)
from goka.processing.clients import Clients

from .fake_kafka import FakeKafka, RecordingProducer
from .machines import Machine


def test_a_new_idempotent_producer_is_ready_after_its_start() -> None:
    started = time.monotonic()
    producer = KafkaProducer(producer_config("127.0.0.1:9"))  # (no broker needed to build one)
    left = ready_in(producer)
    assert IDEMPOTENT_START - (time.monotonic() - started) <= left <= IDEMPOTENT_START
    plain = KafkaProducer(producer_config("127.0.0.1:9", {"enable.idempotence": False}))
    assert ready_in(plain) == 0.0
    assert ready_in(RecordingProducer(FakeKafka())) == 0.0  # a fake: nothing to wait for


def test_a_task_waits_for_its_new_producer_unless_it_is_stopped(tmp_path: Path) -> None:
    machine = Machine(FakeKafka(), tmp_path)
    clients = Clients(machine.config, machine.worker)
    started = time.monotonic()
    clients.warm_up(lambda: False)  # the fake producer is ready at once
    assert time.monotonic() - started < 0.2
    producer = KafkaProducer(producer_config("127.0.0.1:9"))
    builders = dataclasses.replace(machine.config.builders, producer=lambda settings: producer)
    real = Clients(dataclasses.replace(machine.config, builders=builders), machine.worker)
    assert real.producer() is producer  # (built: its metadata request found no broker)
    producer.ready_at = time.monotonic() + 0.3  # its producer ID 0.3 s away
    real.warm_up(lambda: True)  # stopped: no wait
    assert ready_in(producer) > 0
    waited = time.monotonic()
    real.warm_up(lambda: False)
    assert ready_in(producer) == 0.0
    assert time.monotonic() - waited >= 0.2


def test_a_metadata_request_that_finds_no_broker_leaves_the_start_as_it_was() -> None:
    producer = KafkaProducer(producer_config("127.0.0.1:9"))
    asked = time.monotonic()
    producer.connect("t")
    assert time.monotonic() - asked < IDEMPOTENT_START + 0.5  # bounded: no hang
    assert producer.ready_at == producer.started + IDEMPOTENT_START


def test_a_metadata_request_in_the_background_holds_nothing_up_and_fails_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    producer = KafkaProducer(producer_config("127.0.0.1:9"))
    asked = time.monotonic()
    connect_soon(producer, "t")
    assert time.monotonic() - asked < 0.1
    (thread,) = [t for t in threading.enumerate() if t.name == "goka-connect-t"]
    thread.join(IDEMPOTENT_START + 0.5)
    assert not thread.is_alive()
    assert producer.ready_at == producer.started + IDEMPOTENT_START  # no broker: as it was
    failed, gate = KafkaProducer(producer_config("127.0.0.1:9")), threading.Event()
    failed.connect = lambda topic: gate.wait(5) and 1 / 0  # type: ignore[method-assign]
    caplog.set_level(logging.DEBUG, "goka.kafka.producer")
    connect_soon(failed, "u")  # (a thread's exception would fail the test as a warning)
    (thread,) = [t for t in threading.enumerate() if t.name == "goka-connect-u"]
    gate.set()
    thread.join(5)
    assert "asking u's metadata: division by zero" in caplog.text
    connect_soon(RecordingProducer(FakeKafka()), "v")  # a producer without connect: nothing
    assert not [t for t in threading.enumerate() if t.name == "goka-connect-v"]


class _DocumentedOrder:
    """A producer whose produce() takes the order confluent-kafka documents (no ``callback``
    before ``on_delivery``), as a later version might."""

    def __init__(self, config: dict[str, object]) -> None:
        pass

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                partition: int = -1, on_delivery: object = None, timestamp: int = 0,
                headers: object = None) -> None:  # fmt: skip
        raise AssertionError("not called with 8 positional arguments")


def test_changelog_rows_go_by_position_only_where_the_producer_takes_them_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    positional_produce.cache_clear()
    try:
        assert positional_produce()  # confluent-kafka as installed
        positional_produce.cache_clear()
        monkeypatch.setattr(producer_module.confluent_kafka, "Producer", _DocumentedOrder)
        assert not positional_produce()  # another order: by keyword
    finally:
        monkeypatch.undo()
        positional_produce.cache_clear()
    assert positional_produce()
