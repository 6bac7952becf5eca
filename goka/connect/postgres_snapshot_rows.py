"""A snapshot's rows to its source's writer: records with ``goka-op: r`` and ``goka-table``,
keyed as the table's changes are, at the positions the snapshot gives them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from goka.connect.pgoutput import lsn_text
from goka.connect.positions import POSITION_HEADER
from goka.connect.postgres_snapshot import BASE, record_key
from goka.connect.source import FROM_OPTIONS

__all__ = ["OP_HEADER", "TABLE_HEADER", "give_direct", "row_giver"]

OP_HEADER, TABLE_HEADER = "goka-op", "goka-table"


def row_giver(writer: Any, source: Any, names: Sequence[str], table: str,
              stamp: int) -> Callable[[tuple[int, int], dict[str, Any]], None]:  # fmt: skip
    """``give(at, row)``: a snapshot's row of ``table`` (key columns ``names``) to the
    writer, what every row shares worked out once (a snapshot gives millions)."""
    record = writer.record
    headers = [(OP_HEADER, b"r"), (TABLE_HEADER, table.encode())]
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


def give_direct(writer: Any, source: Any, names: Sequence[str], table: str,
                rows: Iterator[dict[str, Any]], point: int, first: int,
                stamp: int) -> bool:  # fmt: skip
    """Give an initial snapshot's rows (the first at ``(point, first - BASE)``) by calling the
    producer here (what ``writer.record`` does, without its calls per row), where they go out
    as they are (:meth:`~goka.connect.source.SourceWriter.direct`) keyed by one key column; a
    row whose encoding fails goes through ``writer.record`` (its error, its policy). Return
    False (nothing given) where they cannot."""
    if source.key is not None or source.timestamp is not None or len(names) != 1 \
            or not writer.direct((point, first - BASE)):  # fmt: skip
        return False
    produce, waiting, encode = writer.producer.raw_produce, writer.producer.produce, \
        source.codec.encode  # fmt: skip
    topic, name = source.tables[table], names[0]
    head = f"{source.name}\t{lsn_text(point)}\t".encode()
    extra = [(OP_HEADER, b"r"), (TABLE_HEADER, table.encode())]
    done, last = 0, None
    try:
        for n, row in enumerate(rows, first):
            value = row[name]
            try:
                data = encode(row)
            except Exception:
                data = None
            if data is None or value is None:
                writer.count_plain(done, last)
                done, last = 0, None
                row_giver(writer, source, names, table, stamp)((point, n - BASE), row)
                continue
            key = str(value).encode()
            headers = [(POSITION_HEADER, b"%s%d\t0" % (head, n - BASE)), *extra]
            try:
                produce(topic, data, key, partition=-1, timestamp=stamp, headers=headers)
            except BufferError:
                waiting(topic, data, key, -1, stamp, headers)
            done += 1
            last = (point, n - BASE, 0)
    finally:
        writer.count_plain(done, last)
    return True
