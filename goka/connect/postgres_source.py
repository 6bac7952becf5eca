"""A PostgreSQL table or query into a topic by an incrementing and/or a timestamp column, exactly
once (Kafka Connect's JDBC source modes):

* ``incrementing_column="id"``: rows with a larger id than the last one written (new rows);
* ``timestamp_column="updated_at", incrementing_column="id"``: rows changed since the last
  one written, in ``(updated_at, id)`` order (new and updated rows);
* ``timestamp_column="updated_at"`` alone: the same with the key column as the tiebreak (its
  text, in byte order), so ``key`` must be a column.

Each query reads at most ``batch`` rows beyond the position; each row's position is in its
record's header, so a restart resumes after the last row of each partition
(:mod:`goka.connect.source`). Rows with a timestamp less than ``delay`` seconds ago wait, so
that a transaction still open with an earlier timestamp commits first. What these modes
cannot see (deleted rows; a transaction that commits after a row with a later id or
timestamp was read) they share with every query-based source: change data capture
(:class:`~goka.connect.postgres_cdc.PostgresCdcSource`) sees everything.

Rows become dicts of their columns (datetimes as ISO 8601 text, decimals as numbers, UUIDs as
text, bytea as hex, json as what it holds) before the transform and the codec.
"""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from goka.codec import Codec, JsonCodec
from goka.connect.database import Database, table_name
from goka.connect.source import SourceWriter, check_number, check_options
from goka.connect.source_job import SourceJob
from goka.errors import ConfigurationError

__all__ = ["PostgresSource", "PostgresSourceJob", "row_value"]

log = logging.getLogger(__name__)

_EPOCH = dt.datetime(1970, 1, 1)
_MICROSECOND = dt.timedelta(microseconds=1)
#: OIDs of timestamp and timestamptz.
_TIMESTAMP, _TIMESTAMPTZ = 1114, 1184
#: A position: (the timestamp in µs, the id or key text), or (the id,).
Position = tuple[Any, ...]


@dataclass(frozen=True)
class PostgresSource:
    """Rows of ``table`` (or of ``query``) into ``topic`` (see the module docstring).

    Args:
        dsn: the libpq connection string.
        topic: the topic to write (its partitions are the source's alone).
        table: a table (``schema.table`` or ``table``), or give ``query``.
        query: a SELECT whose rows to read (wrapped: ``SELECT * FROM (query) q WHERE ...``).
        incrementing_column: a strictly increasing integer column.
        timestamp_column: a timestamp or timestamptz column set when a row changes.
        codec: encodes each row (a dict).
        key: the record's key: a column, or ``key(row) -> str`` (default: the incrementing
            column).
        timestamp: the record's time: a column or ``timestamp(row) -> ms`` (default: the
            timestamp column's, else when produced).
        transform: ``transform(row)`` -> a row, None (filtered out) or a list, before the
            key and the codec.
        watch: keep polling for rows (else: the rows there now, then stop).
        poll_interval: seconds between queries that found nothing new.
        batch: most rows per query.
        delay: seconds a row's timestamp must lie in the past before it is read.
        on_error: a row that cannot be transformed, keyed or encoded: ``"fail"`` (naming
            the row), ``"skip"`` or ``"dead-letter"`` (to ``dead_letter``).
        dead_letter: the dead-letter topic.
        name: the source's name (in each record's position header; default: the topic).

    Raises:
        ConfigurationError: neither or both of table and query, no column to order by, a
            timestamp-only source without a key column, an invalid option.
    """

    dsn: str
    topic: str
    table: str | None = None
    query: str | None = None
    incrementing_column: str | None = None
    timestamp_column: str | None = None
    codec: Codec[Any] = field(default_factory=JsonCodec)
    key: str | Callable[[Any], str] | None = None
    timestamp: str | Callable[[Any], int] | None = None
    transform: Callable[[Any], Any] | None = None
    watch: bool = False
    poll_interval: float = 1.0
    batch: int = 10_000
    delay: float = 0.0
    on_error: Literal["fail", "skip", "dead-letter"] = "fail"
    dead_letter: str | None = None
    name: str = ""

    def __post_init__(self) -> None:
        where = f"PostgreSQL source {self.name or self.topic!r}"
        if not isinstance(self.dsn, str):
            raise ConfigurationError(f"{where}: dsn must be a libpq connection string")
        if (self.table is None) == (self.query is None):
            raise ConfigurationError(f"{where}: give a table or a query (one of them)")
        if self.query is not None and not self.query.lstrip().lower().startswith(
                ("select", "with", "values", "table")):  # fmt: skip
            raise ConfigurationError(f"{where}: query must be a SELECT, got {self.query!r}")
        if self.incrementing_column is None and self.timestamp_column is None:
            raise ConfigurationError(f"{where}: give incrementing_column and/or "
                                     "timestamp_column (what orders the rows)")  # fmt: skip
        key = self.key if self.key is not None else self.incrementing_column
        if self.incrementing_column is None and not isinstance(key, str):
            raise ConfigurationError(f"{where}: with timestamp_column alone, key must be a "
                                     "column (the tiebreak of rows of one timestamp)")  # fmt: skip
        object.__setattr__(self, "key", key)
        if self.timestamp is None and self.timestamp_column is not None:
            object.__setattr__(self, "timestamp", self.timestamp_column)
        check_number(where, self, "poll_interval")
        check_number(where, self, "delay")
        check_number(where, self, "batch", integer=True)
        check_options(where, self, [self.topic])

    @property
    def mode(self) -> str:
        """``incrementing``, ``timestamp+incrementing`` or ``timestamp``."""
        if self.timestamp_column is None:
            return "incrementing"
        return "timestamp+incrementing" if self.incrementing_column else "timestamp"

    def describe(self) -> str:
        return f"{self.table or 'query'} ({self.mode})"


