"""Fixtures of the unit tests."""

from __future__ import annotations

import pytest

from .fake_kafka import FakeKafka


@pytest.fixture
def kafka() -> FakeKafka:
    """An in-memory Kafka of two partitions."""
    return FakeKafka(partitions=2)
