"""The snapshots of a PostgreSQL change source: every existing row of its tables, in chunks of
primary key order, so that with the changes the slot gives each key's records are its rows'
versions in commit order (none missing, none twice).

**Initial snapshot.** The slot is made on a replication connection (``CREATE_REPLICATION_SLOT
... EXPORT_SNAPSHOT``: its consistent point ``P`` and a snapshot's name); a second connection
imports the snapshot into a ``REPEATABLE READ`` transaction and copies each table out, chunk
by chunk (``COPY (SELECT ... WHERE key > last ORDER BY key LIMIT n) TO STDOUT``; the values'
text read by the decoder's converters, so that a row reads as its changes do). Its rows are at
``(P, n - BASE, 0)`` in read order, below every change (a change commits after ``P``);
:func:`begun_at` marks the snapshot begun and :func:`done_at` ``(P, -1, 0)`` wholly read.
Before the first row and after each chunk, the source's progress notes the :class:`Plan` (the
tables left, the last key done).

**Chunks with watermarks** (a snapshot cut before its end, resumed; later, a table snapshotted
again while changes stream). The exported snapshot is gone with its connection, but the slot
has not moved past ``P``: the rest is read while the changes stream, a chunk at a time, each
between two watermarks (logical decoding messages ``goka-watermark``, committed before and
after its ``SELECT``: :class:`Window`). Where the stream reaches the low watermark, every
change of the chunk's table until the high one removes its keys from the chunk (the change
carries a state at least as new); at the high watermark the rest of the chunk is given as
reads, at that point of the stream. A chunk's rows read a state between the two marks that no
change inside them touched: the state at the high mark. A change of a transaction the chunk's
snapshot does not see (committed in the WAL, but not yet visible: a synchronous standby's
wait) is newer than the chunk's row: met inside the window it drops the key, and if it was
given before the window (by this run, or perhaps an earlier one), the chunk is not read until
that transaction is visible. A window whose marks come back after a restart is not the open
one: it is ignored, and its chunk read again in a new window (its rows, if some were given,
read twice: reads, never changes).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from goka.connect.database import table_name
from goka.connect.pgoutput import Decoder

__all__ = [
    "BASE",
    "MODES",
    "PREFIX",
    "SIGNAL",
    "Chunk",
    "Plan",
    "Window",
    "begun_at",
    "columns_of",
    "copy_query",
    "copy_rows",
    "done_at",
    "is_milestone",
    "is_snapshot",
    "line_values",
    "make_slot",
    "read_chunk",
    "record_key",
    "row_maker",
    "split_lines",
    "stream_chunk",
]  # fmt: skip

log = logging.getLogger(__name__)

#: The snapshot modes (Debezium's names): ``initial`` (the default: a snapshot when the slot is
#: made, then the changes), ``never``, ``initial_only`` (the snapshot, no changes: the slot is
#: dropped after it), ``when_needed`` (also when the slot or its position is gone).
MODES = ("initial", "never", "initial_only", "when_needed")
#: Snapshot rows' change indexes are ``n - BASE``: below every change's and :func:`done_at`'s.
BASE = 1 << 62
#: The prefix of the watermark messages.
PREFIX = "goka-watermark"
#: The prefix of the snapshot signals (:meth:`Snapshots.snapshot`).
SIGNAL = "goka-snapshot"


def done_at(point: int) -> tuple[int, int, int]:
    """The position that marks a snapshot at ``point`` wholly read."""
    return (point, -1, 0)


def begun_at(point: int) -> tuple[int, int, int]:
    """The position that marks a snapshot at ``point`` begun (its plan noted before a row)."""
    return (point, -BASE - 1, 0)


def is_milestone(position: tuple[int, ...]) -> bool:
    """Whether ``position`` is :func:`done_at`'s or :func:`begun_at`'s, not a record's."""
    return position[1] in (-1, -BASE - 1)


def is_snapshot(position: tuple[int, ...] | None) -> bool:
    """Whether ``position`` is an initial snapshot row's (not a change's, nor its end)."""
    return position is not None and position[1] < -1


@dataclass
class Plan:
    """What is left of a snapshot: ``tables`` (the first being read, after key ``after``:
    its columns' text; None: from its start), ``count`` rows given so far, at consistent point
    ``point`` (0: read in windows from the start)."""

    point: int
    tables: list[str]
    after: list[str] | None = None
    count: int = 0

    def text(self) -> str:
        return json.dumps({"point": self.point, "tables": self.tables, "after": self.after,
                           "count": self.count}, separators=(",", ":"))  # fmt: skip

    @classmethod
    def parse(cls, text: str) -> Plan:
        found = json.loads(text)
        return cls(int(found["point"]), list(found["tables"]), found["after"], int(found["count"]))

    def advance(self, chunk: Chunk, size: int) -> None:
        """``chunk`` of the first table was given: go on after it (or to the next table)."""
        self.count += chunk.count
        if chunk.last is None or chunk.count < size:
            self.tables.pop(0)
            self.after = None
        else:
            self.after = chunk.last


