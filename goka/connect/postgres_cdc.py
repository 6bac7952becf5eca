"""Change data capture: the inserts, updates and deletes of PostgreSQL tables into topics,
exactly once, through logical decoding (``wal_level = logical`` on the server) with
PostgreSQL's own ``pgoutput`` (the default: a publication of the tables, made or checked by
the source; values mapped as Debezium maps them, :mod:`goka.connect.pgoutput`) or the
``wal2json`` plugin (``decoder="wal2json"``; Debian's ``postgresql-<version>-wal2json``).

The source reads the changes of its replication slot with the SQL functions
(``pg_logical_slot_peek_binary_changes``, ``..._peek_changes``: no replication connection),
whole transactions at a time, in commit order. Each change becomes a record keyed by the row's
primary key (else its replica identity index; one column: its text; several: a JSON array of
their values): an insert or update the row as a dict, a delete a tombstone (an update that
changes the key: a tombstone of the old key, then the new row). A table whose changes would
have no key (no primary key, no replica identity index, no ``key`` option with ``REPLICA
IDENTITY FULL``) or could not be decoded (``REPLICA IDENTITY NOTHING``) is refused at start.
Each record carries its position, the transaction's commit LSN and the change's index in it
(:mod:`goka.connect.source`), and headers ``goka-op`` (``c``, ``u``, ``d``, ``t``) and
``goka-table``. Only once every record of a read is acknowledged is the slot advanced past
its transactions; a restart reads the slot again from there and leaves out the changes each
partition has, so a crash at any moment neither loses nor duplicates a change.

What to know: a slot keeps WAL on the server until it is advanced (a source stopped for long
holds disk space; ``reset`` drops its slot); a TRUNCATE is a record with ``goka-op: t``, no
key and no value, in every partition of the table's topic; a table needs a primary key or ``REPLICA
IDENTITY FULL`` for its updates and deletes to be decoded; a publication must exist before
the slot is made (the source makes both in that order; a table added to the publication later
is published from then on); with ``wal2json``, column values are as it writes them (numbers,
text; bytea as hex; json columns are parsed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from goka.codec import Codec, JsonCodec
from goka.connect import wal2json
from goka.connect.database import Database
from goka.connect.pgoutput import Decoder, Event, lsn_int, lsn_text
from goka.connect.postgres_catalog import committed_now, compacted, type_infos
from goka.connect.postgres_slot import Slot
from goka.connect.postgres_snapshot import (
    MODES,
    PREFIX,
    SIGNAL,
    Window,
    done_at,
    record_key,
)
from goka.connect.postgres_snapshot_steps import OP_HEADER, TABLE_HEADER, Snapshots
from goka.connect.source import FROM_OPTIONS, SourceWriter, check_number, check_options
from goka.connect.source_job import SourceJob
from goka.errors import ConfigurationError, SourceError

__all__ = ["PostgresCdcSource", "PostgresCdcSourceJob", "lsn_int", "lsn_text"]

log = logging.getLogger(__name__)

#: A position: (commit LSN, the change's index in its transaction, output index).
Position = tuple[int, int, int]
_OPS = {"I": b"c", "U": b"u", "D": b"d"}
DECODERS = ("pgoutput", "wal2json")


@dataclass(frozen=True)
class PostgresCdcSource:
    """The changes of ``tables`` (qualified name -> topic) into their topics (see the module
    docstring).

    Args:
        dsn: the libpq connection string (a user with the REPLICATION attribute, or the
            owner of the slot).
        tables: each table (``schema.table``) and the topic its changes go to.
        slot: the replication slot (default: ``goka_<name>``; created if missing).
        decoder: ``"pgoutput"`` (PostgreSQL's own) or ``"wal2json"`` (a plugin the server
            must have).
        publication: pgoutput's publication of the tables (default: the slot's name; made
            if missing, tables it lacks added).
        snapshot: when the tables' existing rows are read (records with ``goka-op: r``):
            ``"initial"`` (when the slot is made), ``"never"``, ``"initial_only"`` (then no
            changes), ``"when_needed"`` (also when the slot is gone).
        snapshot_chunk: rows a snapshot reads at a time (its progress is noted after each).
        snapshot_transaction: seconds the initial snapshot reads in the snapshot exported
            with the slot (one transaction, which holds back vacuum); the rest is read in
            chunks between watermarks beside the changes.
        signal_table: a table (``schema.table``, columns ``id``, ``type``, ``data``) whose
            inserted rows ask for incremental snapshots, as Debezium's signal table does
            (:mod:`goka.connect.postgres_signals`; added to the publication).
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
    decoder: Literal["pgoutput", "wal2json"] = "pgoutput"
    publication: str = ""
    snapshot: Literal["initial", "never", "initial_only", "when_needed"] = "initial"
    snapshot_chunk: int = 10_000
    snapshot_transaction: float = 600.0
    signal_table: str = ""
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
        check_number(where, self, "snapshot_chunk", integer=True)
        check_number(where, self, "snapshot_transaction")
        check_options(where, self, self.topics)
        slot = self.slot or f"goka_{self.name}"
        slot = "".join(c if c.isalnum() or c == "_" else "_" for c in slot.lower())[:63]
        if self.slot and slot != self.slot:
            raise ConfigurationError(f"{where}: slot {self.slot!r} must be lower-case letters, "
                                     "digits and _ (at most 63)")  # fmt: skip
        object.__setattr__(self, "slot", slot)
        if self.decoder not in DECODERS:
            raise ConfigurationError(f"{where}: decoder must be one of {', '.join(DECODERS)}, "
                                     f"got {self.decoder!r}")  # fmt: skip
        if not isinstance(self.publication, str):
            raise ConfigurationError(f"{where}: publication must be a str")
        object.__setattr__(self, "publication", self.publication or slot)
        if self.snapshot not in MODES:
            raise ConfigurationError(f"{where}: snapshot must be one of {', '.join(MODES)}, "
                                     f"got {self.snapshot!r}")  # fmt: skip
        signals = self.signal_table
        if signals and (not isinstance(signals, str) or signals.count(".") != 1
                        or signals in self.tables or self.decoder != "pgoutput"):  # fmt: skip
            raise ConfigurationError(f"{where}: signal_table {signals!r} must be schema.table, "
                                     "none of the tables, with decoder='pgoutput'")  # fmt: skip
        if self.decoder == "wal2json" and self.snapshot != "never":
            raise ConfigurationError(f"{where}: snapshots read rows as pgoutput's changes "
                                     "have them: with decoder='wal2json', set "
                                     "snapshot='never'")  # fmt: skip

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


