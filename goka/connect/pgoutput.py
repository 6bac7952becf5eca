"""PostgreSQL's own logical decoding output, ``pgoutput`` (protocol version 1, with its
logical decoding messages: PostgreSQL 14 or later; allowed by the managed services), read
through the SQL functions (``pg_logical_slot_peek_binary_changes``), and its column values
mapped as Debezium maps them.

:class:`Decoder` turns the binary messages of a read into :data:`Event` tuples, the same
shape :mod:`goka.connect.postgres_cdc` makes of ``wal2json``'s rows:

* ``("B", commit_lsn, commit_ms, xid)``: a transaction begins;
* ``("C", end_lsn_text)``: it ends (the slot may advance to ``end_lsn_text``);
* ``("I" | "U" | "D", "schema.table", new_row | None, old_key_row)``: a change;
* ``("T", ["schema.table", ...])``: a TRUNCATE;
* ``("M", prefix, content)``: a logical decoding message in the transaction.

Column values (the text output of each type, with the session's ``TimeZone = UTC``,
``DateStyle = ISO``, ``IntervalStyle = iso_8601``: :data:`SESSION`), as Debezium's defaults
give them in JSON (``decimal.handling.mode = string``, ``time.precision.mode = adaptive``,
``binary.handling.mode = base64``, ``interval.handling.mode = string``):

==========================  ================================================================
type                        value
==========================  ================================================================
boolean, smallint, integer,  bool, int
bigint, oid
real, double precision       float
numeric                      str, exact (``"12.50"``, ``"NaN"``)
timestamp with time zone     str, ISO 8601 in UTC (``"2024-01-02T03:04:05.123456Z"``)
timestamp                    int: ms since the epoch (precision 0-3), else µs
date                         int: days since the epoch
time                         int: ms since midnight (precision 0-3), else µs
time with time zone          str, ISO 8601 in UTC (``"03:04:05.5Z"``)
interval                     str, ISO 8601 (``"P1DT2H"``)
json, jsonb                  str, the document as PostgreSQL writes it
bytea                        str, base64
uuid, text, varchar, ...     str
arrays                       list of their elements' values (nested for several dimensions)
==========================  ================================================================

``infinity`` and ``-infinity`` of dates and timestamps stay strings. A column whose TOASTed
value an update left unchanged (and the old row does not carry) is :data:`UNAVAILABLE`, as
Debezium's ``__debezium_unavailable_value``; ``REPLICA IDENTITY FULL`` avoids it.
"""

from __future__ import annotations

import base64
import datetime as dt
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SESSION", "UNAVAILABLE", "Decoder", "Event", "Relation", "TypeInfo", "convert",
           "lsn_int", "lsn_text"]  # fmt: skip

Event = tuple[Any, ...]
#: The settings a decoding session needs for the values' text (see the module docstring);
#: its own messages (watermarks, signals) wait for no synchronous standby.
SESSION = ("SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET IntervalStyle = 'iso_8601'; "
           "SET extra_float_digits = 3; SET bytea_output = 'hex'; "
           "SET client_encoding = 'UTF8'; SET synchronous_commit = 'local'")  # fmt: skip
#: A TOASTed value an update did not change and did not send.
UNAVAILABLE = "__goka_unavailable_value"
#: Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
_PG_EPOCH_US = 946_684_800_000_000
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)
_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_U32 = struct.Struct(">I")


@dataclass(frozen=True)
class TypeInfo:
    """What converting a type's values needs from ``pg_type``."""

    name: str
    category: str  # typcategory: "A" for arrays
    element: int  # typelem: an array's element type (0: none)
    delimiter: str = ","


@dataclass
class Relation:
    """A table as a Relation message describes it."""

    oid: int
    table: str  # schema.table
    columns: list[str]
    converters: list[Callable[[str], Any]]


