"""Topics that come back shorter: a broker replaced without its data, a topic recreated."""

from __future__ import annotations

from goka import StringCodec, TopicManager
from goka.dev import EmbeddedBroker

from ..helpers import produce


def write(broker: EmbeddedBroker, topic: str, records: int, *, replace: bool = False) -> None:
    """Create ``topic`` (one partition) with ``records`` records, on a new broker if
    ``replace`` (every topic is gone: a broker replaced without its data)."""
    if replace:
        broker.restart()
    TopicManager(broker.bootstrap).ensure_stream_exists(topic, 1)
    produce(broker.bootstrap, topic, StringCodec(), [(f"k{i}", "v") for i in range(records)])
