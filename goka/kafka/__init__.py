"""The Kafka adapter: the only package that imports confluent-kafka."""

from goka.kafka.admin import KafkaAdmin
from goka.kafka.config import Brokers, consumer_config, producer_config
from goka.kafka.producer import KafkaProducer, Producer, ProducerBuilder, kafka_producer

__all__ = [
    "Brokers",
    "KafkaAdmin",
    "KafkaProducer",
    "Producer",
    "ProducerBuilder",
    "consumer_config",
    "kafka_producer",
    "producer_config",
]