class PostgresCdcSourceJob(Snapshots, Slot, SourceJob[Position]):
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
                            retries=retries, autocommit=True, prepare=self._session)  # fmt: skip
        if source.decoder == "wal2json":
            self._query = ("SELECT data FROM pg_logical_slot_peek_changes(%s, %s, %s, "
                           "'format-version', '2', 'include-lsn', '1', 'include-timestamp', "
                           "'1', 'add-tables', %s)")  # fmt: skip
            self._argument = ",".join(source.tables)
        else:
            self._query = ("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s, %s, "
                           "'proto_version', '1', 'publication_names', %s, 'messages', "
                           "'true')")  # fmt: skip
            self._argument = source.publication
        self._decoder = Decoder(lambda oids: self._db.run(lambda conn: type_infos(conn, oids)))
        self._keys: dict[str, list[str]] = {}
        self._signalled = False
        self._xid = 0  # (the transaction whose changes are being given)
        self._given: set[int] = set()
        self._published: dict[str, tuple[list[str], str | None]] = {}
        self._policies: dict[str, bool] = {}  # (topic: compacted, asked at its first truncate)

    def parse(self, text: str) -> Position:
        lsn, change, index = text.split("\t")[:3]  # (a progress text: a plan may follow)
        return (lsn_int(lsn), int(change), int(index))

    def header(self, position: Position) -> str:
        lsn = position[0]
        if lsn != self._lsn[0]:  # (a transaction's or a snapshot's records share it)
            self._lsn = (lsn, lsn_text(lsn))
        return f"{self._lsn[1]}\t{position[1]}\t{position[2]}"

    _lsn: tuple[int, str] = (-1, "")

    def read(self, writer: SourceWriter[Position], floor: Position | None, first: bool,
             watch: bool) -> None:  # fmt: skip
        if (first and not self._prepare(writer)) or self.source.snapshot == "initial_only":
            return
        while True:
            plan = self._plan
            if plan is not None and self._window is None:
                self._open_window()  # (a snapshot's next chunk, between two watermarks)
            self._stream(writer)
            if self._window is not None and not self.stopping:
                raise SourceError(f"source {self.source.name!r}: the watermark of a snapshot "
                                  "chunk was not found in the changes read")  # fmt: skip
            if plan is not None and self._plan is None:
                writer.reach(done_at(plan.point))  # (read to its end: even if no row was left)
            if self._plan is None or self.stopping:
                return
            self.checkpoint(writer)  # (a chunk given: the plan's progress noted)

    def _stream(self, writer: SourceWriter[Position]) -> None:
        """Give the changes committed until now."""
        # (up to what is committed now, also when watching: each read's own message, which
        # both decoders give, moves the slot past WAL without changes of these tables, which
        # is then neither decoded again at every read nor kept on the server)
        upto, snapshot = self._db.run(committed_now)
        if self._given:  # (those it sees are visible: left are a few a standby holds back)
            now = Window()
            now.see(snapshot)
            self._given = set(filter(now.unseen, self._given))
        arguments = (self.source.slot, upto, self.source.batch, self._argument)
        while not self.stopping:
            rows = self._db.run(lambda conn: conn.execute(self._query, arguments).fetchall())
            if not rows:
                return
            self.totals.files += 1
            events: Iterator[Event]
            if self.source.decoder == "wal2json":
                events = map(wal2json.event, rows)
            else:
                events = self._decoder.decode(data for (data,) in rows)
            end = self._give(writer, events)
            if end is None:
                return
            if self._signalled:  # (noted before the slot moves past the signal)
                self.checkpoint(writer)
                self._signalled = False
            writer.producer.flush()
            self._advance(end)
            self.lifecycle.committed()

    def _give(self, writer: SourceWriter[Position], events: Any) -> str | None:
        """Give the changes of the whole transactions among ``events`` to the writer; return
        the end LSN of the last one (None: none ended)."""
        commit, change, stamp, end, self._xid = 0, 0, 0, None, 0
        tables = self.source.tables
        for event in events:
            action = event[0]
            if action == "B":
                commit, change, stamp, self._xid = event[1], 0, event[2], event[3]
                self._given.add(self._xid)
            elif action == "C":
                end = event[1]
            elif action in _OPS:
                topic = tables.get(event[1])
                if topic is not None:
                    change = self._change(writer, event, topic, commit, change, stamp)
                else:  # (a table the publication has, the source not: indexes stay as they are)
                    if event[1] == self.source.signal_table and action == "I":
                        self._signalled |= self._signal_row(event[2])
                    change += 1
            elif action == "M":
                if event[1] == SIGNAL:
                    self._signalled |= self._signal(event[2])
                elif event[1] == PREFIX and self._plan is not None:
                    given = self._watermark(event[2], self._table_key)
                    if given:  # (a chunk's rows, all of one table: reads, at this point)
                        give = self._reader(writer, given[0][0], stamp)
                        for _, row in given:
                            give((commit, change), row)
                            change += 1
            elif action == "T":
                for table in event[1]:  # (one change per table, as Debezium counts them)
                    topic = tables.get(table)
                    if topic is not None:
                        self._truncate(writer, table, topic, commit, change, stamp)
                    change += 1
        return end

    def _truncate(self, writer: SourceWriter[Position], table: str, topic: str, commit: int,
                  change: int, stamp: int) -> None:  # fmt: skip
        """A TRUNCATE of ``table``: a record with ``goka-op: t``, no key and no value, into
        every partition of its topic (each partition's consumers meet it after that
        partition's earlier changes of the table); an open window's chunk is dropped."""
        if self._window is not None:
            self._truncated(table, self._xid)
        writer.totals.records += 1
        if topic not in self._policies:  # (asked once per topic)
            self._policies[topic] = compacted(self.brokers, self.kafka_config, topic)
        if self._policies[topic]:
            why = (f"table {table} was truncated (transaction committed at {lsn_text(commit)}):"
                   f" its topic {topic} is compacted, which takes no record without a key, so "
                   "the truncate is not in it")  # fmt: skip
            log.warning("source %s: %s", self.source.name, why)
            writer.totals.errors.append(why)
            return
        headers = [(OP_HEADER, b"t"), (TABLE_HEADER, table.encode())]
        for partition in range(writer.counts[topic]):
            writer.produce(topic, (commit, change, partition), None, None, stamp, headers,
                           partition)  # fmt: skip

    def _change(self, writer: SourceWriter[Position], event: Event, topic: str, commit: int,
                change: int, stamp: int) -> int:  # fmt: skip
        """Give one change to the writer; return the next change's index."""
        action, table, values, identity = event
        if self._window is not None:
            keys = [self._table_key(table, identity), self._table_key(table, values or {})]
            self._changed(table, keys, self._xid)
        headers = [(OP_HEADER, _OPS[action]), (TABLE_HEADER, table.encode())]
        names = self._keys[table]
        old = record_key(names, identity)
        own = self.source.key is not None  # the source's key option keys the rows
        if action == "D":
            writer.record((commit, change), None, identity, key=FROM_OPTIONS if own else old,
                          headers=headers, stamp=stamp, topic=topic, tombstone=True)  # fmt: skip
            return change + 1
        new = record_key(names, values)
        if action == "U" and old is not None and new != old and not own:
            writer.record((commit, change), None, identity, key=old, stamp=stamp, topic=topic,
                          headers=[(OP_HEADER, b"d"), (TABLE_HEADER, table.encode())],
                          tombstone=True)  # fmt: skip
            change += 1
        when = stamp if self.source.timestamp is None else None
        writer.record((commit, change), None, values, key=FROM_OPTIONS if own else new,
                      headers=headers, stamp=when, topic=topic)  # fmt: skip
        return change + 1

    def close(self) -> None:
        self._running = False  # (its connection, and the slot's lock, let go)
        self._db.close()
