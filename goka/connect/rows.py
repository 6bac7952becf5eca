"""What every sink writer shares: records as the readers give them, a write's summary, and
records decoded into rows with failures routed to the sink's ``on_error``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from goka.connect.columns import NAME, columns_of
from goka.errors import SinkError

__all__ = ["DeadLetterSender", "Record", "Row", "WriteSummary", "decode_rows", "refuse"]

log = logging.getLogger(__name__)

#: A record as the readers give it: topic, offset, key, value, timestamp (ms), headers.
Record = tuple[str, int, bytes | None, bytes | None, int, Any]
#: A record to store: offset, key, timestamp (ms), columns (None: a tombstone).
Row = tuple[int, str, int, dict[str, Any] | None]
#: Sends a partition's refused records (and why) to the dead-letter topic, before a write
#: commits (:meth:`goka.connect.dead_letters.DeadLetters.send`).
DeadLetterSender = Callable[[int, Sequence[tuple[Record, str]]], int]


@dataclass
class WriteSummary:
    """What one write did: rows upserted, deleted (tombstones) or appended, records left out
    (below the stored position), filtered out (the mapper returned None), skipped
    (``on_error="skip"``, with why), dead letters
    (``on_error="dead-letter"``: the records and why), columns added, files written."""

    upserted: int = 0
    deleted: int = 0
    appended: int = 0
    already: int = 0
    skipped: list[str] = field(default_factory=list)
    filtered: int = 0
    dead_letters: list[tuple[Record, str]] = field(default_factory=list)
    added_columns: list[str] = field(default_factory=list)
    files: int = 0
    seconds: float = 0.0


def decode_rows(
    sink: Any, what: str, partition: int, records: Sequence[Record], summary: WriteSummary,
    meta: Sequence[str], check: Callable[[str, int, dict[str, Any] | None], None] | None = None,
) -> Iterator[tuple[Row, Record]]:  # fmt: skip
    """Each record's row (decoded key, columns from the sink's mapper or the value; None: a
    tombstone) with the record. ``check(key, offset, columns)`` may refuse a row (raising
    ValueError). A record that fails goes to :func:`refuse` (``what`` names the sink, e.g.
    "PostgreSQL sink 'clicks'")."""
    decode, mapper = sink.codec.decode, sink.mapper
    for record in records:
        _, offset, raw_key, raw_value, timestamp, _ = record
        try:
            if raw_key is None:
                raise ValueError("the record has no key")
            try:
                key = raw_key.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"its key {raw_key!r} is not UTF-8 text") from None
            if raw_value is None:
                columns = None
            else:
                value = decode(raw_value)
                mapped = mapper(key, value) if mapper else columns_of(value)
                if mapped is None:  # the mapper filtered it out
                    summary.filtered += 1
                    continue
                columns = dict(mapped)
                for name in columns:
                    if name in meta or not NAME.match(name):
                        raise ValueError(f"column {name!r} is reserved or not a plain name "
                                         "(use a mapper)")  # fmt: skip
            if check is not None:
                check(key, offset, columns)
        except Exception as exc:
            refuse(sink, what, summary, record, partition,
                   f"{type(exc).__name__}: {exc}", exc)  # fmt: skip
            continue
        yield (offset, key, timestamp, columns), record


def refuse(sink: Any, what: str, summary: WriteSummary, record: Record, partition: int,
           reason: str, cause: Exception | None = None) -> None:  # fmt: skip
    """Apply the sink's ``on_error`` to ``record`` (of ``partition``) for ``reason``: raise
    :class:`SinkError` naming it (``fail``), or list it in ``summary`` as skipped (logged)
    or as a dead letter.

    Raises:
        SinkError: under ``on_error="fail"``.
    """
    why = f"topic {record[0]!r} partition {partition} offset {record[1]}: {reason}"
    if sink.on_error == "fail":
        raise SinkError(f"{what}: {why}") from cause
    if sink.on_error == "dead-letter":
        summary.dead_letters.append((record, why))
        return
    log.warning("%s: skipped %s", what, why)
    summary.skipped.append(why)
