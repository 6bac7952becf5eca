"""The context a processor callback receives with each message, like Go Goka's ``goka.Context``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any, Generic, NoReturn, TypeVar

from goka.errors import Abort, ContextError, GokaError, MessageTooLargeError
from goka.group.context_time import TimeAccess
from goka.group.effects import EMIT, LOOP, MISSING, NOT_SAVED, TABLE, Headers
from goka.keys import key_str
from goka.time.ports import PartitionClock
from goka.time.rows import TTL_TIMER

__all__ = ["Context"]

V = TypeVar("V")

#: Values of these types are cached decoded between messages of a batch; others are cached as
#: bytes and decoded again on every ``value()``, so a callback mutating a returned dict without
#: ``set_value`` cannot make the cache disagree with the table.
IMMUTABLE = frozenset({int, float, str, bytes, bool, type(None), tuple, frozenset})


class Raw:
    """A cached state that is decoded afresh on every read (mutable types)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class Context(TimeAccess, Generic[V]):
    """What a callback knows about the current message, and what it may do.

    One context object is reused for every message of a partition: read what you need inside
    the callback and do not keep the context. Values returned by :meth:`value`, :meth:`join`
    and :meth:`lookup` belong to the callback; change state only through :meth:`set_value`.

    Attributes:
        group: the processor group.
        topic, partition, offset: where the message came from.
        key: the message key, as ``str``: bytes that are not UTF-8 text appear as surrogate
            escapes (see :mod:`goka.keys`); :attr:`raw_key` gives the bytes.
    """

    __slots__ = (
        "_cache", "_decode_state", "_effects", "_encode_state", "_event_time", "_loop",
        "_max_bytes", "_message", "_outputs", "_read_table", "_saved", "_store_get", "_table",
        "_time", "_ttl", "_undo", "_value", "group", "key", "partition",
    )  # fmt: skip

    def __init__(
        self,
        group: str,
        partition: int,
        *,
        table: str,
        store_get: Callable[[str], bytes | None],
        state: tuple[Callable[[bytes], Any], Callable[[Any], bytes]] | None,
        outputs: Mapping[str, Callable[[Any], bytes]],
        loop: tuple[str, Callable[[Any], bytes]] | None,
        read_table: Callable[[str, str, str], Any],
        max_bytes: int,
        undo: bool,
        time: PartitionClock | None = None,
    ) -> None:
        """Built by the engine, which gives the context what it may use and nothing more: the
        group table's name and a reader of its committed state, the state codec's
        ``(decode, encode)`` (None: no persist edge), the encoders of the output topics, the
        loop topic and its encoder (None: no loop edge), a reader of joined and looked-up
        tables ``(kind, table, key)``, the largest encoded message, and whether a failed
        message's changes must be undone (the skip and dead-letter policies), and the
        partition's time state (None: the group keeps none)."""
        self.group = group
        self.partition = partition
        self.key = ""
        self._message: Any = ("", -1, None, None, 0, None)
        self._saved: Any = NOT_SAVED
        self._undo = undo
        self._max_bytes = max_bytes
        self._store_get = store_get
        self._table = table
        self._decode_state: Callable[[bytes], Any] | None = None
        self._encode_state: Callable[[Any], bytes] | None = None
        if state is not None:
            self._decode_state, self._encode_state = state
        self._outputs, self._loop, self._read_table = outputs, loop, read_table
        self._time = time
        self._ttl = time is not None and time.has_ttl
        self._event_time = -1
        self._value: Any = None
        self._bind({}, [])

    def _bind(self, cache: dict[str, Any], effects: list[Any]) -> None:
        """Point the context at the engine's structures of the current batch."""
        self._cache, self._effects = cache, effects

    # -- the message -----------------------------------------------------------------------------
    @property
    def topic(self) -> str:
        """The topic of the message."""
        return str(self._message[0])

    @property
    def raw_key(self) -> bytes | None:
        """The message key as it is on the wire (None: the message has no key)."""
        raw = self._message[2]
        return None if raw is None else bytes(raw)

    @property
    def offset(self) -> int:
        """The offset of the message in its partition."""
        return int(self._message[1])

    @property
    def timestamp(self) -> dt.datetime:
        """When the message was produced (its Kafka timestamp), in UTC."""
        return dt.datetime.fromtimestamp(self._message[4] / 1000, tz=dt.UTC)

    @property
    def timestamp_ms(self) -> int:
        """The Kafka timestamp in milliseconds since the epoch."""
        return int(self._message[4])

    @property
    def headers(self) -> dict[str, bytes]:
        """The message headers (the last value wins for repeated names)."""
        return dict(self._message[5] or ())

    # -- state -----------------------------------------------------------------------------------
    def value(self) -> V | None:
        """Return the state of the current key, or None if it has none.

        Raises:
            ContextError: the group has no persist edge, or the message has no key.
            CodecError: the stored value cannot be decoded by the persist codec.
        """
        if self._message[2] is None:
            self._keyless()
        if self._ttl and self._time.expired(self.key):  # type: ignore[union-attr]  # _ttl: set
            return None
        cached = self._cache.get(self.key, MISSING)
        if cached is MISSING or type(cached) is Raw:
            return self._load(self.key, cached)
        return cached  # type: ignore[no-any-return]  # the cache holds V

    def _load(self, key: str, cached: Any) -> V | None:
        if self._decode_state is None:
            raise ContextError(f"group {self.group!r} has no persist edge, so keys have no value")
        if cached is not MISSING:  # a mutable value changed in this batch: decode a fresh copy
            return self._decode_state(cached.data)  # type: ignore[no-any-return]
        raw = self._store_get(key)
        if raw is None:
            self._cache[key] = None
            return None
        value = self._decode_state(raw)
        self._cache[key] = value if type(value) in IMMUTABLE else Raw(raw)
        return value  # type: ignore[no-any-return]  # the persist codec decodes V

    def set_value(self, value: V) -> None:
        """Set the state of the current key; it is written to the group table.

        Raises:
            ContextError: no persist edge, ``value`` is None (use :meth:`delete`), or the
                message has no key.
            CodecError: the persist codec cannot encode ``value``.
            MessageTooLargeError: it encodes to more than the producer may send.
        """
        encode = self._encode_state
        if encode is None or value is None:
            self._refuse("set_value", value)
        if self._message[2] is None:
            self._keyless()
        data = encode(value)
        key = self.key
        if len(data) > self._max_bytes:
            raise MessageTooLargeError(self._table, key, len(data), self._max_bytes)
        if self._undo:
            self._remember(key)
        self._cache[key] = value if type(value) in IMMUTABLE else Raw(data)
        self._effects.append((TABLE, self._table, key, data, None, self._message))
        if self._ttl:
            self._time.touch(key, self._message)  # type: ignore[union-attr]  # _ttl: set

    def delete(self) -> None:
        """Remove the state of the current key (a tombstone in the group table).

        Raises:
            ContextError: the group has no persist edge, or the message has no key.
        """
        if self._encode_state is None:
            self._refuse("delete", True)
        if self._message[2] is None:
            self._keyless()
        key = self.key
        if self._undo:
            self._remember(key)
        self._cache[key] = None
        self._effects.append((TABLE, self._table, key, None, None, self._message))
        if self._ttl:
            self._time.cancel(key, TTL_TIMER, self._message)  # type: ignore[union-attr]

    def _keyless(self) -> NoReturn:
        """A message without a key (null) has no state: it is kept apart from the key ``""``
        (Go Goka merges them), so a keyless record never changes another key's state."""
        topic, offset = self._message[0], self._message[1]
        raise ContextError(
            f"the message at {topic!r} partition {self.partition} offset {offset} has no key "
            f"(null), so it has no state in group {self.group!r}: produce it with a key, or "
            "only emit or loop it back"
        )

    def _refuse(self, method: str, value: object) -> NoReturn:
        if self._encode_state is None:
            raise ContextError(f"group {self.group!r} has no persist edge; declare persist(codec)")
        raise ContextError(f"{method}(None) is not allowed; call delete() to remove the key")

    def _remember(self, key: str) -> None:
        """Save the key's state before this message's first change, to undo a failed message."""
        if self._saved is NOT_SAVED:
            self._saved = self._cache.get(key, MISSING)

    # -- other topics ----------------------------------------------------------------------------
    def emit(
        self,
        topic: str,
        key: str | bytes,
        value: Any,
        headers: dict[str, bytes] | Headers | None = None,
    ) -> None:
        """Send a message to a declared output topic (``None`` sends a tombstone).

        ``key`` is text or any bytes (see :mod:`goka.keys`).

        Raises:
            ContextError: ``topic`` is not an output edge of the group.
            CodecError: the output codec cannot encode ``value``.
            MessageTooLargeError: it encodes to more than the producer may send.
        """
        encode = self._outputs.get(topic)
        if encode is None:
            raise ContextError(
                f"group {self.group!r} cannot emit to {topic!r}: not an output edge "
                f"(outputs: {', '.join(self._outputs) or 'none'})"
            )
        data = None if value is None else encode(value)
        if data is not None and len(data) > self._max_bytes:
            raise MessageTooLargeError(topic, key, len(data), self._max_bytes)
        self._effects.append((EMIT, topic, _check_key(key), data, _headers(headers), self._message))

    def loopback(
        self, key: str | bytes, value: Any, headers: dict[str, bytes] | Headers | None = None
    ) -> None:
        """Send a message to the group's loop topic, to be processed under ``key``.

        Raises:
            ContextError: the group has no loop edge.
            CodecError: the loop codec cannot encode ``value``.
            MessageTooLargeError: it encodes to more than the producer may send.
        """
        if self._loop is None:
            raise ContextError(f"group {self.group!r} has no loop edge; declare loop(codec, cb)")
        topic, encode = self._loop
        data = encode(value)
        if len(data) > self._max_bytes:
            raise MessageTooLargeError(topic, key, len(data), self._max_bytes)
        self._effects.append((LOOP, topic, _check_key(key), data, _headers(headers), self._message))

    def join(self, table: str) -> Any:
        """Return the current key's value in a joined table, or None.

        Raises:
            ContextError: ``table`` is not a join edge of the group.
        """
        return self._read_table("join", table, self.key)

    def lookup(self, table: str, key: str | bytes) -> Any:
        """Return ``key``'s value in a lookup table, or None.

        Raises:
            ContextError: ``table`` is not a lookup edge of the group.
        """
        return self._read_table("lookup", table, _check_key(key))

    def fail(self, error: BaseException | str) -> NoReturn:
        """Stop processing with ``error``, whatever the group's error policy says.

        The processor stops with a ProcessingError naming this message and chaining ``error``;
        the message and its effects are not committed.
        """
        cause = error if isinstance(error, BaseException) else GokaError(error)
        raise Abort(str(cause)) from cause

    def __repr__(self) -> str:
        return (
            f"<Context group={self.group!r} topic={self.topic!r} partition={self.partition} "
            f"offset={self.offset} key={self.key!r}>"
        )


def _check_key(key: object) -> str:
    if type(key) is str:
        return key
    if isinstance(key, bytes):
        return key_str(key)
    raise ContextError(f"message keys are str or bytes, got {type(key).__name__}")


def _headers(headers: dict[str, bytes] | Headers | None) -> Headers | None:
    if headers is None or isinstance(headers, list):
        return headers
    return list(headers.items())
