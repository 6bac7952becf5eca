"""A snapshot's rows made from COPY's lines in C (goka._speedups.copy_json, reached through
postgres_snapshot_rows.json_maker) against what the rows are: lines written here as PostgreSQL
writes COPY's text format, each row's key and JsonCodec's JSON of its dict computed from the
values themselves. The pure-Python reader (copy_rows and row_maker) is held to the same."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goka import _accel
from goka.codec import JsonCodec, StringCodec
from goka.connect.pgoutput import _bool, convert
from goka.connect.postgres_snapshot import copy_rows, row_maker
from goka.connect.postgres_snapshot_rows import json_maker

needs_speedups = pytest.mark.skipif(_accel.speedups is None, reason="goka._speedups is not built")

CONVERTERS = {"t": str, "i": int, "b": _bool}
#: How COPY TO writes a text value's characters (PostgreSQL's CopyAttributeOutText).
ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f",
           "\v": "\\v"}  # fmt: skip

texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
values = {
    "t": texts,
    "i": st.integers(min_value=-(2**63), max_value=2**63 - 1),
    "b": st.booleans(),
}


def copy_text(value: Any) -> str:
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    return "".join(ESCAPES.get(c, c) for c in str(value))


@st.composite
def tables(draw: Any) -> tuple[list[str], str, int, list[dict[str, Any]]]:
    kinds = draw(st.text("tib", min_size=1, max_size=6))
    names = draw(st.lists(texts, min_size=len(kinds), max_size=len(kinds), unique=True))
    key = draw(st.sampled_from([i for i, k in enumerate(kinds) if k != "b"] or [None]))
    rows = draw(st.lists(st.fixed_dictionaries({
        name: (values[kind] if i == key else st.none() | values[kind])
        for i, (name, kind) in enumerate(zip(names, kinds, strict=True))
    }), min_size=1, max_size=5))  # fmt: skip
    return names, kinds, -1 if key is None else key, rows


@needs_speedups
@given(tables())
def test_a_rows_json_and_key_are_its_values(table: tuple[list[str], str, int, Any]) -> None:
    names, kinds, key, rows = table
    converters = [CONVERTERS[k] for k in kinds]
    make = json_maker(JsonCodec(), names, converters, max(key, 0))
    if key < 0:  # (a boolean key: not done in C)
        assert make is None
        return
    assert make is not None
    row_of, encode = row_maker(names, converters), JsonCodec().encode
    for drawn in rows:
        row = {n: drawn[n] for n in names}  # (in the columns' order)
        line = ("\t".join(copy_text(row[n]) for n in names) + "\n").encode()
        want = (str(row[names[key]]).encode(), encode(row))
        assert make(line) == want
        assert make(memoryview(line)) == want  # (psycopg gives its messages so)
        [read] = copy_rows([line])
        assert (str(read[key]).encode(), encode(row_of(read))) == want


@needs_speedups
@pytest.mark.parametrize("line", [
    b"1\tx\n2\ty\n",  # two lines in one message
    b"1\tx",  # no newline
    b"1\n", b"1\tx\ty\n",  # fewer or more columns
    b"1a\tx\n", b"-\tx\n", b"\tx\n", b" 1\tx\n",  # not an integer
    b"\\N\tx\n",  # a NULL key
    b"1\t\\101\n", b"1\t\\x41\n", b"1\ta\\Nb\n", b"1\tx\\\n",  # escapes COPY does not write
    b"1\t\xff\n", b"1\t\xc3\n", b"1\t\xed\xa0\x80\n", b"1\t\xc0\xaf\n",  # not UTF-8
])  # fmt: skip
def test_a_line_not_made_in_c_is_left_to_the_reader(line: bytes) -> None:
    make = json_maker(JsonCodec(), ["id", "note"], [int, str], 0)
    assert make is not None
    assert make(line) is None


@needs_speedups
def test_a_boolean_column_is_true_or_false() -> None:
    make = json_maker(JsonCodec(), ["id", "on"], [int, _bool], 0)
    assert make is not None
    assert make(b"1\tt\n") == (b"1", b'{"id":1,"on":true}')
    assert make(b"1\tf\n") == (b"1", b'{"id":1,"on":false}')
    assert make(b"1\ttrue\n") is None


def test_json_is_made_in_c_only_for_plain_json_and_simple_columns() -> None:
    plain = json_maker(JsonCodec(), ["id", "at"], [int, str], 0)
    assert (plain is not None) == (_accel.speedups is not None)
    assert json_maker(JsonCodec(default=str), ["id"], [int], 0) is None  # (a hook)
    assert json_maker(StringCodec(), ["id"], [int], 0) is None
    assert json_maker(JsonCodec(), ["id", "at"], [int, convert("timestamptz")], 0) is None
    assert json_maker(JsonCodec(), ["id", "x"], [int, float], 0) is None
    assert json_maker(JsonCodec(), ["on", "id"], [_bool, int], 0) is None  # (a boolean key)
