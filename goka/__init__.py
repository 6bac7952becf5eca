"""goka-py: Kafka-backed microservices in the style of Go's Goka.

* :class:`Emitter` writes keyed events to a topic.
* Codecs (:mod:`goka.codec`) turn values into bytes, wire compatible with Go Goka.
* :class:`TopicManager` creates stream and (compacted) table topics and checks co-partitioning.

Errors all derive from :class:`GokaError` (see :mod:`goka.errors` for the tree).
"""

from goka.codec import (
    AvroCodec,
    BytesCodec,
    Codec,
    Int64Codec,
    JsonCodec,
    ProtobufCodec,
    StringCodec,
    codec_by_name,
)
from goka.delivery import Delivery, DeliveryFuture
from goka.emitter import Emitter
from goka.errors import (
    BrokerError,
    CodecError,
    ConfigurationError,
    DeliveryError,
    EmitterClosedError,
    GokaError,
    GraphError,
    ProcessingError,
    StorageError,
    TopicError,
)
from goka.topic_manager import TopicManager, TopicManagerConfig

__all__ = [
    "AvroCodec",
    "BrokerError",
    "BytesCodec",
    "Codec",
    "CodecError",
    "ConfigurationError",
    "Delivery",
    "DeliveryError",
    "DeliveryFuture",
    "Emitter",
    "EmitterClosedError",
    "GokaError",
    "GraphError",
    "Int64Codec",
    "JsonCodec",
    "ProcessingError",
    "ProtobufCodec",
    "StorageError",
    "StringCodec",
    "TopicError",
    "TopicManager",
    "TopicManagerConfig",
    "codec_by_name",
]