@dataclass
class Chunk:
    """Rows of a table in key order (kept, or given as read: :func:`stream_chunk`), how many,
    the last one's key (its columns' text)."""

    table: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    last: list[str] | None = None
    count: int = 0

    def end(self, count: int, values: Sequence[str | None] | None, columns: Sequence[str],
            keys: Sequence[str]) -> None:  # fmt: skip
        """Read to its end: ``count`` rows, the last one's ``values`` (COPY's text)."""
        self.count = count
        if count and keys:
            self.last = [values[list(columns).index(k)] for k in keys]  # type: ignore[index,misc]


@dataclass
class Window:
    """A chunk read between two watermarks (see the module docstring)."""

    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    chunk: Chunk | None = None
    open: bool = False  # (the stream is between its marks)
    changed: set[bytes | None] = field(default_factory=set)  # record keys changed while open
    truncated: bool = False  # (the chunk's table was, while open: none of its rows is given)
    #: The chunk's snapshot (``pg_current_snapshot()``): transactions at or past ``xmax`` and
    #: those in ``running`` are invisible to it, wherever they commit in the stream.
    xmax: int = 0
    running: frozenset[int] = frozenset()

    def mark(self, slot: str, which: str) -> str:
        return f"{slot}:{self.id}:{which}"

    def see(self, snapshot: str) -> None:
        """Note the chunk's snapshot (``xmin:xmax:xip,...``, 64-bit ids) as 32-bit ids."""
        _, xmax, running = snapshot.split(":")
        self.xmax = int(xmax) & 0xFFFFFFFF
        self.running = frozenset(int(x) & 0xFFFFFFFF for x in running.split(",") if x)

    def unseen(self, xid: int) -> bool:
        """Whether transaction ``xid`` (32-bit) is invisible to the chunk's snapshot: a change
        of it that the stream gives even before the low mark (its commit written before the
        mark, but not yet visible when the chunk was read) is newer than the chunk's row."""
        if not xid or not self.xmax:
            return False
        return xid in self.running or ((xid - self.xmax) & 0xFFFFFFFF) < 0x80000000


def make_slot(dsn: str, slot: str, plugin: str) -> tuple[Any, str, str]:
    """Make logical slot ``slot`` with ``plugin`` on a replication connection and export its
    snapshot: return the connection (the snapshot lives while it is open and idle), the
    consistent point and the snapshot's name."""
    import psycopg

    conn = psycopg.connect(dsn, replication="database", autocommit=True)
    try:
        # (a replication command: the simple query protocol, no parameters)
        row = conn.execute(f'CREATE_REPLICATION_SLOT "{slot}" LOGICAL {plugin} '
                           "EXPORT_SNAPSHOT", prepare=False).fetchone()  # fmt: skip
    except BaseException:
        conn.close()
        raise
    assert row is not None
    return conn, str(row[1]), str(row[2])


def columns_of(conn: Any, table: str, decoder: Decoder, only: Sequence[str] | None = None
               ) -> tuple[list[str], list[Callable[[str], Any]]]:  # fmt: skip
    """A table's columns (those in ``only``, a publication's column list) and their values'
    converters (as the decoder converts a change's)."""
    rows = conn.execute(
        "SELECT a.attname::text, a.atttypid::int, a.atttypmod FROM pg_attribute a "
        "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped "
        "AND a.attgenerated = ''"
        "ORDER BY a.attnum", (qualified(table),)).fetchall()  # fmt: skip
    rows = [row for row in rows if only is None or row[0] in only]
    decoder.learn({oid for _, oid, _ in rows})
    return [name for name, _, _ in rows], [decoder.converter(oid, mod) for _, oid, mod in rows]


def read_chunk(conn: Any, table: str, columns: Sequence[str],
               converters: Sequence[Callable[[str], Any]], keys: Sequence[str],
               after: Sequence[str] | None, size: int,
               only: str | None = None) -> Chunk:  # fmt: skip
    """Up to ``size`` rows of ``table`` after key ``after`` (its columns' text), in key order
    (a table without key columns: all its rows); ``only``: a publication's row filter."""
    chunk = Chunk(table)
    chunk.rows = list(stream_chunk(conn, chunk, columns, converters, keys, after, size, only))
    return chunk


