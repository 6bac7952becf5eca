"""Errors raised by goka-py.

Every error the library raises on purpose derives from :class:`GokaError`::

    GokaError
    ├── ConfigurationError        invalid settings, found when they are declared
    │   ├── GraphError            an invalid group graph (names the offending edge)
    │   └── UsageError            a wrong command line (the ``goka`` command exits with 2)
    ├── ContextError              a callback used its context as its graph does not allow
    ├── EventTimeError            a record without a usable event time
    ├── CodecError                a value that cannot be encoded or decoded
    ├── MessageTooLargeError      an encoded state, emit or loopback over the producer's limit
    ├── BrokerError               talking to Kafka failed
    │   ├── BrokerNotFoundError   the embedded broker binary is missing
    │   ├── TopicError            a topic is missing, misconfigured or not co-partitioned
    │   │   └── TopicRewoundError a topic ends before, or starts after, what was read of it
    │   ├── DeliveryError         a produced message was not acknowledged
    │   └── TransactionError      a transaction failed (its writer goes on from its last commit)
    │       └── TransactionAbortedError   it was aborted: none of it is read committed
    ├── FencedError               a newer writer of the group partition took it over
    ├── EmitterClosedError        emit() after close()
    ├── PortTakenError            a port to listen on is another process's
    ├── ViewError                 a view stopped: its table topic cannot be followed
    ├── ViewNotReadyError         a read before the view recovered
    ├── ViewUnreachableError      a view service cannot be reached (refused, TLS, timeout)
    ├── TableNotServedError       a view service does not serve the table asked for
    ├── StorageError              local state (LevelDB, memory) failed or is foreign
    │   ├── StorageLockedError    the storage is open in another process
    │   ├── StorageCorruptError   its files are damaged (moved aside and rebuilt)
    │   ├── SnapshotError         a state snapshot is missing, truncated or corrupt
    │   └── OffsetRegressionError a commit would move a store's applied offsets back (a bug)
    ├── ProcessingError           a message could not be processed (topic/partition/offset/key)
    ├── SinkError                 a connector cannot write a record, or to its target
    │   └── SourceError           a source cannot read a record, or cannot resume
    └── ProcessorFailed           a processor's streaming query stopped with an error

Errors raised by a dependency are chained with ``raise ... from cause``. :class:`Abort` is not
an error the library reports: ``ctx.fail()`` raises it to stop processing, and the engine turns
it into a :class:`ProcessingError`.
"""

from __future__ import annotations

__all__ = [
    "Abort",
    "BrokerError",
    "BrokerNotFoundError",
    "CodecError",
    "ConfigurationError",
    "ContextError",
    "DeliveryError",
    "EmitterClosedError",
    "EventTimeError",
    "FencedError",
    "GokaError",
    "GraphError",
    "MessageTooLargeError",
    "OffsetRegressionError",
    "PortTakenError",
    "ProcessingError",
    "ProcessorFailed",
    "SinkError",
    "SnapshotError",
    "SourceError",
    "StorageCorruptError",
    "StorageError",
    "StorageLockedError",
    "TableNotServedError",
    "TopicError",
    "TopicRewoundError",
    "TransactionAbortedError",
    "TransactionError",
    "UsageError",
    "ViewError",
    "ViewNotReadyError",
    "ViewUnreachableError",
    "describe_key",
]


class GokaError(Exception):
    """Root of every error goka-py raises on purpose."""


class ConfigurationError(GokaError, ValueError):
    """Invalid configuration, raised where it is declared rather than mid-stream."""


class GraphError(ConfigurationError):
    """An invalid group graph; the message names the offending edge."""


class CodecError(GokaError, ValueError):
    """A value could not be encoded or decoded.

    Attributes:
        codec: name of the codec that failed.
        reason: what was expected and what was found.
    """

    def __init__(self, codec: str, reason: str) -> None:
        super().__init__(f"{codec} codec: {reason}")
        self.codec = codec
        self.reason = reason


class MessageTooLargeError(GokaError, ValueError):
    """A callback's state, emit or loopback encodes to more bytes than the producer may send
    (``message.max.bytes``): raised in the callback, so the group's error policy applies to
    its message (fail, skip, or dead-letter) instead of a refused delivery stopping the group.

    Attributes:
        topic, key: where the message was going.
        size: its encoded size; limit: the most allowed.
    """

    def __init__(self, topic: str, key: str | bytes, size: int, limit: int) -> None:
        super().__init__(
            f"the value for topic {topic!r} key {describe_key(key)} is {size:,} bytes, over "
            f"the limit of {limit:,} (the producer's message.max.bytes less room for the key "
            "and headers): make it smaller, or raise message.max.bytes on the producer, the "
            "topic and the broker"
        )
        self.topic, self.key, self.size, self.limit = topic, key, size, limit