class Decoder:
    """Decodes the messages of one source's reads (see the module docstring).

    Args:
        types: the ``pg_type`` facts of the given type oids (asked once per new type).
    """

    def __init__(self, types: Callable[[Iterable[int]], Mapping[int, TypeInfo]]) -> None:
        self._types = types
        self._known: dict[int, TypeInfo] = {}
        self.relations: dict[int, Relation] = {}

    def decode(self, messages: Iterable[bytes]) -> Iterator[Event]:
        """The events of ``messages`` (each a pgoutput message as bytes), in order."""
        for data in messages:
            kind = data[0]
            if kind == 0x49:  # I: relation, "N", new tuple
                relation = self.relations[_I32.unpack_from(data, 1)[0]]
                row, _ = _tuple(data, 6, relation, None)
                yield ("I", relation.table, row, {})
            elif kind == 0x55:  # U: relation, ["K" | "O" old tuple], "N" new tuple
                relation = self.relations[_I32.unpack_from(data, 1)[0]]
                old: dict[str, Any] = {}
                at, whole = 5, data[5] == 0x4F  # (O: the whole old row; K: its key only)
                if data[at] in (0x4B, 0x4F):
                    old, at = _tuple(data, at + 1, relation, None)
                row, _ = _tuple(data, at + 1, relation, old if whole else None)
                yield ("U", relation.table, row, old)
            elif kind == 0x44:  # D: relation, "K" | "O", old tuple
                relation = self.relations[_I32.unpack_from(data, 1)[0]]
                old, _ = _tuple(data, 6, relation, None)
                yield ("D", relation.table, None, old)
            elif kind == 0x42:  # B: final (commit) LSN, commit time, xid
                stamp = (_I64.unpack_from(data, 9)[0] + _PG_EPOCH_US) // 1000
                yield ("B", _I64.unpack_from(data, 1)[0], stamp, _U32.unpack_from(data, 17)[0])
            elif kind == 0x43:  # C: flags, commit LSN, end LSN, commit time
                end = _I64.unpack_from(data, 10)[0]
                yield ("C", lsn_text(end))
            elif kind == 0x52:  # R
                self._relation(data)
            elif kind == 0x54:  # T: relations, options, their oids
                count = _I32.unpack_from(data, 1)[0]
                oids = [_I32.unpack_from(data, 6 + 4 * i)[0] for i in range(count)]
                yield ("T", [self.relations[o].table for o in oids if o in self.relations])
            elif kind == 0x4D:  # M: flags, LSN, prefix, content (a logical decoding message)
                prefix, at = _string(data, 10)
                size = _I32.unpack_from(data, at)[0]
                yield ("M", prefix, data[at + 4 : at + 4 + size].decode(errors="replace"))
            # (Y types, O origins: nothing to give)

    def _relation(self, data: bytes) -> None:
        oid = _I32.unpack_from(data, 1)[0]
        schema, at = _string(data, 5)
        name, at = _string(data, at)
        count = _I16.unpack_from(data, at + 1)[0]
        at += 3
        columns, types = [], []
        for _ in range(count):
            column, at = _string(data, at + 1)  # (flags first)
            types.append((_I32.unpack_from(data, at)[0], _I32.unpack_from(data, at + 4)[0]))
            columns.append(column)
            at += 8
        self.learn(t for t, _ in types)
        converters = [self.converter(t, mod) for t, mod in types]
        self.relations[oid] = Relation(oid, f"{schema}.{name}", columns, converters)

    def learn(self, oids: Iterable[int]) -> None:
        """Ask for the types among ``oids`` not known yet (and their arrays' elements)."""
        missing = set(oids) - set(self._known)
        if not missing:
            return
        found = dict(self._types(sorted(missing)))
        elements = {i.element for i in found.values() if i.element} - set(self._known) - set(found)
        if elements:
            found.update(self._types(sorted(elements)))
        self._known.update(found)

    def converter(self, oid: int, typmod: int = -1) -> Callable[[str], Any]:
        """The function that maps a value of type ``oid`` (text) to its value."""
        info = self._known.get(oid)
        if info is None:
            return str
        if info.category == "A" and info.element:
            element = self.converter(info.element, typmod)
            return _safe(lambda text: _array(text, element, info.delimiter))
        found = convert(info.name, typmod)
        return found if found in _NEVER_FAIL else _safe(found)


