"""A table topic into a PostgreSQL table, exactly once.

Declare the sink (checked at once: a bad name, mode or policy fails here, not mid-stream)::

    sink = PostgresSink("clicks-table", Int64Codec(), dsn, table="clicks")

and give a :class:`PostgresWriter` each partition's records in offset order. A write is one
transaction per partition:

1. lock the partition's row of the offsets table (``goka_sink_offsets``: sink, topic,
   partition, next offset) and leave out the records below it (written already);
2. binary ``COPY`` of the records into a temporary table;
3. ``upsert`` mode: the newest record of each key is upserted (``INSERT ... ON CONFLICT DO
   UPDATE``, only where the stored row comes from an older offset) or, if it is a tombstone,
   its row is deleted; ``append`` mode: one row per record, tombstones included
   (``goka_deleted``), keyed by topic, partition and offset;
4. the partition's next offset into the offsets table; commit.

So a crash anywhere leaves either the whole write or none of it, and a replay (a restart from
an older checkpoint, or from none) writes nothing twice: the database's offsets are the truth,
and a restart resumes from them (:meth:`PostgresWriter.offsets`).

Rows come from the value: a ``dict`` (JSON, Avro) gives a column per field, a user ``mapper(key,
value) -> dict`` any columns, anything else one ``value`` column. Every table also has ``key``
(the record key, text) and ``goka_partition``, ``goka_offset``, ``goka_timestamp``. With
``create=True`` the table is created at the first write, and columns are added when new fields
appear (types from the values: bigint, double precision, boolean, text, bytea, jsonb,
timestamptz, numeric); a value that does not fit its column (another type, too long) follows
``on_error`` with the record's topic, partition, offset and the column.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Sequence
from typing import Any

from goka.connect.columns import copy_type, misfit, pg_type
from goka.connect.database import Database
from goka.connect.rows import DeadLetterSender, Record, Row, WriteSummary, decode_rows, refuse
from goka.connect.sink import PostgresSink
from goka.errors import SinkError

__all__ = ["PostgresSink", "PostgresWriter", "SinkError", "WriteSummary"]

log = logging.getLogger(__name__)

#: A table's columns: name -> (type, maximum length).
Columns = dict[str, tuple[str, int | None]]

#: Columns of every sink table (a value's field may not use these names).
META = ("key", "goka_topic", "goka_partition", "goka_offset", "goka_timestamp", "goka_deleted")
OFFSETS_DDL = """CREATE TABLE IF NOT EXISTS {table} (
    sink text NOT NULL, topic text NOT NULL, partition integer NOT NULL,
    next_offset bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (sink, topic, partition))"""


class PostgresWriter:
    """Writes records of a :class:`PostgresSink`, one transaction per partition and call.

    Args:
        sink: what to write where.
        retries: attempts of a write when the database is unreachable or restarting (with
            backoff from 0.2 s, doubling, at most 5 s); a write is a transaction, so it is
            retried whole.

    Not thread-safe: one writer per thread (a connection each).
    """

    def __init__(self, sink: PostgresSink, *, retries: int = 8) -> None:
        self.sink, self.retries = sink, retries
        self._db = Database(sink.dsn, f"PostgreSQL sink {sink.name!r}", retries=retries,
                            prepare=lambda conn: conn.execute(
                                self._sql(OFFSETS_DDL, table=self._offsets())))  # fmt: skip
        self._retrying = self._db.run

    def close(self) -> None:
        """Close the connection."""
        self._db.close()

    def __enter__(self) -> PostgresWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def offsets(self) -> dict[int, int]:
        """Each partition's next offset to write, as the database says (where a restart
        resumes)."""
        query = self._sql("SELECT partition, next_offset FROM {table} WHERE sink = %s AND "
                          "topic = %s", table=self._offsets())  # fmt: skip
        params = (self.sink.name, self.sink.topic)
        rows = self._retrying(lambda conn: conn.execute(query, params).fetchall())
        return {int(p): int(o) for p, o in rows}

    def reset(self, partition: int | None = None) -> None:
        """Forget the offsets (of ``partition``, or all): the next run starts over (upserts
        only take newer offsets than the rows hold: truncate the table to rewrite it)."""

        def forget(conn: Any) -> None:
            query = "DELETE FROM {table} WHERE sink = %s AND topic = %s"
            params: tuple[Any, ...] = (self.sink.name, self.sink.topic)
            if partition is not None:
                query, params = query + " AND partition = %s", (*params, partition)
            conn.execute(self._sql(query, table=self._offsets()), params)

        self._retrying(forget, transaction=True)

    # -- writing ---------------------------------------------------------------------------------
    def write(self, partition: int, records: Sequence[Record], end: int, *,
              dead_letters: DeadLetterSender | None = None) -> WriteSummary:  # fmt: skip
        """Write ``records`` of ``partition`` (offset order) and store ``end`` (the next offset)
        as its position, in one transaction. Records below the stored position are left out.
        Refused records (``on_error="dead-letter"``) go to ``dead_letters`` before the commit.

        Raises:
            SinkError: a record cannot be written under ``on_error="fail"``, or the table does
                not fit (a column missing without ``create``): nothing of this write is
                stored.
            psycopg.OperationalError: the database stayed unreachable through the retries.
        """
        started = time.monotonic()
        summary = WriteSummary()
        rows, types, by_offset = self._rows(partition, records, summary)
        refused = list(summary.dead_letters)

        def transaction(conn: Any) -> None:
            summary.dead_letters = list(refused)  # (a retry starts over)
            self._transaction(conn, partition, rows, types, end, summary, by_offset)
            if summary.dead_letters:
                if dead_letters is None:
                    raise SinkError(f"PostgreSQL sink {self.sink.name!r}: dead letters but "
                                    "nothing to send them with")  # fmt: skip
                dead_letters(partition, sorted(summary.dead_letters, key=lambda d: d[0][1]))

        self._retrying(transaction, transaction=True)
        summary.seconds = time.monotonic() - started
        return summary

    def _rows(self, partition: int, records: Sequence[Record], summary: WriteSummary,
              ) -> tuple[list[Row], dict[str, str], dict[int, Record]]:  # fmt: skip
        """``(offset, key, timestamp, columns or None: a tombstone)`` of each record, the
        column types the values need, and the records by offset."""
        types: dict[str, str] = {}

        def check(key: str, offset: int, columns: dict[str, Any] | None) -> None:
            if "\x00" in key:
                raise ValueError(f"its key {key!r} holds a NUL (PostgreSQL text cannot)")
            for name, item in (columns or {}).items():
                if item is not None:
                    types.setdefault(name, pg_type(item, name))

        what = f"PostgreSQL sink {self.sink.name!r}"
        rows, by_offset = [], {}
        for row, record in decode_rows(self.sink, what, partition, records, summary, META, check):
            rows.append(row)
            by_offset[row[0]] = record
        return rows, types, by_offset

    def _transaction(self, conn: Any, partition: int, rows: list[Row], types: dict[str, str],
                     end: int, summary: WriteSummary,
                     by_offset: dict[int, Record]) -> None:  # fmt: skip
        sink = self.sink
        position = conn.execute(
            self._sql("SELECT next_offset FROM {table} WHERE sink = %s AND topic = %s AND "
                      "partition = %s FOR UPDATE", table=self._offsets()),
            (sink.name, sink.topic, partition),
        ).fetchone()  # fmt: skip
        start = -1 if position is None else int(position[0])
        todo = [r for r in rows if r[0] >= start]
        summary.already = len(rows) - len(todo)
        summary.dead_letters = [d for d in summary.dead_letters if d[0][1] >= start]
        if todo:
            columns = self._ensure_table(conn, types, summary)
            todo = self._fitting(partition, todo, columns, summary, by_offset)
            self._copy(conn, partition, todo, columns, summary)
        conn.execute(
            self._sql("INSERT INTO {table} (sink, topic, partition, next_offset) VALUES "
                      "(%s, %s, %s, %s) ON CONFLICT (sink, topic, partition) DO UPDATE SET "
                      "next_offset = EXCLUDED.next_offset, updated_at = now()",
                      table=self._offsets()),
            (sink.name, sink.topic, partition, max(end, start)),
        )  # fmt: skip

    def _ensure_table(self, conn: Any, types: dict[str, str],
                      summary: WriteSummary) -> Columns:  # fmt: skip
        """The table's columns (created, or with the new ones added, if ``create``)."""
        sink = self.sink
        columns = self._read_columns(conn)
        if (not columns or any(n not in columns for n in types)) and sink.create:
            # DDL: one writer at a time (CREATE/ALTER ... IF NOT EXISTS race in the catalog)
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                         (f"goka-sink {sink.schema}.{sink.table}",))  # fmt: skip
            columns = self._read_columns(conn)
        if not columns:
            if not sink.create:
                raise SinkError(f"PostgreSQL sink {sink.name!r}: table {sink.schema}."
                                f"{sink.table} does not exist (create=False)")  # fmt: skip
            meta = ("key text NOT NULL, goka_topic text NOT NULL, goka_partition integer NOT "
                    "NULL, goka_offset bigint NOT NULL, goka_timestamp timestamptz, "
                    "goka_deleted boolean NOT NULL DEFAULT false, PRIMARY KEY (goka_topic, "
                    "goka_partition, goka_offset)") if sink.mode == "append" else (
                "key text PRIMARY KEY, goka_partition integer NOT NULL, goka_offset bigint NOT "
                "NULL, goka_timestamp timestamptz")  # fmt: skip
            conn.execute(self._sql(f"CREATE TABLE IF NOT EXISTS {{table}} ({meta})",
                                   table=self._target()))  # fmt: skip
            columns = self._read_columns(conn)
        missing = {n: t for n, t in types.items() if n not in columns}
        if missing and not sink.create:
            raise SinkError(f"PostgreSQL sink {sink.name!r}: table {sink.schema}.{sink.table} "
                            f"has no column {sorted(missing)} (create=False)")  # fmt: skip
        for name, kind in sorted(missing.items()):
            conn.execute(self._sql(f"ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS {{column}} "
                                   f"{kind}", table=self._target(), column=name))  # fmt: skip
            summary.added_columns.append(name)
        if missing:
            columns = self._read_columns(conn)
        return columns

    def _read_columns(self, conn: Any) -> Columns:
        found = conn.execute(
            "SELECT column_name, data_type, character_maximum_length FROM "
            "information_schema.columns WHERE table_schema = %s AND table_name = %s",
            (self.sink.schema, self.sink.table),
        ).fetchall()
        return {name: (kind, length) for name, kind, length in found}

    def _fitting(self, partition: int, rows: list[Row], columns: Columns,
                 summary: WriteSummary, by_offset: dict[int, Record]) -> list[Row]:  # fmt: skip
        """The rows whose values fit their columns; the others go to the policy (a
        :class:`SinkError` naming the record and column under ``fail``)."""
        fitting = []
        for row in rows:
            offset, key, _, values = row
            problem = ""
            for name, item in (values or {}).items():
                if item is None:
                    continue
                kind, length = columns[name]
                problem = misfit(item, kind, length)
                if problem:
                    size = "" if length is None else f"({length})"
                    problem = f"key {key!r}: column {name!r} ({kind}{size}) {problem}"
                    break
            if problem:
                refuse(self.sink, f"PostgreSQL sink {self.sink.name!r}", summary,
                       by_offset[offset], partition, problem)  # fmt: skip
            else:
                fitting.append(row)
        return fitting

    def _copy(self, conn: Any, partition: int,
              rows: list[Row],
              columns: Columns, summary: WriteSummary) -> None:  # fmt: skip
        from psycopg import sql
        from psycopg.types.json import Jsonb

        sink = self.sink
        values = sorted(c for c in columns if c not in META)
        meta = ["key", "goka_partition", "goka_offset", "goka_timestamp", "goka_deleted"]
        if sink.mode == "append":
            meta.insert(1, "goka_topic")
        names = meta + values
        kinds = [copy_type(columns[c][0]) if c in columns else "boolean" for c in names]
        json = [i for i, c in enumerate(names) if kinds[i] in ("jsonb", "json")]
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS goka_in (LIKE "
                     f"{self._target().as_string(conn)}) ON COMMIT DROP")  # fmt: skip
        conn.execute("ALTER TABLE goka_in ADD COLUMN IF NOT EXISTS goka_deleted boolean")
        target = sql.SQL(", ").join(sql.Identifier(n) for n in names)
        query = sql.SQL("COPY goka_in ({}) FROM STDIN (FORMAT BINARY)").format(target)
        with conn.cursor().copy(query) as copy:
            copy.set_types(kinds)
            for offset, key, timestamp, items in rows:
                at = dt.datetime.fromtimestamp(timestamp / 1000, dt.UTC) if timestamp >= 0 else None
                head: list[Any] = [key, partition, offset, at, items is None]
                if sink.mode == "append":
                    head.insert(1, sink.topic)
                row = head + [None if items is None else items.get(c) for c in values]
                for index in json:
                    if row[index] is not None:
                        row[index] = Jsonb(row[index])
                copy.write_row(row)
        table = self._target()
        if sink.mode == "append":
            stored = sql.SQL(", ").join(sql.Identifier(n) for n in names)
            done = conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM goka_in ON CONFLICT "
                                        "DO NOTHING").format(table, stored, stored))  # fmt: skip
            summary.appended += done.rowcount
            return
        kept = [n for n in names if n != "goka_deleted"]
        stored = sql.SQL(", ").join(sql.Identifier(n) for n in kept)
        newest = sql.SQL("(SELECT DISTINCT ON (key) * FROM goka_in ORDER BY key, goka_offset DESC)")
        deleted = conn.execute(sql.SQL(
            "DELETE FROM {t} USING {n} AS n WHERE n.goka_deleted AND {t}.key = n.key AND "
            "{t}.goka_offset < n.goka_offset").format(t=table, n=newest))  # fmt: skip
        summary.deleted += deleted.rowcount
        updates = sql.SQL(", ").join(
            sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in
            [*values, "goka_partition", "goka_offset", "goka_timestamp"]
        )  # fmt: skip
        upserted = conn.execute(sql.SQL(
            "INSERT INTO {t} ({cols}) SELECT {cols} FROM {n} AS n WHERE NOT n.goka_deleted "
            "ON CONFLICT (key) DO UPDATE SET {updates} WHERE {t}.goka_offset < "
            "EXCLUDED.goka_offset").format(t=table, cols=stored, n=newest,
                                           updates=updates))  # fmt: skip
        summary.upserted += upserted.rowcount

    # -- helpers ---------------------------------------------------------------------------------
    def _sql(self, text: str, **names: Any) -> Any:
        from psycopg import sql

        composed = {k: v if isinstance(v, sql.Composable) else sql.Identifier(v)
                    for k, v in names.items()}  # fmt: skip
        return sql.SQL(text).format(**composed)

    def _target(self) -> Any:
        from psycopg import sql

        return sql.Identifier(self.sink.schema, self.sink.table)

    def _offsets(self) -> Any:
        from psycopg import sql

        return sql.Identifier(self.sink.schema, self.sink.offsets_table)