class BrokerError(GokaError):
    """Talking to the Kafka cluster failed."""


class BrokerNotFoundError(BrokerError):
    """The embedded broker binary could not be found or started."""


class TopicError(BrokerError):
    """A topic is missing, misconfigured, or not co-partitioned with its peers."""


class TopicRewoundError(TopicError):
    """A partition no longer holds the offsets a reader had reached: it ends before them (the
    topic was truncated or recreated) or starts after them (records deleted before they were
    read). Raised instead of skipping, so no state is silently built from missing records.

    Attributes:
        topic, partition: the partition.
        position: the next offset the reader expected.
        low, high: the partition's first offset and high watermark now.
    """

    def __init__(
        self, topic: str, partition: int, position: int, low: int, high: int, *, reader: str
    ) -> None:
        where = f"topic {topic!r} partition {partition}"
        if position > high:
            text = (
                f"{where} ends at offset {high}, but {reader} has read it up to offset {position}:"
                " the topic was truncated or recreated, and records already processed are gone."
                " Nothing was skipped. If the new topic is meant to replace the old one, start"
                f" {reader} afresh (delete its checkpoint and local state); otherwise restore"
                " the topic"
            )
        else:
            text = (
                f"{where} starts at offset {low}, but {reader} has read it only up to offset "
                f"{position}: records {position}..{low - 1} were deleted (retention, "
                "DeleteRecords or a recreated topic) before they were processed. Nothing was"
                " skipped. Raise the topic's retention, or start the reader afresh from the"
                " topic's first offset if losing them is acceptable"
            )
        super().__init__(text)
        self.topic, self.partition, self.position = topic, partition, position
        self.low, self.high = low, high

    @staticmethod
    def check(
        topic: str, partition: int, position: int, low: int, high: int, *, reader: str
    ) -> None:
        """Raise unless ``low <= position <= high`` (position -1: nothing read yet)."""
        if position > high or 0 <= position < low:
            raise TopicRewoundError(topic, partition, position, low, high, reader=reader)


class DeliveryError(BrokerError):
    """A produced message was not acknowledged by the broker.

    Attributes:
        topic: destination topic.
        key: message key (``None`` for unkeyed messages).
        reason: the broker's or client's error text.
        retriable: whether sending again may succeed.
    """

    def __init__(
        self, topic: str, key: str | bytes | None, reason: str, *, retriable: bool = False
    ):
        shown = describe_key(key)
        super().__init__(f"delivery to topic {topic!r} failed for key {shown}: {reason}")
        self.topic = topic
        self.key = key
        self.reason = reason
        self.retriable = retriable


class EmitterClosedError(GokaError):
    """``emit`` was called on an emitter that has been closed."""


class ViewUnreachableError(GokaError, ConnectionError):
    """A view service could not be reached: nothing listens there, the TLS handshake failed
    (wrong CA, no client certificate), or it did not answer in time. Distinct from a table
    that is there but not ready (:class:`ViewNotReadyError`)."""


class ViewNotReadyError(GokaError):
    """A read before the view recovered (and stale reads are not allowed)."""


class PortTakenError(GokaError, OSError):
    """Another process listens on a port to listen on: ``service`` ``"http"`` or ``"grpc"``."""

    def __init__(self, message: str, service: str) -> None:
        super().__init__(message)
        self.service, self.cause = service, f"PortTakenError:{service}"


class ViewError(GokaError):
    """The view stopped: its table topic cannot be followed (see the message)."""


class TableNotServedError(GokaError, KeyError):
    """The view server does not serve the table asked for (gRPC NOT_FOUND)."""


class ContextError(GokaError):
    """A callback used the context in a way the group graph does not allow."""


class EventTimeError(GokaError):
    """A record has no usable event time: its extractor failed or returned something else
    than a datetime or milliseconds, or the time is negative or too far ahead of the wall
    clock. The engine reports it as a :class:`ProcessingError` naming the record, under the
    group's ``on_error`` policy."""


class Abort(Exception):
    """:meth:`goka.Context.fail`: stop, whatever the policy (reported as ProcessingError)."""


class UsageError(ConfigurationError):
    """The command line is wrong (the ``goka`` command exits with status 2)."""


