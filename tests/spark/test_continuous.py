"""Continuous processing on a real SparkSession and the embedded broker: epochs in which tasks
process records as they arrive."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from goka import (
    Context,
    Int64Codec,
    JsonCodec,
    StringCodec,
    define_group,
    input,
    join,
    lookup,
    loop,
    persist,
)
from goka.view import View

from ..helpers import produce, wait_for
from .fixtures import Running, clicks, count, table_of

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


@pytest.mark.smoke
def test_records_are_processed_as_they_arrive_and_stop_ends_the_epoch(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    topic = new_topic(partitions=2)
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), count), persist(Int64Codec()))
    sent = clicks(brokers, topic, 500)
    processor = make_processor(graph, mode="continuous", epoch=600,  # one epoch for the test
                               progress_interval=0.5)  # fmt: skip
    processor.prepare_topics()
    running = Running(processor)
    with View(brokers, graph.table, Int64Codec()) as view:
        view.start().wait_recovered(30)
        wait_for(lambda: dict(view.items()) == dict(sent), 120, "the first records")
        sent += clicks(brokers, topic, 300, seed=2)  # while the epoch runs
        wait_for(lambda: dict(view.items()) == dict(sent), 30, "records sent during the epoch")
    status = processor.status()["partitions"]
    wait_for(lambda: all(p["lag"] == 0 for p in processor.partition_status()), 10, "commits")
    labels = [{"group": graph.group, "topic": topic, "partition": str(p)} for p in (0, 1)]
    wait_for(lambda: sum(REGISTRY.get_sample_value("goka_processor_committed_offset", label) or 0
                         for label in labels) == 800, 10, "metrics within the epoch")  # fmt: skip
    assert all(
        REGISTRY.get_sample_value("goka_processor_lag_records", label) == 0 for label in labels
    )
    assert len(status) == 2 and all(p["committed_at"] for p in processor.partition_status())
    assert processor.totals.batches == 0  # all of it within the first epoch
    assert running.stop(within=30) < 15  # not the 600 s epoch
    (epoch,) = processor.totals.recent
    assert epoch.processed == 800 and epoch.commits >= 2
    again = make_processor(graph).run_until_caught_up(timeout=300)  # micro-batches after it
    assert again.processed == 0
    assert table_of(brokers, graph.table, Int64Codec()) == dict(sent)


def test_joins_lookups_and_loops_stay_current_across_epochs(
    brokers: str, new_topic: Callable[..., str], make_processor: Any
) -> None:
    topic, profiles = new_topic(partitions=2), new_topic(partitions=2, table=True)
    devices = new_topic(partitions=3, table=True)

    def visit(ctx: Context[Any], device: str) -> None:
        country = (ctx.join(profiles) or {}).get("country")
        ctx.set_value({"country": country, "device": ctx.lookup(devices, device)})
        ctx.loopback(f"visits-{country}", device)

    graph = define_group(
        f"{topic}-g", input(topic, StringCodec(), visit), join(profiles, JsonCodec()),
        lookup(devices, StringCodec()), loop(StringCodec(), count), persist(JsonCodec()),
    )  # fmt: skip
    produce(brokers, devices, StringCodec(), [("d1", "phone")])
    produce(brokers, profiles, JsonCodec(), [("u1", {"country": "de"})])
    processor = make_processor(graph, mode="continuous", epoch=3, snapshot_interval=0)
    processor.prepare_topics()
    running = Running(processor)
    with View(brokers, graph.table, JsonCodec()) as view:
        view.start().wait_recovered(30)
        produce(brokers, topic, StringCodec(), [("u1", "d1")])
        wait_for(lambda: view.get("u1") == {"country": "de", "device": "phone"}, 120, "a visit")
        wait_for(lambda: view.get("visits-de") == 1, 10, "the looped visit")
        produce(brokers, profiles, JsonCodec(), [("u1", {"country": "fr"})])  # while running
        produce(brokers, devices, StringCodec(), [("d2", "laptop")])
        wait_for(lambda: processor.totals.batches >= 2, 60, "two more epochs")
        produce(brokers, topic, StringCodec(), [("u1", "d2"), ("u1", "d2")])
        wait_for(lambda: view.get("visits-fr") == 2, 30, "visits after the profile changed")
        assert view.get("u1") == {"country": "fr", "device": "laptop"}
        assert view.get("visits-de") == 1
    running.stop(within=30)
    assert processor.totals.processed == 6  # 3 visits, 3 looped


@pytest.mark.parametrize("partitions", [4, 1])
def test_partitions_stay_in_the_python_worker_that_holds_their_stores_from_epoch_to_epoch(
    brokers: str, new_topic: Callable[..., str], make_processor: Any, partitions: int
) -> None:
    # Spark gives an epoch's task to whichever Python worker is idle first; the tasks claim the
    # share their worker holds (goka.processing.claims), so no store changes process after
    # the first epoch: every later epoch reuses each store where it is open (with one task
    # per epoch the two workers took it in turns, each opening the store the other had)
    topic = new_topic(partitions=partitions)
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), count), persist(Int64Codec()))
    processor = make_processor(graph, mode="continuous", epoch=1.5)
    processor.prepare_topics()
    sent: Counter[str] = Counter()
    done = threading.Event()

    def emit() -> None:
        seed = 0
        while not done.wait(0.05):  # records all along, bridges between epochs included
            seed += 1
            sent.update(clicks(brokers, topic, 20, seed=seed))

    emitter = threading.Thread(target=emit, daemon=True)
    running = Running(processor)
    emitter.start()
    try:
        wait_for(lambda: processor.totals.batches >= 5, 120, "five epochs")
    finally:
        done.set()
        emitter.join(30)
    with View(brokers, graph.table, Int64Codec()) as view:
        view.start().wait_recovered(30)
        wait_for(lambda: dict(view.items()) == dict(sent), 60, "every record counted")
    running.stop(within=60)
    stores = processor.totals.stores
    assert set(stores) <= {"created", "reused"}, stores  # none opened in another process
    assert stores["reused"] >= 4 * partitions, stores
