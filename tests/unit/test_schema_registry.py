from __future__ import annotations

import struct
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from hypothesis import given, settings
from hypothesis import strategies as st

from goka import CodecError, ConfigurationError
from goka.kafka import SchemaRegistryAvroCodec

V1 = {
    "type": "record",
    "name": "Click",
    "fields": [{"name": "user", "type": "string"}, {"name": "count", "type": "long"}],
}
V2 = {
    "type": "record",
    "name": "Click",
    "fields": [*V1["fields"], {"name": "page", "type": "string", "default": "/"}],
}


@pytest.fixture
def registry() -> Any:
    return SchemaRegistryClient.new_client({"url": "mock://goka-tests"})


def test_values_use_the_confluent_wire_format(registry: Any) -> None:
    codec = SchemaRegistryAvroCodec(registry, "clicks-value", V1)
    data = codec.encode({"user": "ann", "count": 3})
    magic, schema_id = struct.unpack(">bI", data[:5])
    assert magic == 0
    assert schema_id == codec.schema_id == registry.get_latest_version("clicks-value").schema_id
    assert codec.decode(data) == {"user": "ann", "count": 3}


@settings(max_examples=50)
@given(st.text(), st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_round_trip(user: str, count: int) -> None:
    registry = SchemaRegistryClient.new_client({"url": "mock://goka-tests"})
    codec = SchemaRegistryAvroCodec(registry, "clicks-value", V1)
    assert codec.decode(codec.encode({"user": user, "count": count})) == {
        "user": user,
        "count": count,
    }


def test_reader_resolves_an_older_writer_schema(registry: Any) -> None:
    old = SchemaRegistryAvroCodec(registry, "clicks-value", V1)
    new = SchemaRegistryAvroCodec(registry, "clicks-value", V2)
    assert new.schema_id != old.schema_id
    assert new.decode(old.encode({"user": "bo", "count": 1})) == {
        "user": "bo",
        "count": 1,
        "page": "/",
    }


def test_decode_only_codec_reads_with_the_writer_schema(registry: Any) -> None:
    data = SchemaRegistryAvroCodec(registry, "clicks-value", V1).encode({"user": "c", "count": 2})
    reader = SchemaRegistryAvroCodec(registry, "clicks-value")
    assert reader.decode(data) == {"user": "c", "count": 2}
    with pytest.raises(CodecError, match="can only decode"):
        reader.encode({"user": "c", "count": 2})


@pytest.mark.parametrize(
    ("garbage", "reason"),
    [
        (b"\x00\x00", "shorter than the 5-byte wire-format header"),
        (b"\x01\x00\x00\x00\x01\x02", "magic byte is 1, expected 0"),
        (b"\x00\x00\x00\x03\xe7\x02", "unknown writer schema id 999"),
        (b"\x00\x00\x00\x00\x01", "cannot decode"),
    ],
)
def test_garbage_raises_codec_error(registry: Any, garbage: bytes, reason: str) -> None:
    codec = SchemaRegistryAvroCodec(registry, "clicks-value", V1)
    with pytest.raises(CodecError, match=reason):
        codec.decode(garbage)


def test_lookup_of_an_unregistered_schema_fails_at_construction(registry: Any) -> None:
    with pytest.raises(ConfigurationError, match="cannot find the schema under subject 'x-value'"):
        SchemaRegistryAvroCodec(registry, "x-value", V1, auto_register=False)


def test_registry_settings_instead_of_a_client() -> None:
    codec = SchemaRegistryAvroCodec({"url": "mock://settings"}, "s-value", V1)
    assert codec.decode(codec.encode({"user": "d", "count": 0})) == {"user": "d", "count": 0}
