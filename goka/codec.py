"""Codecs turn values into the bytes stored in Kafka and back.

A codec is any object with a ``name`` and the two methods of :class:`Codec`. The codecs here are
wire compatible with Go Goka where Goka has one (``codec.Bytes``, ``codec.String``,
``codec.Int64``). Every failure is a :class:`~goka.errors.CodecError` naming the codec and the
reason; exceptions of the underlying libraries are chained, never leaked bare.

Codecs are immutable after construction and safe to share between threads.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from goka.errors import CodecError, ConfigurationError
from goka.keys import decode_text

__all__ = [
    "AvroCodec",
    "BytesCodec",
    "Codec",
    "Int64Codec",
    "JsonCodec",
    "ProtobufCodec",
    "StringCodec",
    "alike",
    "codec_by_name",
]

if TYPE_CHECKING:  # fastavro and protobuf load when an Avro or protobuf codec is first used
    from google.protobuf.message import Message

T = TypeVar("T")
M = TypeVar("M", bound="Message")

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_DECIMAL = re.compile(rb"[+-]?[0-9]+\Z")


@runtime_checkable
class Codec(Protocol[T]):
    """Encodes values of type ``T`` to bytes and decodes them back.

    ``decode(encode(v)) == v`` for every ``v`` the codec accepts. Both methods raise
    :class:`~goka.errors.CodecError` on bad input.

    A codec may also have ``fast_decode``: a C-level callable that returns the same as ``decode``
    for valid input and raises anything for invalid input. Processors use it on their hot path and
    call ``decode`` again to explain a failure.
    """

    @property
    def name(self) -> str:
        """Short name of the codec (``"json"``), carried next to values in gRPC answers."""
        ...

    def encode(self, value: T) -> bytes:
        """Return the bytes for ``value``."""
        ...

    def decode(self, data: bytes) -> T:
        """Return the value stored in ``data``."""
        ...


class BytesCodec:
    """Raw bytes, unchanged (Goka ``codec.Bytes``)."""

    name = "bytes"
    fast_decode = bytes
    bytes_unchanged = True  # encode(b) is b for bytes: emitters may skip the call

    def encode(self, value: bytes) -> bytes:
        if isinstance(value, bytes):
            return value
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        raise CodecError(self.name, f"expected bytes, got {type(value).__name__}")

    def decode(self, data: bytes) -> bytes:
        return bytes(data)

    def __eq__(self, other: object) -> bool:  # (no settings: every one is the same codec)
        return isinstance(other, BytesCodec)

    def __hash__(self) -> int:
        return hash(BytesCodec)

    def __repr__(self) -> str:
        return "BytesCodec()"


class StringCodec:
    """Text (Goka ``codec.String``), UTF-8 on the wire.

    Go's string codec takes any bytes, so by default this one does too, without loss: bytes that
    are not valid UTF-8 decode to surrogate escapes (``b"\\xff"`` -> ``"\\udcff"``, as
    :mod:`goka.keys` does for keys) and encode back to the same bytes. A graph ported from Go
    then processes every record Go processed, and writes back what it read.

    Args:
        strict: refuse bytes that are not valid UTF-8 (and strings with lone surrogates) with a
            :class:`~goka.errors.CodecError` instead; the record then fails (see ``on_error``).
    """

    name = "string"

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self._errors = "strict" if strict else "surrogateescape"
        self.fast_decode = bytes.decode if strict else decode_text

    def __getstate__(self) -> bool:
        return self.strict

    def __setstate__(self, strict: bool) -> None:
        self.__init__(strict=strict)  # type: ignore[misc]  # rebuilds the decoder when unpickled

    def encode(self, value: str) -> bytes:
        if not isinstance(value, str):
            raise CodecError(self.name, f"expected str, got {type(value).__name__}")
        try:
            return value.encode("utf-8", self._errors)
        except UnicodeEncodeError as exc:  # lone surrogates
            raise CodecError(self.name, f"cannot encode as UTF-8: {exc}") from exc

    def decode(self, data: bytes) -> str:
        try:
            return data.decode("utf-8", self._errors)
        except AttributeError:  # a memoryview or bytearray-like buffer
            return self.decode(bytes(data))
        except UnicodeDecodeError as exc:
            raise CodecError(self.name, f"invalid UTF-8 at byte {exc.start}: {exc.reason}") from exc

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StringCodec) and other.strict == self.strict

    def __hash__(self) -> int:
        return hash((StringCodec, self.strict))

    def __repr__(self) -> str:
        return "StringCodec(strict=True)" if self.strict else "StringCodec()"


class Int64Codec:
    """Signed 64-bit integers as decimal text, like Go Goka's ``codec.Int64``.

    Goka writes ``strconv.FormatInt(v, 10)`` and reads with ``strconv.ParseInt(s, 10, 64)``, so
    ``42`` is stored as ``b"42"``, not as eight binary bytes.
    """

    name = "int64"

    def encode(self, value: int) -> bytes:
        if type(value) is int and _INT64_MIN <= value <= _INT64_MAX:
            return b"%d" % value
        if not isinstance(value, int) or isinstance(value, bool):
            raise CodecError(self.name, f"expected int, got {type(value).__name__}")
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise CodecError(self.name, f"{value} is outside the signed 64-bit range")
        return b"%d" % int(value)  # an int subclass (an IntEnum, say)

    def decode(self, data: bytes) -> int:
        if type(data) is bytes and len(data) < 19 and data.isdigit():  # (a hot path: plain
            return int(data)  # digits, fewer than 19 of them: in range)
        if not _DECIMAL.match(data):
            raise CodecError(self.name, f"expected decimal digits, got {bytes(data)[:40]!r}")
        value = int(data)
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise CodecError(self.name, f"{bytes(data)[:40]!r} is outside the signed 64-bit range")
        return value

    def __eq__(self, other: object) -> bool:  # (no settings: every one is the same codec)
        return isinstance(other, Int64Codec)

    def __hash__(self) -> int:
        return hash(Int64Codec)

    def __repr__(self) -> str:
        return "Int64Codec()"


class JsonCodec:
    """JSON documents as compact UTF-8 text.

    Args:
        default: called for objects ``json`` cannot serialise (as in :func:`json.dumps`).
        object_hook: called with every decoded object (as in :func:`json.loads`), e.g. to build
            dataclasses.
    """

    name = "json"

    def __init__(
        self,
        *,
        default: Callable[[Any], Any] | None = None,
        object_hook: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self._hooks = (default, object_hook)
        self._encoder = json.JSONEncoder(
            separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=default
        )
        self._decoder = json.JSONDecoder(object_hook=object_hook)

    def __getstate__(self) -> tuple[Any, Any]:
        """Pickle the hooks only: Spark ships codecs to its workers."""
        return self._hooks

    def __setstate__(self, hooks: tuple[Any, Any]) -> None:
        self.__init__(default=hooks[0], object_hook=hooks[1])  # type: ignore[misc]  # rebuild

    @property
    def plain(self) -> bool:
        """No hooks: any JSON document's text is a valid encoding of what it decodes to (a
        source may pass JSON through as read)."""
        return self._hooks == (None, None)

    def encode(self, value: Any) -> bytes:
        try:
            return self._encoder.encode(value).encode()
        except (TypeError, ValueError) as exc:
            raise CodecError(self.name, f"cannot serialise {type(value).__name__}: {exc}") from exc

    def decode(self, data: bytes) -> Any:
        try:
            return self._decoder.decode(bytes(data).decode())
        except UnicodeDecodeError as exc:
            raise CodecError(self.name, f"invalid UTF-8 at byte {exc.start}") from exc
        except json.JSONDecodeError as exc:
            raise CodecError(self.name, f"invalid JSON: {exc}") from exc

    def __repr__(self) -> str:
        return "JsonCodec()"


class AvroCodec:
    """Avro binary encoding of one schema, without framing (fastavro "schemaless").

    Use :class:`goka.kafka.SchemaRegistryAvroCodec` for the Confluent Schema Registry wire format.

    Args:
        schema: the Avro schema as a dict (or JSON text).

    Raises:
        ConfigurationError: if the schema is invalid.
    """

    name = "avro"

    def __init__(self, schema: Mapping[str, Any] | str) -> None:
        self.schema = parse_avro_schema(schema)

    def encode(self, value: Any) -> bytes:
        return avro_encode(self.name, self.schema, value)

    def decode(self, data: bytes) -> Any:
        return avro_decode(self.name, self.schema, self.schema, data)

    def __repr__(self) -> str:
        return f"AvroCodec({self.schema.get('name', self.schema.get('type'))!r})"


def parse_avro_schema(schema: Mapping[str, Any] | str) -> dict[str, Any]:
    """Parse an Avro schema given as a mapping or JSON text, raising ConfigurationError."""
    import fastavro

    try:
        raw = json.loads(schema) if isinstance(schema, str) else dict(schema)
        parsed = fastavro.parse_schema(raw)
        if not isinstance(parsed, dict):
            raise TypeError(f"expected a record/enum/fixed schema object, got {parsed!r}")
    except Exception as exc:  # fastavro raises several unrelated types for bad schemas
        raise ConfigurationError(f"invalid Avro schema: {exc}") from exc
    return parsed


def avro_encode(codec: str, schema: dict[str, Any], value: Any) -> bytes:
    """Encode ``value`` with ``schema`` (schemaless), raising CodecError on mismatch."""
    import fastavro

    out = io.BytesIO()
    try:
        fastavro.schemaless_writer(out, schema, value, strict_allow_default=True)
    except Exception as exc:  # fastavro raises ValueError, TypeError, KeyError, AttributeError...
        raise CodecError(codec, f"value does not match the schema: {exc!r}") from exc
    return out.getvalue()


def avro_decode(
    codec: str, writer: dict[str, Any], reader: dict[str, Any], data: bytes | memoryview
) -> Any:
    """Decode schemaless Avro ``data``; every byte must be consumed."""
    import fastavro

    buf = io.BytesIO(data)
    try:
        value = fastavro.schemaless_reader(buf, writer, reader)
    except Exception as exc:  # EOFError, UnicodeDecodeError, IndexError, SchemaResolutionError...
        raise CodecError(codec, f"cannot decode {len(data)} bytes: {exc!r}") from exc
    if buf.tell() != len(data):
        raise CodecError(codec, f"{len(data) - buf.tell()} trailing bytes after the record")
    return value


class ProtobufCodec(Generic[M]):
    """Protocol Buffers messages of one generated class.

    Args:
        message_type: the generated message class, e.g. ``user_pb2.User``.
    """

    name = "protobuf"

    def __init__(self, message_type: type[M]) -> None:
        from google.protobuf.message import Message

        if not (isinstance(message_type, type) and issubclass(message_type, Message)):
            raise ConfigurationError(
                f"ProtobufCodec needs a generated message class, got {message_type!r}"
            )
        self.message_type = message_type

    def encode(self, value: M) -> bytes:
        if not isinstance(value, self.message_type):
            raise CodecError(
                self.name,
                f"expected {self.message_type.__name__}, got {type(value).__name__}",
            )
        return value.SerializeToString()

    def decode(self, data: bytes) -> M:
        from google.protobuf.message import DecodeError

        try:
            return self.message_type.FromString(bytes(data))
        except DecodeError as exc:
            raise CodecError(self.name, f"not a valid {self.message_type.__name__}: {exc}") from exc

    def __repr__(self) -> str:
        return f"ProtobufCodec({self.message_type.__name__})"


_BY_NAME: dict[str, Callable[[], Codec[Any]]] = {
    "bytes": BytesCodec,
    "string": StringCodec,
    "int64": Int64Codec,
    "json": JsonCodec,
}


def codec_by_name(name: str) -> Codec[Any]:
    """Return a new codec for a schema-less name: ``bytes``, ``string``, ``int64`` or ``json``.

    Raises:
        ConfigurationError: for any other name (Avro and protobuf need a schema or class).
    """
    try:
        return _BY_NAME[name]()
    except KeyError:
        raise ConfigurationError(
            f"unknown codec {name!r}; expected one of {', '.join(sorted(_BY_NAME))}"
        ) from None


def alike(one: Codec[Any], other: Codec[Any]) -> bool:
    """May two codecs declare one topic? Yes if they are one, if either is a
    :class:`BytesCodec` (it reads anything), or if they are of one class with the same settings
    (what pickling keeps of them; functions and classes by identity; what is neither plain data
    nor a function, a client or a lock, is not told apart)."""
    if one is other or isinstance(one, BytesCodec) or isinstance(other, BytesCodec):
        return True
    if type(one) is not type(other):
        return False
    try:
        states = one.__getstate__(), other.__getstate__()
        if states[0] == states[1]:
            return True
    except Exception:  # (they cannot be told apart)
        return True
    if isinstance(states[0], dict) and isinstance(states[1], dict):
        keys = states[0].keys() | states[1].keys()
        return all(_same(states[0].get(k), states[1].get(k)) for k in keys)
    return False


def _same(one: Any, other: Any) -> bool:
    """Equal, or not plain data, a function or a class (a client, a lock: not told apart)."""
    told = (str, bytes, int, float, bool, type(None), list, tuple, dict, type)
    if isinstance(one, told) or isinstance(other, told) or callable(one) or callable(other):
        try:
            return bool(one == other)
        except Exception:
            return True
    return True
