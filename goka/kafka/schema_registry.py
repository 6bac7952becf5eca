"""Avro with the Confluent Schema Registry wire format.

Each value is framed as ``0x00`` (magic byte), the writer schema's id as 4 big-endian bytes, then
the Avro body. Decoding fetches the writer schema by id (cached) and resolves it against the
reader schema, so producers may evolve their schema compatibly.
"""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from goka._optional import missing_extra
from goka.codec import avro_decode, avro_encode, parse_avro_schema
from goka.errors import CodecError, ConfigurationError

if TYPE_CHECKING:  # the registry client (httpx, authlib) is imported when a codec is made:
    from confluent_kafka.schema_registry import SchemaRegistryClient  # 0.3 s per process

__all__ = ["SchemaRegistryAvroCodec", "frame", "unframe"]

_HEADER = struct.Struct(">bI")
MAGIC = 0


def frame(schema_id: int, body: bytes) -> bytes:
    """Prefix ``body`` with the wire-format header for ``schema_id``."""
    return _HEADER.pack(MAGIC, schema_id) + body


def unframe(codec: str, data: bytes) -> tuple[int, memoryview]:
    """Split wire-format ``data`` into (schema id, body).

    Raises:
        CodecError: too short or the magic byte is not 0.
    """
    if len(data) < _HEADER.size:
        raise CodecError(codec, f"{len(data)} bytes is shorter than the 5-byte wire-format header")
    magic, schema_id = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CodecError(codec, f"magic byte is {magic}, expected {MAGIC} (not wire format)")
    return schema_id, memoryview(data)[_HEADER.size :]


class SchemaRegistryAvroCodec:
    """Avro values in the Confluent Schema Registry wire format.

    Args:
        registry: a ``SchemaRegistryClient``, or its settings (``{"url": "https://..."}``;
            ``mock://`` URLs give confluent-kafka's in-memory registry).
        subject: the subject the schema is registered under, e.g. ``"clicks-value"``.
        schema: the schema values are written with and read into. Without it, values are read
            with their writer schema and cannot be written.
        auto_register: register ``schema`` under ``subject``; if False, look it up.

    Raises:
        ConfigurationError: invalid schema, or the registry refused it / does not know it.
    """

    name = "avro-registry"

    def __init__(
        self,
        registry: SchemaRegistryClient | Mapping[str, Any],
        subject: str,
        schema: Mapping[str, Any] | str | None = None,
        *,
        auto_register: bool = True,
    ) -> None:
        if isinstance(registry, Mapping):
            try:
                from confluent_kafka.schema_registry import SchemaRegistryClient
            except ImportError as exc:
                raise missing_extra(
                    "confluent-kafka[schemaregistry]", "schema-registry", "SchemaRegistryAvroCodec"
                ) from exc

            registry = SchemaRegistryClient.new_client(dict(registry))
        self._registry = registry
        self.subject = subject
        self._writers: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.schema: dict[str, Any] | None = None
        self.schema_id: int | None = None
        if schema is not None:
            self.schema = parse_avro_schema(schema)
            self.schema_id = self._schema_id(schema, auto_register)
            self._writers[self.schema_id] = self.schema

    def _schema_id(self, schema: Mapping[str, Any] | str, auto_register: bool) -> int:
        from confluent_kafka.schema_registry import Schema
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        text = schema if isinstance(schema, str) else json.dumps(dict(schema))
        spec = Schema(text, "AVRO")
        try:
            if auto_register:
                return int(self._registry.register_schema(self.subject, spec))
            found = self._registry.lookup_schema(self.subject, spec).schema_id
            if found is None:
                raise SchemaRegistryError(404, 40403, "the registry returned no schema id")
            return found
        except SchemaRegistryError as exc:
            action = "register" if auto_register else "find"
            raise ConfigurationError(
                f"cannot {action} the schema under subject {self.subject!r}: {exc}"
            ) from exc

    def encode(self, value: Any) -> bytes:
        if self.schema is None or self.schema_id is None:
            raise CodecError(self.name, "no schema given, so this codec can only decode")
        return frame(self.schema_id, avro_encode(self.name, self.schema, value))

    def decode(self, data: bytes) -> Any:
        schema_id, body = unframe(self.name, data)
        writer = self._writer(schema_id)
        return avro_decode(self.name, writer, self.schema or writer, body)

    def _writer(self, schema_id: int) -> dict[str, Any]:
        writer = self._writers.get(schema_id)
        if writer is not None:
            return writer
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            found = self._registry.get_schema(schema_id)
        except SchemaRegistryError as exc:
            raise CodecError(self.name, f"unknown writer schema id {schema_id}: {exc}") from exc
        try:
            writer = parse_avro_schema(found.schema_str or "")
        except ConfigurationError as exc:
            raise CodecError(self.name, f"writer schema {schema_id} is invalid: {exc}") from exc
        with self._lock:
            self._writers[schema_id] = writer
        return writer

    def __repr__(self) -> str:
        return f"SchemaRegistryAvroCodec(subject={self.subject!r}, schema_id={self.schema_id})"
