"""The Kafka adapter: the only package that imports confluent-kafka."""

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
