"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .fake_kafka import FakeKafka


@pytest.fixture
def kafka() -> FakeKafka:
    """An in-memory Kafka of two partitions."""
    return FakeKafka(partitions=2)


@pytest.fixture(autouse=True)
def close_machines() -> Iterator[None]:
    """Close the machines (``test_partition_processor.Machine``) a test made: left to the
    garbage collector, their workers' sockets were reported as unclosed in whichever later
    test it happened to run."""
    yield
    from .test_partition_processor import Machine

    while Machine.made:
        Machine.made.pop().close()
