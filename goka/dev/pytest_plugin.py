"""pytest fixtures for code built on goka-py: ``pytest_plugins = ["goka.dev.pytest_plugin"]``.

* ``kafka_broker``: one embedded broker for the whole session.
* ``brokers``: its bootstrap servers string.
* ``new_topic``: a factory creating a uniquely named topic, ``new_topic(partitions=4)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest

from goka.dev.broker import EmbeddedBroker
from goka.topic_manager import TopicManager

_counter = itertools.count()


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[EmbeddedBroker]:
    """An embedded Kafka-protocol broker shared by the session."""
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def brokers(kafka_broker: EmbeddedBroker) -> str:
    """Bootstrap servers of the session's embedded broker."""
    return kafka_broker.bootstrap


@pytest.fixture(scope="session")
def topic_manager(brokers: str) -> TopicManager:
    """A topic manager on the session's broker."""
    return TopicManager(brokers)


@pytest.fixture
def new_topic(topic_manager: TopicManager, request: pytest.FixtureRequest) -> Callable[..., str]:
    """Return a factory that creates a fresh stream (or, with ``table=True``, table) topic."""

    def create(prefix: str = "", *, partitions: int = 4, table: bool = False) -> str:
        base = prefix or request.node.name.replace("[", "-").replace("]", "")
        name = f"{base[:150]}-{next(_counter)}"
        if table:
            topic_manager.ensure_table_exists(name, partitions)
        else:
            topic_manager.ensure_stream_exists(name, partitions)
        return name

    return create
