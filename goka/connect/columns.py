"""Columns of a sink's rows: a value's columns, the PostgreSQL type a value asks for, and
whether a value fits a column."""

from __future__ import annotations

import datetime as dt
import decimal
import re
from typing import Any

__all__ = ["NAME", "columns_of", "copy_type", "message_columns", "misfit", "pg_type"]

#: A plain SQL name (tables, columns).
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")


def columns_of(value: Any) -> dict[str, Any]:
    """The columns of a decoded value: a dict's fields (JSON, Avro), a protobuf message's
    fields (:func:`message_columns`), else one ``value`` column."""
    if isinstance(value, dict):
        return value
    if hasattr(value, "DESCRIPTOR") and hasattr(value, "ListFields"):
        return message_columns(value)
    return {"value": value}


def message_columns(message: Any) -> dict[str, Any]:
    """A protobuf message's fields as columns: scalars as they are, enums by name, a
    ``google.protobuf.Timestamp`` as a datetime (UTC), other messages and repeated fields as
    JSON (dicts and lists; field names as in the .proto); an unset message field is None."""
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import Message

    columns: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        item: Any = getattr(message, field.name)
        kind = field.message_type
        if isinstance(item, Message):
            if not message.HasField(field.name):
                columns[field.name] = None
            elif kind.full_name == "google.protobuf.Timestamp":
                stamp: Any = item  # (a Timestamp: its class is generated)
                columns[field.name] = stamp.ToDatetime(tzinfo=dt.UTC)
            else:
                columns[field.name] = MessageToDict(item, preserving_proto_field_name=True)
        elif field.enum_type is not None and not hasattr(item, "extend"):
            columns[field.name] = field.enum_type.values_by_number[item].name \
                if item in field.enum_type.values_by_number else item  # fmt: skip
        elif hasattr(item, "extend"):  # repeated
            columns[field.name] = [MessageToDict(x, preserving_proto_field_name=True)
                                   if isinstance(x, Message) else x for x in item]  # fmt: skip
        else:
            columns[field.name] = item
    return columns


def pg_type(value: Any, name: str) -> str:
    """The column type a value asks for."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "double precision"
    if isinstance(value, decimal.Decimal):
        return "numeric"
    if isinstance(value, str):
        return "text"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytea"
    if isinstance(value, dt.datetime):
        return "timestamp with time zone"
    if isinstance(value, dt.date):
        return "date"
    if isinstance(value, (dict, list)):
        return "jsonb"
    raise ValueError(f"column {name!r}: no PostgreSQL type for {type(value).__name__} values")


#: What each column type (information_schema's ``data_type``) takes.
_TAKES: dict[str, tuple[type, ...]] = {
    "bigint": (int,), "integer": (int,), "smallint": (int,),
    "double precision": (int, float), "real": (int, float),
    "numeric": (int, float, decimal.Decimal),
    "text": (str,), "character varying": (str,), "character": (str,),
    "bytea": (bytes, bytearray, memoryview), "boolean": (bool,),
    "jsonb": (dict, list, str, int, float, bool), "json": (dict, list, str, int, float, bool),
    "timestamp with time zone": (dt.datetime,), "timestamp without time zone": (dt.datetime,),
    "date": (dt.date,),
}  # fmt: skip
_RANGES = {"integer": 2**31, "smallint": 2**15, "bigint": 2**63}


def misfit(value: Any, kind: str, length: int | None) -> str:
    """Why ``value`` does not fit a column of ``kind`` (empty: it fits)."""
    takes = _TAKES.get(kind)
    if takes is None:
        return f"is a type the sink does not write (a {type(value).__name__} value)"
    if isinstance(value, bool) and bool not in takes:
        return "takes no bool value"
    if not isinstance(value, takes):
        return f"takes no {type(value).__name__} value ({value!r:.60})"
    bound = _RANGES.get(kind)
    if bound is not None and isinstance(value, int) and not -bound <= value < bound:
        return f"takes no {value} (out of range)"
    if length is not None and isinstance(value, str) and len(value) > length:
        return f"takes at most {length} characters, got {len(value)}"
    return ""


def copy_type(kind: str) -> str:
    """The type name ``COPY ... (FORMAT BINARY)`` is given for a column."""
    return {"timestamp with time zone": "timestamptz",
            "timestamp without time zone": "timestamp", "character varying": "varchar",
            "character": "bpchar", "double precision": "float8"}.get(kind, kind)  # fmt: skip
