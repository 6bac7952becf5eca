from __future__ import annotations

import math
import pickle
from typing import Any

import pytest
from google.protobuf import struct_pb2, timestamp_pb2
from hypothesis import given
from hypothesis import strategies as st

from goka import (
    AvroCodec,
    BytesCodec,
    Codec,
    CodecError,
    ConfigurationError,
    Int64Codec,
    JsonCodec,
    ProtobufCodec,
    StringCodec,
    codec_by_name,
)
from goka.errors import describe_key
from goka.keys import key_bytes, key_str

CLICK_SCHEMA = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "count", "type": "long"},
        {"name": "page", "type": ["null", "string"], "default": None},
    ],
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip
clicks = st.fixed_dictionaries(
    {
        "user": st.text(),
        "count": st.integers(min_value=-(2**63), max_value=2**63 - 1),
        "page": st.none() | st.text(),
    }
)


@given(st.binary())
def test_bytes_round_trip(value: bytes) -> None:
    codec = BytesCodec()
    assert codec.decode(codec.encode(value)) == value


@given(st.text())
def test_string_round_trip(value: str) -> None:
    codec = StringCodec()
    assert codec.decode(codec.encode(value)) == value


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_int64_round_trip(value: int) -> None:
    codec = Int64Codec()
    assert codec.decode(codec.encode(value)) == value


@given(json_values)
def test_json_round_trip(value: Any) -> None:
    codec = JsonCodec()
    assert codec.decode(codec.encode(value)) == value


@given(clicks)
def test_avro_round_trip(value: dict[str, Any]) -> None:
    codec = AvroCodec(CLICK_SCHEMA)
    assert codec.decode(codec.encode(value)) == value


@given(st.integers(min_value=0, max_value=2**40), st.integers(min_value=0, max_value=999_999_999))
def test_protobuf_round_trip(seconds: int, nanos: int) -> None:
    codec = ProtobufCodec(timestamp_pb2.Timestamp)
    value = timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)
    assert codec.decode(codec.encode(value)) == value


@pytest.mark.parametrize(
    ("value", "wire"),
    [(0, b"0"), (42, b"42"), (-7, b"-7"), (10**18 - 1, b"999999999999999999"),
     (2**63 - 1, b"9223372036854775807"),
     (-(2**63), b"-9223372036854775808")],
)  # fmt: skip
def test_int64_matches_go_goka_decimal_text(value: int, wire: bytes) -> None:
    # Go Goka: strconv.FormatInt(v, 10) / strconv.ParseInt(s, 10, 64)
    assert Int64Codec().encode(value) == wire
    assert Int64Codec().decode(wire) == value


def test_int64_accepts_what_go_parseint_accepts() -> None:
    assert Int64Codec().decode(b"+5") == 5
    assert Int64Codec().decode(b"007") == 7


@pytest.mark.parametrize(
    ("codec", "garbage", "reason"),
    [
        (StringCodec(strict=True), b"\xff\xfe", "invalid UTF-8"),
        (Int64Codec(), b"", "expected decimal digits"),
        (Int64Codec(), b"12a", "expected decimal digits"),
        (Int64Codec(), b" 12", "expected decimal digits"),
        (Int64Codec(), b"1_000", "expected decimal digits"),
        (Int64Codec(), b"\x00\x00\x00\x00\x00\x00\x00\x2a", "expected decimal digits"),
        (Int64Codec(), b"9223372036854775808", "outside the signed 64-bit range"),
        (Int64Codec(), b"9999999999999999999", "outside the signed 64-bit range"),
        (Int64Codec(), "\u0663".encode(), "expected decimal digits"),  # (an Arabic-Indic 3)
        (JsonCodec(), b"{not json", "invalid JSON"),
        (JsonCodec(), b"\xff", "invalid UTF-8"),
        (AvroCodec(CLICK_SCHEMA), b"\x02", "cannot decode"),
        (AvroCodec(CLICK_SCHEMA), b"\x02a\x04\x00trailing", "trailing bytes"),
        (ProtobufCodec(timestamp_pb2.Timestamp), b"\xff\xff\xff", "not a valid Timestamp"),
    ],
)
def test_decoding_garbage_raises_codec_error(
    codec: Codec[Any], garbage: bytes, reason: str
) -> None:
    with pytest.raises(CodecError, match=reason) as info:
        codec.decode(garbage)
    assert info.value.codec == codec.name
    assert str(info.value).startswith(f"{codec.name} codec: ")


