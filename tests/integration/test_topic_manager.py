from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from goka import ConfigurationError, TopicError, TopicManager, TopicManagerConfig
from goka.kafka import KafkaAdmin

pytestmark = pytest.mark.kafka


def test_ensure_stream_exists_creates_once(
    topic_manager: TopicManager, new_topic: Callable[..., str]
) -> None:
    name = new_topic(partitions=1) + "-new"
    assert not topic_manager.exists(name)
    assert topic_manager.ensure_stream_exists(name, 6) == 6
    assert topic_manager.ensure_stream_exists(name, 6) == 6  # idempotent
    assert topic_manager.ensure_stream_exists(name) == 6  # any count accepted when none asked
    assert topic_manager.partitions(name) == 6


def test_partition_mismatch_is_an_error(
    topic_manager: TopicManager, new_topic: Callable[..., str]
) -> None:
    name = new_topic(partitions=3)
    with pytest.raises(TopicError, match=f"topic '{name}' has 3 partitions, expected 5"):
        topic_manager.ensure_stream_exists(name, 5)


def test_tables_are_created_compacted(
    brokers: str, topic_manager: TopicManager, new_topic: Callable[..., str]
) -> None:
    name = new_topic(partitions=1) + "-table"
    topic_manager.ensure_table_exists(name, 4)
    assert KafkaAdmin(brokers).topic_config(name)["cleanup.policy"] == "compact"


def test_stream_topic_config_is_applied(brokers: str, new_topic: Callable[..., str]) -> None:
    manager = TopicManager(brokers, TopicManagerConfig(stream_config={"retention.ms": "3600000"}))
    name = new_topic(partitions=1) + "-s"
    manager.ensure_stream_exists(name, 2)
    assert KafkaAdmin(brokers).topic_config(name)["retention.ms"] == "3600000"


def test_existing_non_compacted_table_fails_or_warns(
    brokers: str,
    topic_manager: TopicManager,
    new_topic: Callable[..., str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    name = new_topic(partitions=2)  # a stream topic, so cleanup.policy is not compact
    with pytest.raises(
        TopicError, match=f"table topic '{name}' has cleanup.policy='delete', expected 'compact'"
    ):
        topic_manager.ensure_table_exists(name, 2)
    warn = TopicManager(brokers, TopicManagerConfig(on_table_not_compacted="warn"))
    with caplog.at_level(logging.WARNING):
        assert warn.ensure_table_exists(name, 2) == 2
    assert "expected 'compact'" in caplog.text


def test_copartitioning(topic_manager: TopicManager, new_topic: Callable[..., str]) -> None:
    a, b, c = new_topic(partitions=4), new_topic(partitions=4), new_topic(partitions=6)
    assert topic_manager.ensure_copartitioned([a, b]) == 4
    with pytest.raises(TopicError, match=rf"not co-partitioned .*'{a}': 4, '{b}': 4, '{c}': 6"):
        topic_manager.ensure_copartitioned([a, b, c])
    with pytest.raises(TopicError, match="topics do not exist: 'missing-1', 'missing-2'"):
        topic_manager.ensure_copartitioned([a, "missing-1", "missing-2"])


@pytest.mark.parametrize(
    ("settings", "message"),
    [({"partitions": 0}, "partitions must be at least 1"),
     ({"replication": 0}, "replication must be at least 1"),
     ({"on_table_not_compacted": "explode"}, "must be 'fail', 'warn' or 'ignore'")],
)  # fmt: skip
def test_invalid_config_fails_when_declared(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        TopicManagerConfig(**settings)  # type: ignore[arg-type]
