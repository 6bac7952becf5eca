"""Development helpers: the development brokers (Apache Kafka, Tansu) and pytest fixtures."""

from goka.dev.broker import KINDS, BrokerKind, EmbeddedBroker
from goka.dev.kafka import KAFKA_VERSION
from goka.dev.tansu import TANSU_BINARY_ENV, find_tansu_binary

__all__ = [
    "KAFKA_VERSION",
    "KINDS",
    "TANSU_BINARY_ENV",
    "BrokerKind",
    "EmbeddedBroker",
    "find_tansu_binary",
]
