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
from goka.context import Context, ContextError
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
from goka.graph import (
    Group,
    GroupGraph,
    Stream,
    Table,
    define_group,
    input,
    inputs,
    join,
    lookup,
    loop,
    output,
    persist,
)
from goka.topic_manager import TopicManager, TopicManagerConfig

__all__ = [
    "AvroCodec",
    "BrokerError",
    "BytesCodec",
    "Codec",
    "CodecError",
    "ConfigurationError",
    "Context",
    "ContextError",
    "Delivery",
    "DeliveryError",
    "DeliveryFuture",
    "Emitter",
    "EmitterClosedError",
    "GokaError",
    "GraphError",
    "Group",
    "GroupGraph",
    "Int64Codec",
    "JsonCodec",
    "ProcessingError",
    "ProtobufCodec",
    "StorageError",
    "Stream",
    "StringCodec",
    "Table",
    "TopicError",
    "TopicManager",
    "TopicManagerConfig",
    "codec_by_name",
    "define_group",
    "input",
    "inputs",
    "join",
    "lookup",
    "loop",
    "output",
    "persist",
]
