"""The Kafka adapter: the only package that imports confluent-kafka (its modules import it;
the package's names are imported where first used, so that :mod:`goka.kafka.config` can be
read by the settings without it)."""

from typing import TYPE_CHECKING

from goka._lazy import lazy_exports

if TYPE_CHECKING:
    from goka.kafka.admin import KafkaAdmin
    from goka.kafka.config import Brokers, consumer_config, producer_config
    from goka.kafka.producer import KafkaProducer, Producer, ProducerBuilder, kafka_producer
    from goka.kafka.schema_registry import SchemaRegistryAvroCodec

__all__ = [
    "Brokers",
    "KafkaAdmin",
    "KafkaProducer",
    "Producer",
    "ProducerBuilder",
    "SchemaRegistryAvroCodec",
    "consumer_config",
    "kafka_producer",
    "producer_config",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "goka.kafka.admin": ("KafkaAdmin",),
        "goka.kafka.config": ("Brokers", "consumer_config", "producer_config"),
        "goka.kafka.producer": ("KafkaProducer", "Producer", "ProducerBuilder", "kafka_producer"),
        "goka.kafka.schema_registry": ("SchemaRegistryAvroCodec",),
    },
)
