"""A snapshot's rows to its source's writer: records with ``goka-op: r`` and ``goka-table``,
keyed as the table's changes are, at the positions the snapshot gives them."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

from goka.codec import JsonCodec
from goka.connect.pgoutput import _bool, lsn_text
from goka.connect.positions import POSITION_HEADER
from goka.connect.postgres_snapshot import (
    BASE,
    Chunk,
    line_values,
    record_key,
    row_maker,
    split_lines,
)
from goka.connect.source import FROM_OPTIONS

__all__ = ["OP_HEADER", "TABLE_HEADER", "give_direct", "json_maker", "read_headers", "row_giver"]

OP_HEADER, TABLE_HEADER = "goka-op", "goka-table"


def row_giver(writer: Any, source: Any, names: Sequence[str], table: str,
              stamp: int) -> Callable[[tuple[int, int], dict[str, Any]], None]:  # fmt: skip
    """``give(at, row)``: a snapshot's row of ``table`` (key columns ``names``) to the
    writer, what every row shares worked out once (a snapshot gives millions)."""
    record, headers = writer.record, read_headers(table)
    topic, when = source.tables[table], stamp if source.timestamp is None else None
    if source.key is None and len(names) == 1:
        name = names[0]

        def give(at: tuple[int, int], row: dict[str, Any]) -> None:
            value = row[name]
            record(at, None, row, key=None if value is None else str(value).encode(),
                   headers=headers, stamp=when, topic=topic)  # fmt: skip

        return give

    def give_keyed(at: tuple[int, int], row: dict[str, Any]) -> None:
        key = FROM_OPTIONS if source.key is not None else record_key(names, row)
        record(at, None, row, key=key, headers=headers, stamp=when, topic=topic)

    return give_keyed


def read_headers(table: str) -> list[tuple[str, bytes]]:
    """A snapshot's read's headers (its position's aside)."""
    return [(OP_HEADER, b"r"), (TABLE_HEADER, table.encode())]


def give_direct(writer: Any, source: Any, names: Sequence[str], chunk: Chunk, query: Any,
                conn: Any, described: tuple[list[str], list[Callable[[str], Any]]], point: int,
                first: int, stamp: int) -> bool:  # fmt: skip
    """Give an initial snapshot's chunk (``query``'s COPY, the first row at ``(point, first -
    BASE)``) by calling the producer here (what ``writer.record`` does, without its calls per
    row), where they go out as they are (:meth:`~goka.connect.source.SourceWriter.direct`)
    keyed by one key column; each row's JSON made from COPY's line in C where it can
    (:func:`json_maker`), else from its dict; a row whose encoding fails goes through
    ``writer.record`` (its error, its policy). Return False (nothing read) where they cannot."""
    if source.key is not None or source.timestamp is not None or len(names) != 1 \
            or not writer.direct((point, first - BASE)):  # fmt: skip
        return False
    produce, waiting, encode = writer.producer.raw_produce, writer.producer.produce, \
        source.codec.encode  # fmt: skip
    table, (columns, converters) = chunk.table, described
    topic, name, at = source.tables[table], names[0], list(columns).index(names[0])
    head = f"{source.name}\t{lsn_text(point)}\t".encode()
    extra, slow = read_headers(table), row_giver(writer, source, names, table, stamp)
    row_of, fast = row_maker(columns, converters), json_maker(source.codec, columns, converters, at)
    n, done, rest, last = first, 0, b"", None

    def give_row(values: list[str | None]) -> None:
        nonlocal n, done
        row = row_of(values)
        value = row[name]
        try:
            data = encode(row)
        except Exception:
            data = None
        if data is None or value is None:
            writer.count_plain(done, (point, n - 1 - BASE, 0) if done else None)
            done = 0
            slow((point, n - BASE), row)
        else:
            send(str(value).encode(), data)
        n += 1

    def send(key: bytes, data: bytes) -> None:
        nonlocal done
        headers = [(POSITION_HEADER, b"%s%d\t0" % (head, n - BASE)), *extra]
        try:
            produce(topic, data, key, partition=-1, timestamp=stamp, headers=headers)
        except BufferError:
            waiting(topic, data, key, -1, stamp, headers)
        done += 1

    try:
        with conn.cursor().copy(query) as copy:
            for block in copy:
                made = fast(block) if fast is not None and not rest else None
                if made is not None:  # (one whole row, done in C)
                    send(*made)
                    n += 1
                    last = block
                    continue
                lines, rest = split_lines(rest, block)
                for values in map(line_values, lines):
                    give_row(values)
                    last = values
    finally:
        writer.count_plain(done, (point, n - 1 - BASE, 0) if done else None)
    if last is not None and not isinstance(last, list):
        last = line_values(bytes(last)[:-1])  # (a message made in C: one line and its newline)
    chunk.end(n - first, last, columns, names)
    return True


def json_maker(codec: Any, columns: Sequence[str], converters: Sequence[Callable[[str], Any]],
               key: int) -> Callable[[Any], tuple[bytes, bytes] | None] | None:  # fmt: skip
    """``make(message)``: a COPY message's record key and value, made in C
    (``goka._speedups.copy_json``) as ``codec`` encodes the row's dict, or None where that
    message is not one made there; None where the codec is not plain JSON, a column is not
    text, an integer or a boolean (its converter), or the C module is not there."""
    from goka._accel import speedups

    kinds = {str: "t", int: "i", _bool: "b"}
    if speedups is None or not isinstance(codec, JsonCodec) or not codec.plain \
            or any(c not in kinds for c in converters) or converters[key] is _bool:  # fmt: skip
        return None
    names = [json.dumps(c, ensure_ascii=False) for c in columns]
    prefixes = tuple(f"{',' if i else '{'}{n}:".encode() for i, n in enumerate(names))
    code = "".join(kinds[c] for c in converters).encode()
    return functools.partial(speedups.copy_json, prefixes, code, key)
