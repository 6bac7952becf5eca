"""``guarantee="exactly-once"``: a click count that also emits, for every click, which record
it was, SIGKILLed (the whole processor) inside a transaction (after its outputs were acknowledged)
and after a transaction committed but before the store was written, in micro-batches and
continuous; then a run on the same state catches up (the generated sequences of
``test_crash.py`` kill at every point, modes and machines switched). A
``read_committed`` reader of the output finds every input record exactly once, and the table
equals the counts of the input. The same kill under at-least-once repeats outputs: what the
check finds there is what exactly-once removes (that control runs in make test-slow).
Fencing: ``test_fencing.py``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from goka import StringCodec
from goka.kafka.ranges import RangeReader
from goka.topic_manager import TopicManager

from ..helpers import produce
from .told import CLICKS, PARTITIONS, USERS, inputs_of, killed_then_caught_up

pytestmark = [pytest.mark.cost(85), pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]


@pytest.mark.parametrize(("mode", "kill"), [  # (more: test_crash.py's sequences)
    ("continuous", "transaction"),
    # the other kills: make test-slow (25-45 s each; make test's generated sequences kill a
    # continuous run after a flush and a bounded one after a transaction)
    pytest.param("available-now", "flush", marks=pytest.mark.longrun),
    pytest.param("available-now", "transaction", marks=pytest.mark.longrun),
    pytest.param("continuous", "flush", marks=pytest.mark.longrun),
])  # fmt: skip
def test_killed_runs_tell_each_record_once(mode: str, kill: str, brokers: str,
                                           new_topic: Callable[..., str],
                                           tmp_path: Path) -> None:  # fmt: skip
    topic = new_topic(partitions=PARTITIONS)
    TopicManager(brokers).ensure_stream_exists(f"{topic}-seen", PARTITIONS)
    produce(brokers, topic, StringCodec(), [(f"user-{i % USERS}", "/") for i in range(CLICKS)])
    places, counts = inputs_of(brokers, topic)
    told, table = killed_then_caught_up(brokers, topic, tmp_path, "exactly-once", kill, mode)
    assert set(told) == places
    assert [p for p, n in told.items() if n > 1] == []
    assert table == counts
    if kill == "flush":  # what the killed run wrote is there, and was never read committed
        assert _uncommitted(brokers, f"{topic}-seen") > len(places)


def _uncommitted(brokers: str, topic: str) -> int:
    """How many records a ``read_uncommitted`` reader reads in ``topic``."""
    reader = RangeReader(brokers, {"isolation.level": "read_uncommitted"})
    try:
        return sum(len(chunk) for p in range(PARTITIONS)
                   for chunk in reader.read(p, {topic: reader.watermarks(topic, p)}, 30, 10_000))  # fmt: skip
    finally:
        reader.close()


@pytest.mark.longrun  # (the control of the tests above, 40 s: make test-slow)
def test_the_same_kill_under_at_least_once_tells_records_again(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    TopicManager(brokers).ensure_stream_exists(f"{topic}-seen", PARTITIONS)
    produce(brokers, topic, StringCodec(), [(f"user-{i % USERS}", "/") for i in range(CLICKS)])
    places, counts = inputs_of(brokers, topic)
    told, table = killed_then_caught_up(brokers, topic, tmp_path, "at-least-once", "flush")
    assert set(told) == places
    assert any(n > 1 for n in told.values())  # repeated after the kill...
    assert table == counts  # ...while the state stays exact
