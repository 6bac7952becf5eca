"""Under exactly-once a continuous task starts its partitions' transactional producers before
it leases their stores (``goka.processing.exactly_once.start_early``): a bridge in another
process that holds them processes on meanwhile. The task then takes the producer it started,
not a third one, and one that this process has as the latest is kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from goka.errors import DeliveryError
from goka.processing.clients import Clients
from goka.processing.exactly_once import ExactlyOnce, start_early

from .fake_kafka import FakeKafka
from .machines import FakeTransactions, Machine, exactly_once, with_builders


def test_a_task_takes_the_producer_started_before_its_lease(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    started: list[FakeTransactions] = []

    def build(*args: Any) -> FakeTransactions:
        started.append(FakeTransactions(kafka, *args))
        return started[-1]

    machine = with_builders(exactly_once(Machine(kafka, tmp_path)), transactions=build)
    clients = Clients(machine.config, machine.worker)
    writer = machine.config.store_path("partition", 0).with_suffix(".writer")
    writer.parent.mkdir(parents=True)
    kept = clients.transactions(0, None)  # an earlier task's, named as the latest
    writer.write_text(kept.token)
    start_early(machine.config, clients, [0])
    assert len(started) == 1  # the latest: kept
    writer.write_text("a bridge's in another process")
    start_early(machine.config, clients, [0])
    assert len(started) == 2  # started now, fencing the bridge
    assert clients.transactions(0, writer.read_text()) is started[1]  # the task takes it
    assert clients.transactions(0, writer.read_text()) is not started[1]  # once only
    assert len(started) == 3


def test_a_commit_sends_the_group_offsets_before_it_waits_for_the_outputs(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    # the offsets' requests overlap the last outputs' acknowledgements; the transaction
    # commits only once they are all acknowledged, and a failed wait commits nothing
    calls: list[str] = []

    class Recording(FakeTransactions):
        def send_offsets(self, offsets: Any) -> None:
            calls.append(f"offsets {dict(offsets)}")
            super().send_offsets(offsets)

        def commit(self, offsets: Any = None) -> None:
            calls.append("commit")
            super().commit(offsets)

    machine = with_builders(exactly_once(Machine(kafka, tmp_path)),
                            transactions=lambda *args: Recording(kafka, *args))  # fmt: skip
    clients = Clients(machine.config, machine.worker)
    writer = machine.config.store_path("partition", 0).with_suffix(".writer")
    exactly = ExactlyOnce(clients, 0, ["in"], writer=writer)
    assert exactly.commit({"in": 7, "joined": 3}, lambda: calls.append("acknowledged") or 5) == 5
    assert calls == ["offsets {'in': 7}", "acknowledged", "commit"]
    assert kafka.committed[(machine.config.graph.group, "in", 0)][0] == 7

    def refused() -> None:
        raise DeliveryError("out", "k", "refused")

    calls.clear()
    with pytest.raises(DeliveryError):
        exactly.commit({"in": 9}, refused)
    assert calls == ["offsets {'in': 9}"]  # not committed
    assert kafka.committed[(machine.config.graph.group, "in", 0)][0] == 7
