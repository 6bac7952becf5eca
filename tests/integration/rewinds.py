"""Topics that come back shorter: a topic deleted and created again, or, on Tansu, a broker
replaced without its data (deleting a topic there crashes the librdkafka clients that hold it in
their metadata: :mod:`goka.kafka.quirks`)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from goka import StringCodec, TopicManager
from goka.dev import EmbeddedBroker

from ..helpers import produce


@pytest.fixture
def broker(
    kafka_broker: EmbeddedBroker, make_broker: Callable[..., EmbeddedBroker]
) -> EmbeddedBroker:
    """The session's broker on Apache Kafka (a topic goes away by deletion there); a broker of
    this test's own on Tansu (it is replaced). For tests of rewound topics (a plugin of
    tests/conftest.py)."""
    return kafka_broker if kafka_broker.kind == "kafka" else make_broker()


def gone(broker: EmbeddedBroker, *topics: str) -> None:
    """Make ``topics`` go away: deleted (Apache Kafka), or every topic with the broker (Tansu)."""
    if broker.kind == "tansu":
        broker.restart()
        return
    manager = TopicManager(broker.bootstrap)
    for topic in topics:
        if manager.exists(topic):
            manager.delete(topic)


def write(broker: EmbeddedBroker, topic: str, records: int, *, replace: bool = False) -> None:
    """Create ``topic`` (one partition) with ``records`` records, after it went away if
    ``replace`` (see :func:`gone`)."""
    if replace:
        gone(broker, topic)
    TopicManager(broker.bootstrap).ensure_stream_exists(topic, 1)
    produce(broker.bootstrap, topic, StringCodec(), [(f"k{i}", "v") for i in range(records)])


def without(
    session: EmbeddedBroker, make_broker: Callable[..., EmbeddedBroker], *topics: str
) -> EmbeddedBroker:
    """A broker on which ``topics`` (fixed names of an example) do not exist: the session's
    with them deleted (Apache Kafka), or a new one of the test's own (Tansu)."""
    if session.kind == "tansu":
        return make_broker()
    gone(session, *topics)
    return session
