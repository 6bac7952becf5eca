"""pgoutput's messages decoded without a server: a transaction's Begin, Relation, Insert,
Update (key-changing, and with an unchanged TOASTed value), Delete, Truncate and Commit, built
byte by byte as the protocol documents them; array literals and the time types' values; the
transactions a snapshot window's chunk did not see."""

from __future__ import annotations

import struct
from collections.abc import Iterable

import pytest

from goka.connect.pgoutput import UNAVAILABLE, Decoder, TypeInfo, convert
from goka.connect.postgres_snapshot import Window

TYPES = {23: TypeInfo("int4", "N", 0), 25: TypeInfo("text", "S", 0),
         1007: TypeInfo("_int4", "A", 23), 1184: TypeInfo("timestamptz", "D", 0)}  # fmt: skip


def string(text: str) -> bytes:
    return text.encode() + b"\0"


def tuple_data(*values: str | bool | None) -> bytes:
    out = struct.pack(">h", len(values))
    for value in values:
        if value is None:
            out += b"n"
        elif value is True:  # (an unchanged TOASTed value)
            out += b"u"
        else:
            data = str(value).encode()
            out += b"t" + struct.pack(">i", len(data)) + data
    return out


def relation() -> bytes:
    columns = [("id", 23), ("name", 25), ("tags", 1007), ("at", 1184)]
    body = struct.pack(">i", 16384) + string("public") + string("items") + b"d"
    body += struct.pack(">h", len(columns))
    for index, (name, oid) in enumerate(columns):
        body += bytes([1 if index == 0 else 0]) + string(name) + struct.pack(">ii", oid, -1)
    return b"R" + body


def decoder(asked: list[list[int]]) -> Decoder:
    def types(oids: Iterable[int]) -> dict[int, TypeInfo]:
        asked.append(list(oids))
        return {o: TYPES[o] for o in oids if o in TYPES}

    return Decoder(types)


def test_a_transactions_messages_become_events_in_order() -> None:
    asked: list[list[int]] = []
    begin = b"B" + struct.pack(">qqi", 0x1_0000_0010, 86_400_000_000, 7)  # a day after 2000
    commit = b"C" + b"\0" + struct.pack(">qqq", 0x1_0000_0010, 0x1_0000_0040, 0)
    rel = struct.pack(">i", 16384)
    messages = [
        begin, relation(),
        b"I" + rel + b"N" + tuple_data("1", "a", "{1,NULL}", "2024-01-02 03:04:05+00"),
        b"U" + rel + b"K" + tuple_data("1", None, None, None)
        + b"N" + tuple_data("2", "b", True, None),
        b"D" + rel + b"K" + tuple_data("2", None, None, None),
        b"T" + struct.pack(">ib", 1, 0) + rel,
        commit,
    ]  # fmt: skip
    events = list(decoder(asked).decode(messages))
    assert events == [
        ("B", 0x1_0000_0010, 946_684_800_000 + 86_400_000, 7),
        ("I", "public.items", {"id": 1, "name": "a", "tags": [1, None],
                               "at": "2024-01-02T03:04:05Z"}, {}),
        ("U", "public.items", {"id": 2, "name": "b", "tags": UNAVAILABLE, "at": None},
         {"id": 1, "name": None, "tags": None, "at": None}),
        ("D", "public.items", None, {"id": 2, "name": None, "tags": None, "at": None}),
        ("T", ["public.items"]),
        ("C", "1/40"),
    ]  # fmt: skip
    assert asked == [[23, 25, 1007, 1184]]  # (each type asked once; int4 known by then)


def test_an_update_with_the_whole_old_row_fills_an_unchanged_toasted_value() -> None:
    rel = struct.pack(">i", 16384)
    old = tuple_data("1", "a", "{1}", None)
    update = b"U" + rel + b"O" + old + b"N" + tuple_data("1", "b", True, None)
    events = list(decoder([]).decode([relation(), update]))
    assert events[0][2] == {"id": 1, "name": "b", "tags": [1], "at": None}


@pytest.mark.parametrize(
    ("name", "typmod", "text", "value"),
    [("timestamp", 3, "1970-01-01 00:00:01.2345", 1234),
     ("timestamp", -1, "1970-01-01 00:00:01.2345", 1_234_500),
     ("timestamp", 6, "1969-12-31 23:59:59", -1_000_000),
     ("time", 2, "00:00:01.5", 1500), ("time", -1, "24:00:00", 86_400_000_000),
     ("date", -1, "1970-01-11", 10), ("timestamptz", -1, "-infinity", "-infinity"),
     ("timetz", -1, "23:30:00-01", "00:30:00Z"), ("numeric", -1, "1.10", "1.10"),
     ("bytea", -1, "\\x6869", "aGk="), ("float8", -1, "Infinity", float("inf"))],
)  # fmt: skip
def test_values_of_the_time_and_other_types(name: str, typmod: int, text: str,
                                            value: object) -> None:  # fmt: skip
    assert convert(name, typmod)(text) == value


def test_a_window_knows_the_transactions_its_chunk_did_not_see() -> None:
    window = Window()
    window.see(f"{(1 << 32) + 100}:{(1 << 32) + 110}:{(1 << 32) + 103},{(1 << 32) + 107}")
    assert [x for x in range(95, 115) if window.unseen(x)] == [103, 107, *range(110, 115)]
    assert not window.unseen(0)  # (no transaction: wal2json without xids)
    wrapped = Window()
    wrapped.see(f"{(2 << 32) - 5}:{(2 << 32) + 3}:")  # (xmax past a 32-bit wraparound)
    assert wrapped.unseen(3) and wrapped.unseen(10) and not wrapped.unseen(0xFFFFFFFB)
