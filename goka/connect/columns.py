"""Columns of a sink's rows: a value's columns, the PostgreSQL type a value asks for, and
whether a value fits a column."""

from __future__ import annotations

import datetime as dt
import decimal
import re
from typing import Any

__all__ = ["NAME", "columns_of", "copy_type", "misfit", "pg_type"]

#: A plain SQL name (tables, columns).
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")


def columns_of(value: Any) -> dict[str, Any]:
    """The columns of a decoded value: a dict's fields, else one ``value`` column."""
    if isinstance(value, dict):
        return value
    return {"value": value}


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
