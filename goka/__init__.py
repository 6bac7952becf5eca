"""goka-py: Kafka-backed microservices in the style of Go's Goka.

The pieces, named as Goka names them:

* :class:`Emitter` writes keyed events to a topic (thread-safe, asyncio-friendly).
* A processor group is declared with :func:`define_group` and edges: :func:`input` /
  :func:`inputs` (streams to consume with a callback), :func:`output` (streams to emit to),
  :func:`loop` (re-key through ``<group>-loop``), :func:`join` (a co-partitioned table),
  :func:`lookup` (any key of a table), :func:`persist` (per-key state in ``<group>-table``,
  optionally with a TTL), :func:`window` (windowed tables: :class:`Tumbling`,
  :class:`Hopping`, :class:`Session`, :class:`Calendar`) and :func:`timers` (durable timers).
  The callback ``fn(ctx, msg)`` gets a :class:`Context`: ``value``, ``set_value``, ``delete``,
  ``emit``, ``loopback``, ``join``, ``lookup``, ``window``, ``schedule``, ``cancel``,
  ``fail``.
* :class:`goka.tester.Tester` runs groups in-process for unit tests, through the same engine
  core (:mod:`goka.group.engine`) as the Spark processor.
* Codecs (:mod:`goka.codec`) turn values into bytes, wire compatible with Go Goka.
* :class:`TopicManager` creates stream and (compacted) table topics and checks co-partitioning.

Example::

    from goka import Context, Int64Codec, StringCodec, define_group, input, persist

    def count(ctx: Context[int], page: str) -> None:
        ctx.set_value((ctx.value() or 0) + 1)

    clicks = define_group("clicks", input("user-clicks", StringCodec(), count),
                          persist(Int64Codec()))

Errors all derive from :class:`GokaError` (see :mod:`goka.errors` for the tree).
"""

from typing import TYPE_CHECKING

from goka._lazy import lazy_exports

if TYPE_CHECKING:  # imported where first used (goka._lazy): one module does not import all
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
        Abort,
        BrokerError,
        BrokerNotFoundError,
        CallbackTimeout,
        CodecError,
        ConfigurationError,
        ContextError,
        DeliveryError,
        EmitterClosedError,
        EventTimeError,
        GokaError,
        GraphError,
        MessageTooLargeError,
        OffsetRegressionError,
        ProcessingError,
        ProcessorFailed,
        SnapshotError,
        StorageCorruptError,
        StorageError,
        StorageLockedError,
        TableNotServedError,
        TopicError,
        TopicRewoundError,
        UsageError,
        ViewError,
        ViewNotReadyError,
        ViewUnreachableError,
    )
    from goka.group.context import Context
    from goka.group.graph import (
        Group,
        GroupGraph,
        NilHandling,
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
        timers,
        window,
    )
    from goka.group.retries import Retry
    from goka.keys import key_bytes, key_str
    from goka.time.open_windows import Windows
    from goka.time.rows import Timer
    from goka.time.specs import Calendar, Hopping, Session, Tumbling, Window
    from goka.topic_manager import TopicManager, TopicManagerConfig

__all__ = [
    "Abort",
    "AvroCodec",
    "BrokerError",
    "BrokerNotFoundError",
    "BytesCodec",
    "Calendar",
    "CallbackTimeout",
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
    "EventTimeError",
    "GokaError",
    "GraphError",
    "Group",
    "GroupGraph",
    "Hopping",
    "Int64Codec",
    "JsonCodec",
    "MessageTooLargeError",
    "NilHandling",
    "OffsetRegressionError",
    "ProcessingError",
    "ProcessorFailed",
    "ProtobufCodec",
    "Retry",
    "Session",
    "SnapshotError",
    "StorageCorruptError",
    "StorageError",
    "StorageLockedError",
    "Stream",
    "StringCodec",
    "Table",
    "TableNotServedError",
    "Timer",
    "TopicError",
    "TopicManager",
    "TopicManagerConfig",
    "TopicRewoundError",
    "Tumbling",
    "UsageError",
    "ViewError",
    "ViewNotReadyError",
    "ViewUnreachableError",
    "Window",
    "Windows",
    "codec_by_name",
    "define_group",
    "input",
    "inputs",
    "join",
    "key_bytes",
    "key_str",
    "lookup",
    "loop",
    "output",
    "persist",
    "timers",
    "window",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "goka.codec": (
            "AvroCodec",
            "BytesCodec",
            "Codec",
            "Int64Codec",
            "JsonCodec",
            "ProtobufCodec",
            "StringCodec",
            "codec_by_name",
        ),
        "goka.group.context": ("Context",),
        "goka.delivery": ("Delivery", "DeliveryFuture"),
        "goka.emitter": ("Emitter",),
        "goka.errors": (
            "Abort",
            "BrokerError",
            "CallbackTimeout",
            "BrokerNotFoundError",
            "CodecError",
            "ConfigurationError",
            "ContextError",
            "DeliveryError",
            "EmitterClosedError",
            "EventTimeError",
            "GokaError",
            "GraphError",
            "MessageTooLargeError",
            "OffsetRegressionError",
            "ProcessingError",
            "ProcessorFailed",
            "SnapshotError",
            "StorageCorruptError",
            "StorageError",
            "StorageLockedError",
            "TableNotServedError",
            "TopicError",
            "TopicRewoundError",
            "UsageError",
            "ViewError",
            "ViewNotReadyError",
            "ViewUnreachableError",
        ),
        "goka.group.retries": ("Retry",),
        "goka.group.graph": (
            "Group",
            "GroupGraph",
            "NilHandling",
            "Stream",
            "Table",
            "define_group",
            "input",
            "inputs",
            "join",
            "lookup",
            "loop",
            "output",
            "persist",
            "timers",
            "window",
        ),
        "goka.keys": ("key_bytes", "key_str"),
        "goka.topic_manager": ("TopicManager", "TopicManagerConfig"),
        "goka.time.open_windows": ("Windows",),
        "goka.time.rows": ("Timer",),
        "goka.time.specs": ("Calendar", "Hopping", "Session", "Tumbling", "Window"),
    },
)