def stream_chunk(conn: Any, chunk: Chunk, columns: Sequence[str],
                 converters: Sequence[Callable[[str], Any]], keys: Sequence[str],
                 after: Sequence[str] | None, size: int,
                 only: str | None = None) -> Iterator[dict[str, Any]]:  # fmt: skip
    """:func:`read_chunk`'s rows as the server sends them (it writes the next ones while
    they are given), ``chunk``'s count and last key set at the end."""
    row_of = row_maker(columns, converters)
    values: Any = None
    count = 0
    query = copy_query(chunk.table, columns, keys, after, size, only)
    with conn.cursor().copy(query) as copy:
        for values in copy_rows(copy):
            count += 1
            yield row_of(values)
    chunk.end(count, values, columns, keys)


def copy_query(table: str, columns: Sequence[str], keys: Sequence[str],
               after: Sequence[str] | None, size: int, only: str | None = None) -> Any:  # fmt: skip
    """``COPY ... TO STDOUT`` of up to ``size`` rows of ``table`` after key ``after`` (its
    columns' text), in key order (a table without key columns: all its rows); ``only``: a
    publication's row filter (SQL, as the server wrote it), which the rows must pass."""
    from psycopg import sql

    conditions: list[Any] = [] if only is None else [sql.SQL("({})").format(sql.SQL(only))]
    limit: Any = sql.SQL("")
    if keys:
        ordered = sql.SQL(", ").join(sql.Identifier(k) for k in keys)
        limit = sql.SQL(" ORDER BY {} LIMIT {}").format(ordered, sql.Literal(size))
        if after is not None:
            conditions.append(sql.SQL("({}) > ({})").format(
                ordered, sql.SQL(", ").join(sql.Literal(v) for v in after)))  # fmt: skip
    where = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conditions) if conditions else sql.SQL("")
    names = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    return sql.SQL("COPY (SELECT {} FROM {}{}{}) TO STDOUT").format(
        names, table_name(table), where, limit)  # fmt: skip


def row_maker(columns: Sequence[str], converters: Sequence[Callable[[str], Any]]
              ) -> Callable[[list[str | None]], dict[str, Any]]:  # fmt: skip
    """A row's dict from its COPY values (the text columns as read: only the others go
    through their converters)."""
    labels = list(columns)
    pairs = enumerate(zip(labels, converters, strict=True))
    typed = [(i, name, convert) for i, (name, convert) in pairs if convert is not str]

    def row_of(values: list[str | None]) -> dict[str, Any]:
        row = dict(zip(labels, values, strict=True))
        for i, name, convert in typed:
            value = values[i]
            if value is not None:
                row[name] = convert(value)
        return row

    return row_of


def copy_rows(blocks: Iterable[Any]) -> Iterator[list[str | None]]:
    """The rows of ``COPY ... TO STDOUT`` (text format), split from its blocks here: a line
    without a backslash (no escape, no NULL) is split as it is, the others field by field."""
    rest = b""
    for block in blocks:
        lines, rest = split_lines(rest, block)
        yield from map(line_values, lines)


def line_values(line: bytes) -> list[str | None]:
    """One line of ``COPY ... TO STDOUT``'s text (no newline) as its values: a line without
    a backslash (no escape, no NULL) split as it is, the others field by field."""
    if b"\\" not in line:
        return line.decode().split("\t")  # type: ignore[return-value]
    return [None if field == b"\\N" else _ESCAPED.sub(_unescape, field.decode())
            for field in line.split(b"\t")]  # fmt: skip


def split_lines(rest: bytes, block: Any) -> tuple[list[bytes], bytes]:
    """The whole lines of ``rest`` (a line begun in an earlier block) and ``block``, and the
    line begun at its end."""
    *lines, rest = (rest + bytes(block)).split(b"\n")
    return lines, rest


#: COPY's text escapes (backslash and a letter; PostgreSQL writes no other).
_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_ESCAPED = re.compile(r"\\(.)", re.DOTALL)


def _unescape(match: re.Match[str]) -> str:
    return _ESCAPES.get(match.group(1), match.group(1))


def qualified(table: str) -> str:
    """``schema.table`` quoted for SQL."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in table.split("."))


def record_key(names: Sequence[str], values: Mapping[str, Any] | None) -> bytes | None:
    """A row's record key by its key columns ``names``: one column's text, or several as a
    JSON array of their values (None: no key)."""
    if not names or values is None or any(n not in values for n in names):
        return None
    if len(names) == 1:
        value = values[names[0]]
        return None if value is None else str(value).encode()
    return json.dumps([values[n] for n in names], separators=(",", ":")).encode()