@pytest.mark.parametrize(
    ("codec", "value", "reason"),
    [
        (BytesCodec(), "text", "expected bytes, got str"),
        (StringCodec(), b"raw", "expected str, got bytes"),
        (StringCodec(strict=True), "\udc80", "cannot encode as UTF-8"),
        (StringCodec(), "\ud800", "cannot encode as UTF-8"),  # stands for no byte
        (Int64Codec(), "5", "expected int, got str"),
        (Int64Codec(), True, "expected int, got bool"),
        (Int64Codec(), 2**63, "outside the signed 64-bit range"),
        (JsonCodec(), {1, 2}, "cannot serialise set"),
        (JsonCodec(), math.nan, "cannot serialise float"),
        (AvroCodec(CLICK_SCHEMA), {"user": "a"}, "does not match the schema"),
        (AvroCodec(CLICK_SCHEMA), {"user": 1, "count": 1}, "does not match the schema"),
        (ProtobufCodec(timestamp_pb2.Timestamp), struct_pb2.Value(), "expected Timestamp"),
    ],
)
def test_encoding_wrong_values_raises_codec_error(
    codec: Codec[Any], value: Any, reason: str
) -> None:
    with pytest.raises(CodecError, match=reason):
        codec.encode(value)


def test_json_hooks_build_and_serialise_custom_types() -> None:
    class Point:
        def __init__(self, x: int) -> None:
            self.x = x

    codec = JsonCodec(default=lambda p: {"x": p.x}, object_hook=lambda d: Point(d["x"]))
    assert codec.encode(Point(3)) == b'{"x":3}'
    assert codec.decode(b'{"x":4}').x == 4


def test_json_is_compact_utf8() -> None:
    assert JsonCodec().encode({"name": "Zoë", "n": [1, 2]}) == '{"name":"Zoë","n":[1,2]}'.encode()


def test_invalid_avro_schema_fails_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="invalid Avro schema"):
        AvroCodec({"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]})


def test_protobuf_codec_needs_a_message_class() -> None:
    with pytest.raises(ConfigurationError, match="generated message class"):
        ProtobufCodec(dict)  # type: ignore[type-var]  # the mistake under test


def test_codec_by_name() -> None:
    assert isinstance(codec_by_name("json"), JsonCodec)
    assert codec_by_name("int64").decode(b"12") == 12
    with pytest.raises(ConfigurationError, match="unknown codec 'avro'; expected one of bytes"):
        codec_by_name("avro")


@pytest.mark.parametrize(
    "codec",
    [BytesCodec(), StringCodec(), Int64Codec(), JsonCodec(), AvroCodec(CLICK_SCHEMA),
     ProtobufCodec(timestamp_pb2.Timestamp)],
)  # fmt: skip
def test_every_codec_satisfies_the_protocol(codec: Any) -> None:
    assert isinstance(codec, Codec)
    assert codec.name


@pytest.mark.parametrize(
    "codec",
    [BytesCodec(), StringCodec(), Int64Codec(), JsonCodec(), AvroCodec(CLICK_SCHEMA),
     ProtobufCodec(timestamp_pb2.Timestamp)],
)  # fmt: skip
def test_codecs_survive_pickling(codec: Any) -> None:
    """Spark pickles group graphs, codecs included, to run them in its workers."""
    import pickle

    copy = pickle.loads(pickle.dumps(codec))
    value = {
        "bytes": b"x", "string": "x", "int64": 7, "json": {"a": [1]},
        "avro": {"user": "u", "count": 1, "page": None},
        "protobuf": timestamp_pb2.Timestamp(seconds=5),
    }[codec.name]  # fmt: skip
    assert copy.decode(codec.encode(value)) == value


@pytest.mark.parametrize(
    "raw", [bytes(range(256)), b"\xed\xa0\x80", b"\xc3", "café ☕".encode(), b""]
)
def test_keys_and_the_default_string_codec_keep_any_bytes(raw: bytes) -> None:
    assert key_bytes(key_str(raw)) == raw
    codec = StringCodec()
    assert codec.encode(codec.decode(raw)) == raw
    if raw.isascii() or raw == "café ☕".encode():  # text is the same str as with strict UTF-8
        assert key_str(raw) == codec.decode(raw) == raw.decode()


def test_key_errors_and_descriptions() -> None:
    with pytest.raises(CodecError, match=r"key codec: key '\\ud800' has no byte form"):
        key_bytes("\ud800")
    with pytest.raises(CodecError, match="expected str or bytes, got int"):
        key_bytes(5)  # type: ignore[arg-type]  # the error under test
    assert describe_key("\udcffk") == describe_key(b"\xffk") == r"b'\xffk'"
    assert describe_key("été") == "'été'"
    assert describe_key(None) == "None"


@pytest.mark.parametrize("codec", [StringCodec(), StringCodec(strict=True)])
def test_string_codecs_pickle_with_their_mode(codec: StringCodec) -> None:
    copy = pickle.loads(pickle.dumps(codec))
    assert copy == codec and copy.strict == codec.strict
    if codec.strict:
        with pytest.raises(CodecError, match="invalid UTF-8"):
            copy.decode(b"\xff")
    else:
        assert copy.decode(b"\xff") == "\udcff"
