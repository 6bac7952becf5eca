"""What a readied Python worker has for a processor's first task."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from goka.errors import BrokerError
from goka.processing.builders import Builders
from goka.spark.task import _prime_clients

from .fake_kafka import FakeKafka, RecordingProducer
from .machines import CLICKS, IN, Machine, click, table_of


def test_readying_a_worker_builds_the_first_task_s_clients_and_asks_where_its_outputs_go(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    """The first task's producer is the one built when the worker was readied, which already knows the table topic's
    partitions (its first flush waited ~0.4 s for a connection and metadata otherwise)."""
    built: list[RecordingProducer] = []

    def producer(config: dict[str, Any]) -> RecordingProducer:
        built.append(kafka.producer(config))
        return built[-1]

    machine = Machine(kafka, tmp_path)
    builders = Builders(**{**machine.builders.__dict__, "producer": producer})
    machine.config = dataclasses.replace(machine.config, builders=builders)
    _prime_clients(machine.config, machine.worker)
    assert len(built) == 1 and kafka.events == [f"metadata {CLICKS.table}"]
    sent = click(kafka, 12)
    machine.catch_up(0, {IN: 0})
    assert len(built) == 1 and table_of(kafka) == dict(sent)


def test_readying_a_worker_whose_broker_does_not_answer_costs_only_its_wait(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    class Unreachable(RecordingProducer):
        def partition_count(self, topic: str, timeout: float) -> int:
            assert timeout <= 5.0  # it holds task slots the first epoch needs
            raise BrokerError(f"no Kafka broker answered within {timeout:g}s")

    machine = Machine(kafka, tmp_path)
    builders = Builders(**{**machine.builders.__dict__, "producer": lambda c: Unreachable(kafka)})
    machine.config = dataclasses.replace(machine.config, builders=builders)
    _prime_clients(machine.config, machine.worker)  # no error: the tasks report the broker's