class SinkError(GokaError):
    """A connector cannot write a record (it names the topic, partition, offset and why), or a
    target it cannot write to (it names the table or column)."""


class SourceError(SinkError):
    """A source cannot read a record (named), or resume (another wrote its partition last)."""


class ProcessorFailed(GokaError):
    """A processor's streaming query stopped with an error (the message says where and why).

    Attributes:
        cause: the class name of the task's goka error (e.g. ``ProcessingError``), or "".
    """

    def __init__(self, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause


class CallbackTimeout(GokaError, TimeoutError):
    """A callback's try took longer than its group's ``timeout`` and was cut (then tried
    again as the group's ``retry`` says, else handled by the ``on_error`` policy)."""


class StorageError(GokaError):
    """Local state storage failed, is corrupt, or belongs to another table."""


class StorageLockedError(StorageError):
    """The storage is open in another process (LevelDB allows one process per directory)."""


class StorageCorruptError(StorageError):
    """The storage's files are damaged (a crash while they were replaced, a failing disk); the
    message names the directory. Views and processors move a damaged store aside and rebuild
    it from their table topic (processors: from the newest snapshot and the table's tail).

    Attributes:
        path: the store's directory (None: not known).
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class SnapshotError(StorageError):
    """A snapshot of a partition's state cannot be used; the message names the file and why."""


class OffsetRegressionError(StorageError):
    """A commit would move a partition store's applied offsets back: the store would then
    apply its records a second time. A bug in goka-py, refused before anything is written.

    Attributes:
        store: which store (group, partition, kind).
        offsets: ``{(topic, partition): (stored offset, offset of the refused commit)}``.
    """

    def __init__(self, store: str, offsets: dict[tuple[str, int], tuple[int, int]]) -> None:
        listing = ", ".join(
            f"topic {t!r} partition {p}: stored {old}, commit {new}"
            for (t, p), (old, new) in sorted(offsets.items())
        )
        super().__init__(
            f"{store}: a commit would move applied offsets back ({listing}); nothing was "
            "written (the records below the stored offsets are in the store already). This "
            "is a bug in goka-py: please report it with the processor's log"
        )
        self.store, self.offsets = store, offsets


class ProcessingError(GokaError):
    """A message could not be processed.

    Attributes:
        group: processor group (empty outside a group).
        topic, partition, offset, key: where the message came from.
    """

    def __init__(
        self,
        reason: str,
        *,
        group: str = "",
        topic: str,
        partition: int,
        offset: int,
        key: str | bytes | None,
    ) -> None:
        where = f"topic {topic!r} partition {partition} offset {offset} key {describe_key(key)}"
        prefix = f"group {group!r}: " if group else ""
        super().__init__(f"{prefix}{where}: {reason}")
        self.reason = reason
        self.group = group
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key


def describe_key(key: str | bytes | None) -> str:
    """Show a key in a message: quoted text where it is UTF-8 text, else its bytes escaped
    (``b'\\xff'``). A ``str`` key stands for its bytes (see :mod:`goka.keys`)."""
    raw: object = key
    if isinstance(key, str):
        try:
            raw = key.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return repr(key)
    if not isinstance(raw, (bytes, bytearray)):
        return repr(key)
    try:
        return repr(bytes(raw).decode())
    except UnicodeDecodeError:
        return repr(bytes(raw))


class FencedError(GokaError):
    """A newer writer of the same group partition took over: this one must stop without
    writing its store (what it wrote since its last commit is aborted).

    Attributes:
        group, partition: the group partition.
        transactional_id: the id both writers used.
    """

    def __init__(self, group: str, partition: int, transactional_id: str, reason: str) -> None:
        super().__init__(
            f"group {group!r} partition {partition}: fenced by a newer writer of transactional "
            f"id {transactional_id!r} (another task or processor of the group runs this "
            f"partition, or this one was paused past its transaction timeout and the broker "
            f"aborted its transaction); this one stops without writing its store: {reason}"
        )
        self.group, self.partition, self.transactional_id = group, partition, transactional_id


class TransactionError(BrokerError):
    """A transaction failed, the partition's writer still the latest (a broker or coordinator
    lost, say): what it wrote is aborted or, where the coordinator did not answer, settled by
    the next start of the partition's producer; the task goes on from its last commit (its
    store and the group's committed offsets), with a new producer."""


class TransactionAbortedError(TransactionError):
    """A transaction was aborted: none of it is read committed; the task begins again."""