def lsn_int(text: str) -> int:
    """An LSN (``16/B374D848``) as an int."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def lsn_text(value: int) -> str:
    """An LSN as PostgreSQL writes it."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def _safe(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """``convert``, or the text where it cannot (a year past 9999, a literal it does not
    know): a value is never a reason to stop a stream."""

    def safe(text: str) -> Any:
        try:
            return convert(text)
        except (ValueError, OverflowError, IndexError, AssertionError):
            return text

    return safe


def convert(name: str, typmod: int = -1) -> Callable[[str], Any]:
    """The converter of a type by its ``pg_type`` name (text for the types not listed in the
    module docstring)."""
    found = _CONVERTERS.get(name)
    if found is not None:
        return found
    if name in ("timestamp", "time"):
        micro = typmod < 0 or typmod > 3  # (time.precision.mode adaptive)
        if name == "timestamp":
            return _timestamp_us if micro else _timestamp_ms
        return _time_us if micro else _time_ms
    return str


def _tuple(data: bytes, at: int, relation: Relation,
           old: Mapping[str, Any] | None) -> tuple[dict[str, Any], int]:  # fmt: skip
    """The row of TupleData at ``at`` (``old``: where unchanged TOASTed values come from) and
    where it ends."""
    count = _I16.unpack_from(data, at)[0]
    at += 2
    row: dict[str, Any] = {}
    columns, converters = relation.columns, relation.converters
    for i in range(count):
        kind = data[at]
        at += 1
        if kind == 0x74:  # t: text
            size = _I32.unpack_from(data, at)[0]
            at += 4
            row[columns[i]] = converters[i](data[at : at + size].decode())
            at += size
        elif kind == 0x6E:  # n: null
            row[columns[i]] = None
        elif kind == 0x75:  # u: unchanged TOASTed value
            row[columns[i]] = UNAVAILABLE if old is None else old.get(columns[i], UNAVAILABLE)
        else:  # b: binary (protocol 2+ with binary: never asked for)
            raise ValueError(f"pgoutput: unexpected tuple value kind {chr(kind)!r} in "
                             f"{relation.table}.{columns[i]}")  # fmt: skip
    return row, at


def _string(data: bytes, at: int) -> tuple[str, int]:
    end = data.index(0, at)
    return data[at:end].decode(), end + 1


def _bool(text: str) -> bool:
    return text == "t"


def _bytea(text: str) -> str:
    return base64.b64encode(bytes.fromhex(text[2:])).decode()


def _zoned(text: str) -> str:
    """A timestamp with time zone (written in UTC) as ISO 8601 with a Z."""
    if text in ("infinity", "-infinity") or text.endswith(" BC"):
        return text
    return dt.datetime.fromisoformat(text).isoformat().replace("+00:00", "Z")


def _zoned_time(text: str) -> str:
    """A time with time zone (written with its own offset) in UTC, ISO 8601 with a Z."""
    when = dt.datetime.combine(_EPOCH_DATE, dt.time.fromisoformat(text))
    return when.astimezone(dt.UTC).time().isoformat() + "Z"


def _micros(text: str) -> int | str:
    if text in ("infinity", "-infinity") or text.endswith(" BC"):
        return text
    delta = dt.datetime.fromisoformat(text) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _timestamp_us(text: str) -> int | str:
    return _micros(text)


def _timestamp_ms(text: str) -> int | str:
    found = _micros(text)
    return found // 1000 if isinstance(found, int) else found


def _time_us(text: str) -> int:
    if text == "24:00:00":
        return 86_400_000_000
    t = dt.time.fromisoformat(text)
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond


def _time_ms(text: str) -> int:
    return _time_us(text) // 1000


def _date(text: str) -> int | str:
    if text in ("infinity", "-infinity") or text.endswith(" BC"):
        return text
    return (dt.date.fromisoformat(text) - _EPOCH_DATE).days


#: Converters whose type's text they always read (kept unwrapped: a call less per value).
_NEVER_FAIL: tuple[Callable[[str], Any], ...] = (str, int, float, _bool)

_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "bool": _bool,
    "int2": int,
    "int4": int,
    "int8": int,
    "oid": int,
    "float4": float,
    "float8": float,
    "timestamptz": _zoned,
    "timetz": _zoned_time,
    "date": _date,
    "bytea": _bytea,
}


def _array(text: str, element: Callable[[str], Any], delimiter: str = ",") -> Any:
    """A PostgreSQL array literal (``{1,2,NULL}``, ``{{"a b",c},{d,e}}``, with optional
    bounds ``[0:1]={...}``) as nested lists of ``element``'s values."""
    if text.startswith("["):  # (explicit bounds: the values alone)
        text = text[text.index("=") + 1 :]
    value, _ = _array_at(text, 0, element, delimiter)
    return value


def _array_at(text: str, at: int, element: Callable[[str], Any],
              delimiter: str) -> tuple[list[Any], int]:  # fmt: skip
    assert text[at] == "{", text
    at += 1
    items: list[Any] = []
    if text[at] == "}":
        return items, at + 1
    while True:
        if text[at] == "{":
            nested, at = _array_at(text, at, element, delimiter)
            items.append(nested)
        elif text[at] == '"':
            chars, at = [], at + 1
            while text[at] != '"':
                if text[at] == "\\":
                    at += 1
                chars.append(text[at])
                at += 1
            items.append(element("".join(chars)))
            at += 1
        else:
            end = at
            while text[end] not in (delimiter, "}"):
                end += 1
            word = text[at:end]
            items.append(None if word == "NULL" else element(word))
            at = end
        if text[at] == "}":
            return items, at + 1
        at += 1  # (the delimiter)