class PostgresSourceJob(SourceJob[Position]):
    """Runs a :class:`PostgresSource` in this process (one idempotent producer; the source
    is the only writer of its partitions).

    Args:
        source: what to read and where to write.
        brokers: bootstrap servers.
        kafka_config: librdkafka settings of the producer and of the resume's reads.
        retries: attempts of a query while the database is unreachable.
    """

    unit = "queries"

    def __init__(self, source: PostgresSource, brokers: str, *,
                 kafka_config: dict[str, Any] | None = None, retries: int = 8) -> None:  # fmt: skip
        if not isinstance(source, PostgresSource):
            raise ConfigurationError(f"source must be a PostgresSource, got {source!r}")
        super().__init__(source, brokers, kafka_config=kafka_config)
        self._db = Database(source.dsn, f"PostgreSQL source {source.name!r}", retries=retries,
                            autocommit=True,
                            prepare=lambda conn: conn.execute("SET TimeZone = 'UTC'"))  # fmt: skip
        self._naive: bool | None = None  # the timestamp column has no time zone

    def parse(self, text: str) -> Position:
        if self.source.mode == "timestamp":  # (the key text last: it may hold tabs)
            moment, index, key = text.split("\t", 2)
            return (int(moment), key, int(index))
        return tuple(int(p) for p in text.split("\t"))

    def header(self, position: Position) -> str:
        if self.source.mode == "timestamp":
            return f"{position[0]}\t{position[2]}\t{position[1]}"
        return "\t".join(str(p) for p in position)

    def where(self, position: tuple[Any, ...]) -> str:
        source = self.source
        if source.mode == "incrementing":
            return f"row {source.incrementing_column} {position[0]}"
        tie = (f"key {position[1]!r}" if source.mode == "timestamp"
               else f"{source.incrementing_column} {position[1]}")  # fmt: skip
        return f"row {source.timestamp_column} {_iso(position[0])} {tie}"

    def read(self, writer: SourceWriter[Position], floor: Position | None, first: bool,
             watch: bool) -> None:  # fmt: skip
        if first:  # the floor's row again: its outputs may have gone to several partitions
            self._after, self._inclusive = (None, False) if floor is None else (floor[:-1], True)
        while not self.stopping:
            rows = self._db.run(lambda conn: self._query(conn, self._after, self._inclusive))
            self.totals.files += 1
            for at, row in rows:
                writer.record(at, None, row)
                self._after, self._inclusive = at, False
            if len(rows) < self.source.batch:
                return
            self.checkpoint(writer)  # (a query's rows out before the next: memory bounded)

    _after: Position | None = None
    _inclusive = False

    def _query(self, conn: Any, after: Position | None,
               inclusive: bool) -> list[tuple[Position, dict[str, Any]]]:  # fmt: skip
        """The next rows beyond ``after`` (or at it, if ``inclusive``), with positions."""
        from psycopg import sql

        source = self.source
        if source.table:
            base = sql.SQL("SELECT * FROM {}").format(table_name(source.table))
        else:  # the user's query text, as given (psycopg types it a LiteralString)
            text: Any = source.query
            base = sql.SQL("SELECT * FROM ({}) AS goka_q").format(sql.SQL(text))
        inc = sql.Identifier(source.incrementing_column or "")
        ts = sql.Identifier(source.timestamp_column or "")
        tie = sql.SQL('({}::text COLLATE "C")').format(sql.Identifier(str(source.key)))
        if source.timestamp_column is not None and self._naive is None:
            probe = conn.execute(sql.SQL("SELECT {} FROM ({}) AS goka_p LIMIT 0").format(ts, base))
            kind = probe.description[0].type_code
            if kind not in (_TIMESTAMP, _TIMESTAMPTZ):
                raise ConfigurationError(f"PostgreSQL source {source.name!r}: timestamp_column "
                                         f"{source.timestamp_column!r} is not a timestamp "
                                         f"(type oid {kind})")  # fmt: skip
            self._naive = kind == _TIMESTAMP
        moment = sql.SQL("('epoch'::timestamp{} + %s * interval '1 microsecond')").format(
            sql.SQL("" if self._naive else "tz"))  # fmt: skip
        conditions: list[Any] = []
        params: list[Any] = []
        order: list[Any] = []
        compare = sql.SQL(">=" if inclusive else ">")
        if source.mode == "incrementing":
            order = [inc]
            if after is not None:
                conditions.append(sql.SQL("{} {} %s").format(inc, compare))
                params.append(after[0])
        else:
            second = inc if source.mode == "timestamp+incrementing" else tie
            order = [ts, second]
            conditions.append(sql.SQL("{} < now() - %s * interval '1 second'").format(ts))
            params.append(source.delay)
            if after is not None:
                conditions.append(sql.SQL("({}, {}) {} ({}, %s)").format(ts, second, compare,
                                                                       moment))  # fmt: skip
                params.extend([after[0], after[1]])
        where = (
            sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conditions) if conditions else sql.SQL("")
        )

        query = sql.SQL("SELECT * FROM ({}) AS goka_r{} ORDER BY {} LIMIT {}").format(
            base, where, sql.SQL(", ").join(order), sql.Literal(source.batch))  # fmt: skip
        cursor = conn.execute(query, params)
        names = [d.name for d in cursor.description]
        found = []
        for values in cursor.fetchall():
            row = dict(zip(names, values, strict=True))
            found.append((self._position(row), {k: row_value(v) for k, v in row.items()}))
        return found

    def _position(self, row: Mapping[str, Any]) -> Position:
        source = self.source
        if source.mode == "incrementing":
            return (int(row[str(source.incrementing_column)]),)
        moment = row[str(source.timestamp_column)]
        micros = (moment.replace(tzinfo=None) if moment.tzinfo is None
                  else moment.astimezone(dt.UTC).replace(tzinfo=None)) - _EPOCH  # fmt: skip
        first = micros // _MICROSECOND
        if source.mode == "timestamp":
            return (first, str(row[str(source.key)]))
        return (first, int(row[str(source.incrementing_column)]))

    def close(self) -> None:
        self._db.close()


def row_value(value: Any) -> Any:
    """A column's value as a row dict holds it (JSON-friendly)."""
    if value is None or isinstance(value, str | int | float | bool | dict | list):
        return value
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return str(value)


def _iso(micros: int) -> str:
    return (_EPOCH + dt.timedelta(microseconds=micros)).isoformat()
