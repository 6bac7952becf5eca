"""The ``wal2json`` output plugin's changes (format version 2, one JSON object per row of
``pg_logical_slot_peek_changes``) as :mod:`goka.connect.pgoutput`'s events. Values are as
wal2json writes them (numbers, text; bytea as hex); json and jsonb columns are parsed."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from goka.connect.pgoutput import Event, lsn_int

__all__ = ["event"]


def event(row: tuple[str]) -> Event:
    """The event (:mod:`goka.connect.pgoutput`'s shape) of a row that ``..._peek_changes``
    gave."""
    change = json.loads(row[0])
    action = change["action"]
    if action == "B":
        return ("B", lsn_int(change["lsn"]), _ms(change.get("timestamp")), change.get("xid", 0))
    if action == "C":
        return ("C", change["nextlsn"])
    table = f"{change.get('schema')}.{change.get('table')}"
    if action == "T":
        return ("T", [table])
    if action == "M":
        return ("M", change.get("prefix"), change.get("content"))
    if action not in ("I", "U", "D"):
        return ("X",)  # (nothing to give)
    identity = {c["name"]: _value(c) for c in change.get("identity") or ()}
    values = {c["name"]: _value(c) for c in change["columns"]} if action != "D" else None
    return (action, table, values, identity)


def _value(column: Mapping[str, Any]) -> Any:
    value = column.get("value")
    if isinstance(value, str) and column.get("type") in ("json", "jsonb"):
        return json.loads(value)
    return value


def _ms(text: str | None) -> int:
    if not text:
        return 0
    return round(dt.datetime.fromisoformat(text).timestamp() * 1000)
