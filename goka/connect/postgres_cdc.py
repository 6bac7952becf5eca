"""Change data capture: the inserts, updates and deletes of PostgreSQL tables into topics,
exactly once, through logical decoding (the ``wal2json`` output plugin; Debian's
``postgresql-<version>-wal2json``, and ``wal_level = logical`` on the server).

The source reads the changes of its replication slot with the SQL functions
(``pg_logical_slot_peek_changes``: no replication connection), whole transactions at a time,
in commit order. Each change becomes a record keyed by the row's primary key (one column: its
text; several: a JSON array of their values): an insert or update the row as a dict, a delete
a tombstone (an update that changes the key: a tombstone of the old key, then the new row).
Each record carries its position, the transaction's commit LSN and the change's index in it
(:mod:`goka.connect.source`), and headers ``goka-op`` (``c``, ``u``, ``d``) and
``goka-table``. Only once every record of a read is acknowledged is the slot advanced past
its transactions; a restart reads the slot again from there and leaves out the changes each
partition has, so a crash at any moment neither loses nor duplicates a change.

What to know: a slot keeps WAL on the server until it is advanced (a source stopped for long
holds disk space; ``reset`` drops its slot); a TRUNCATE is not turned into deletes (it is
logged and reported in the totals' errors); a table needs a primary key or ``REPLICA
IDENTITY FULL`` for its updates and deletes to be decoded; column values are as wal2json
writes them (numbers, text; bytea as hex; json columns are parsed).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from goka.codec import Codec, JsonCodec
from goka.connect.database import Database
from goka.connect.source import FROM_OPTIONS, SourceWriter, check_number, check_options
from goka.connect.source_job import SourceJob
from goka.errors import ConfigurationError, SourceError

__all__ = ["PostgresCdcSource", "PostgresCdcSourceJob", "lsn_int", "lsn_text"]

log = logging.getLogger(__name__)

#: A position: (commit LSN, the change's index in its transaction, output index).
Position = tuple[int, int, int]
OP_HEADER, TABLE_HEADER = "goka-op", "goka-table"
_OPS = {"I": b"c", "U": b"u", "D": b"d"}
_PLUGIN = "wal2json"


@dataclass(frozen=True)
class PostgresCdcSource:
    """The changes of ``tables`` (qualified name -> topic) into their topics (see the module
    docstring).

    Args:
        dsn: the libpq connection string (a user with the REPLICATION attribute, or the
            owner of the slot).
        tables: each table (``schema.table``) and the topic its changes go to.
        slot: the replication slot (default: ``goka_<name>``; created if missing).
        codec: encodes each row (a dict).
        key: the record's key: a column, or ``key(row) -> str`` (default: the primary key).
        timestamp: the record's time: a column or ``timestamp(row) -> ms`` (default: the
            transaction's commit time).
        transform: ``transform(row)`` -> a row, None (filtered out) or a list (deletes pass
            as tombstones, untransformed).
        watch: keep reading changes as they come (else: those committed now, then stop).
        poll_interval: seconds between reads that found nothing.
        batch: about how many changes a read takes (whole transactions).
        on_error: a change that cannot be transformed, keyed or encoded: ``"fail"``,
            ``"skip"`` or ``"dead-letter"`` (to ``dead_letter``).
        dead_letter: the dead-letter topic.
        name: the source's name (in each record's position header; default: the first
            topic).

    Raises:
        ConfigurationError: no tables, a table not qualified, an invalid slot or option.
    """

    dsn: str
    tables: Mapping[str, str]
    slot: str = ""
    codec: Codec[Any] = field(default_factory=JsonCodec)
    key: str | Callable[[Any], str] | None = None
    timestamp: str | Callable[[Any], int] | None = None
    transform: Callable[[Any], Any] | None = None
    watch: bool = False
    poll_interval: float = 0.5
    batch: int = 10_000
    on_error: Literal["fail", "skip", "dead-letter"] = "fail"
    dead_letter: str | None = None
    name: str = ""

    def __post_init__(self) -> None:
        where = f"PostgreSQL change source {self.name or self.slot or ''!r}"
        if not isinstance(self.dsn, str):
            raise ConfigurationError(f"{where}: dsn must be a libpq connection string")
        if not isinstance(self.tables, Mapping) or not self.tables:
            raise ConfigurationError(f"{where}: tables must map schema.table to a topic")
        for table in self.tables:
            if not isinstance(table, str) or table.count(".") != 1 or "," in table:
                raise ConfigurationError(f"{where}: table {table!r} must be schema.table")
        object.__setattr__(self, "tables", dict(self.tables))
        check_number(where, self, "batch", integer=True)
        check_number(where, self, "poll_interval")
        check_options(where, self, self.topics)
        slot = self.slot or f"goka_{self.name}"
        slot = "".join(c if c.isalnum() or c == "_" else "_" for c in slot.lower())[:63]
        if self.slot and slot != self.slot:
            raise ConfigurationError(f"{where}: slot {self.slot!r} must be lower-case letters, "
                                     "digits and _ (at most 63)")  # fmt: skip
        object.__setattr__(self, "slot", slot)

    @property
    def topics(self) -> list[str]:
        """The topics written (each once, in order)."""
        return list(dict.fromkeys(self.tables.values()))

    @property
    def topic(self) -> str:
        """The first topic."""
        return self.topics[0]

    def describe(self) -> str:
        return f"slot {self.slot} of {', '.join(self.tables)}"


class PostgresCdcSourceJob(SourceJob[Position]):
    """Runs a :class:`PostgresCdcSource` in this process.

    Args:
        source: what to read and where to write.
        brokers: bootstrap servers.
        kafka_config: librdkafka settings of the producer and of the resume's reads.
        retries: attempts of a read while the database is unreachable.
    """

    unit = "reads"

    def __init__(self, source: PostgresCdcSource, brokers: str, *,
                 kafka_config: dict[str, Any] | None = None, retries: int = 8) -> None:  # fmt: skip
        if not isinstance(source, PostgresCdcSource):
            raise ConfigurationError(f"source must be a PostgresCdcSource, got {source!r}")
        super().__init__(source, brokers, kafka_config=kafka_config)
        self._db = Database(source.dsn, f"PostgreSQL change source {source.name!r}",
                            retries=retries, autocommit=True)  # fmt: skip
        self._options = ("format-version", "2", "include-pk", "1", "include-lsn", "1",
                         "include-timestamp", "1",
                         "add-tables", ",".join(source.tables))  # fmt: skip

    def parse(self, text: str) -> Position:
        lsn, change, index = text.split("\t")
        return (lsn_int(lsn), int(change), int(index))

    def header(self, position: Position) -> str:
        return f"{lsn_text(position[0])}\t{position[1]}\t{position[2]}"

    def where(self, position: tuple[Any, ...]) -> str:
        return f"change {position[1]} of the transaction committed at {lsn_text(position[0])}"

    def reset(self) -> None:
        """Drop the slot (the next run creates it anew, at the database's current position);
        the topics keep their records."""
        try:
            self._db.run(lambda conn: conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s", (self.source.slot,)))  # fmt: skip
        finally:
            self.close()

    def slot_position(self) -> str | None:
        """The slot's confirmed position (None: no slot)."""
        try:
            found = self._db.run(lambda conn: conn.execute(
                "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s",
                (self.source.slot,)).fetchone())  # fmt: skip
        finally:
            self.close()
        return None if found is None else str(found[0])

    def read(self, writer: SourceWriter[Position], floor: Position | None, first: bool,
             watch: bool) -> None:  # fmt: skip
        if first:
            self._ensure_slot()
        upto = None if watch else self._db.run(_committed_now)
        peek = ("SELECT data FROM pg_logical_slot_peek_changes(%s, %s, %s, "
                + ", ".join(["%s"] * len(self._options)) + ")")  # fmt: skip
        arguments = (self.source.slot, upto, self.source.batch, *self._options)
        while not self.stopping:
            rows = self._db.run(lambda conn: conn.execute(peek, arguments).fetchall())
            if not rows:
                return
            self.totals.files += 1
            end = self._give(writer, rows)
            if end is None:
                return
            writer.producer.flush()
            self._advance(end)
            self.lifecycle.committed()

    def _give(self, writer: SourceWriter[Position], rows: list[Any]) -> str | None:
        """Give the changes of the whole transactions among ``rows`` to the writer; return
        the end LSN of the last one (None: none ended)."""
        commit, change, stamp, end = 0, 0, 0, None
        tables = self.source.tables
        for (data,) in rows:
            row = json.loads(data)
            action = row["action"]
            if action == "B":
                commit, change, stamp = lsn_int(row["lsn"]), 0, _ms(row.get("timestamp"))
            elif action == "C":
                end = row["nextlsn"]
            elif action in _OPS:
                table = f"{row['schema']}.{row['table']}"
                change = self._change(writer, row, tables[table], table, commit, change, stamp)
            elif action == "T":
                why = (f"table {row['schema']}.{row['table']} was truncated (transaction "
                       f"committed at {lsn_text(commit)}): its rows were not deleted in the "
                       "topic")  # fmt: skip
                log.warning("source %s: %s", self.source.name, why)
                self.totals.errors.append(why)
        return end

    def _change(self, writer: SourceWriter[Position], row: dict[str, Any], topic: str,
                table: str, commit: int, change: int, stamp: int) -> int:  # fmt: skip
        """Give one change to the writer; return the next change's index."""
        action = row["action"]
        headers = [(OP_HEADER, _OPS[action]), (TABLE_HEADER, table.encode())]
        names = [c["name"] for c in row.get("pk") or ()]
        identity = {c["name"]: _value(c) for c in row.get("identity") or ()}
        old = _key(names, identity)
        own = self.source.key is not None  # the source's key option keys the rows
        if action == "D":
            writer.record((commit, change), None, identity, key=FROM_OPTIONS if own else old,
                          headers=headers, stamp=stamp, topic=topic, tombstone=True)  # fmt: skip
            return change + 1
        values = {c["name"]: _value(c) for c in row["columns"]}
        new = _key(names, values)
        if action == "U" and old is not None and new != old and not own:
            writer.record((commit, change), None, identity, key=old, stamp=stamp, topic=topic,
                          headers=[(OP_HEADER, b"d"), (TABLE_HEADER, table.encode())],
                          tombstone=True)  # fmt: skip
            change += 1
        when = stamp if self.source.timestamp is None else None
        writer.record((commit, change), None, values, key=FROM_OPTIONS if own else new,
                      headers=headers, stamp=when, topic=topic)  # fmt: skip
        return change + 1

    def _ensure_slot(self) -> None:
        import psycopg

        def ensure(conn: Any) -> None:
            found = conn.execute("SELECT plugin FROM pg_replication_slots WHERE slot_name = %s",
                                 (self.source.slot,)).fetchone()  # fmt: skip
            if found is not None:
                if found[0] != _PLUGIN:
                    raise SourceError(f"source {self.source.name!r}: slot "
                                      f"{self.source.slot!r} decodes with {found[0]!r}, not "
                                      f"{_PLUGIN!r}")  # fmt: skip
                return
            conn.execute("SELECT pg_create_logical_replication_slot(%s, %s)",
                         (self.source.slot, _PLUGIN))  # fmt: skip
            log.info("source %s: created replication slot %s", self.source.name,
                     self.source.slot)  # fmt: skip

        try:
            self._db.run(ensure)
        except psycopg.errors.ObjectNotInPrerequisiteState as exc:
            raise SourceError(f"source {self.source.name!r}: the server cannot decode changes: "
                              f"{str(exc).strip()} (set wal_level = logical)") from exc  # fmt: skip
        except psycopg.errors.UndefinedFile as exc:
            raise SourceError(f"source {self.source.name!r}: the output plugin {_PLUGIN} is "
                              f"not installed on the server ({str(exc).strip()}; Debian: "
                              "postgresql-<version>-wal2json)") from exc  # fmt: skip

    def _advance(self, end: str) -> None:
        """Every change before ``end`` is acknowledged: the slot moves past them."""
        self._db.run(lambda conn: conn.execute(
            "SELECT pg_replication_slot_advance(%s, %s)", (self.source.slot, end)))  # fmt: skip

    def close(self) -> None:
        self._db.close()


def _committed_now(conn: Any) -> str:
    """An LSN that every transaction committed before now precedes, with the WAL flushed up
    to it (decoding reads flushed WAL only, and a server with ``synchronous_commit = off``
    leaves commits unflushed for a while): a transaction that commits synchronously and
    writes WAL (a logical decoding message, which the source ignores) flushes it."""
    with conn.transaction():
        conn.execute("SET LOCAL synchronous_commit = on")
        conn.execute("SELECT pg_logical_emit_message(true, 'goka-source', '')")
    return str(conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0])


def lsn_int(text: str) -> int:
    """An LSN (``16/B374D848``) as an int."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def lsn_text(value: int) -> str:
    """An LSN as PostgreSQL writes it."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def _key(names: list[str], values: Mapping[str, Any]) -> bytes | None:
    if not names or any(n not in values for n in names):
        return None
    if len(names) == 1:
        value = values[names[0]]
        return None if value is None else str(value).encode()
    return json.dumps([values[n] for n in names], separators=(",", ":")).encode()


def _value(column: Mapping[str, Any]) -> Any:
    value = column.get("value")
    if isinstance(value, str) and column.get("type") in ("json", "jsonb"):
        return json.loads(value)
    return value


def _ms(text: str | None) -> int:
    if not text:
        return 0
    return round(dt.datetime.fromisoformat(text).timestamp() * 1000)
