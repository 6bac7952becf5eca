"""The snapshot steps of a PostgreSQL change source's job (see
:mod:`goka.connect.postgres_snapshot`): whether a snapshot is due when a run starts, the initial
one in the exported snapshot, the chunks between watermarks, the signals that ask for one, the
tables added to the source, and the state the progress topic keeps for them."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from goka.connect.pgoutput import SESSION, Decoder, lsn_int
from goka.connect.postgres_catalog import (
    committed_unseen,
    ensure_publication,
    key_columns,
    publication_filters,
    server_errors,
)
from goka.connect.postgres_signals import Signals, check_signal_table
from goka.connect.postgres_snapshot import (
    BASE,
    PREFIX,
    Chunk,
    Plan,
    Window,
    begun_at,
    columns_of,
    copy_query,
    done_at,
    is_snapshot,
    make_slot,
    qualified,
    read_chunk,
    record_key,
    stream_chunk,
)
from goka.connect.postgres_snapshot_rows import OP_HEADER, TABLE_HEADER, give_direct, row_giver
from goka.errors import SourceError

__all__ = ["OP_HEADER", "TABLE_HEADER", "Snapshots"]

log = logging.getLogger(__name__)

#: How often the initial snapshot notes its plan (each note waits for every row given).
NOTE_SECONDS = 2.0


class Snapshots(Signals):
    """The snapshot steps of :class:`~goka.connect.postgres_cdc.PostgresCdcSourceJob` (see the
    module docstring): deciding whether one is due, the initial one, the windows."""

    source: Any
    totals: Any
    _db: Any
    _keys: dict[str, list[str]]
    _decoder: Decoder
    _saved: Any
    _saved_ok: bool
    _plan: Plan | None = None
    _window: Window | None = None
    #: The transactions whose changes were given that some snapshot may not see yet (their
    #: commit in the WAL, the server not done with them: a synchronous standby's wait).
    _given: set[int]
    _tables: list[str] | None = None  # (the tables noted in the progress topic)
    _published: dict[str, tuple[list[str], str | None]]  # (column lists, row filters)

    if TYPE_CHECKING:  # (the job's own: SourceJob's, before which this comes)

        @property
        def stopping(self) -> bool: ...
        def checkpoint(self, writer: Any) -> None: ...
        def header(self, position: Any) -> str: ...
        def where(self, position: tuple[Any, ...]) -> str: ...
        def _drop_slot(self) -> None: ...
        @property
        def progress_topic(self) -> str: ...

    def noted(self, text: str) -> None:
        """The progress topic's text at the start: the plan of an unfinished snapshot, the
        tables the source had."""
        parts = text.split("\t", 3)
        state = json.loads(parts[3]) if len(parts) > 3 else {}
        plan = None if state.get("plan") is None else Plan.parse(state["plan"])
        if plan is not None and plan.tables and plan.tables[0] not in self.source.tables:
            plan.after = None  # (the table being read left the source)
        if plan is not None:
            plan.tables = [t for t in plan.tables if t in self.source.tables]
        self._plan = plan if plan is not None and plan.tables else None
        self._tables = state.get("tables")

    def note(self, position: tuple[Any, ...]) -> str:
        """The progress topic's text: the position, the plan of an unfinished snapshot, the
        source's tables (a table added later is read by a snapshot of its own)."""
        plan = None if self._plan is None else self._plan.text()
        state = json.dumps({"plan": plan, "tables": sorted(self.source.tables)},
                           separators=(",", ":"))  # fmt: skip
        return f"{self.header(position)}\t{state}"

    def _publishes(self, table: str) -> tuple[list[str] | None, str | None]:
        """The publication's column list and row filter of ``table`` (a snapshot reads the
        rows and columns its changes have)."""
        return self._published.get(table, (None, None))

    def _add(self, tables: Sequence[str], why: str) -> None:
        """Read ``tables`` in chunks between watermarks (after the plan's)."""
        if not tables:
            return
        if self._plan is None:
            self._plan = Plan(0, [])
        self._plan.tables += [t for t in tables if t not in self._plan.tables[1:]]
        log.info("source %s: snapshot of %s %s: read in chunks beside the changes",
                 self.source.name, ", ".join(tables), why)  # fmt: skip

    def _prepare(self, writer: Any) -> bool:
        """Check the tables, make or check the publication (pgoutput) and the slot (a
        publication made after its slot is unknown to the slot's earlier changes), and read
        the tables' rows if a snapshot is due; return whether changes are to be read (not
        after ``initial_only``'s snapshot)."""
        source, where = self.source, f"source {self.source.name!r}"
        plugin = source.decoder

        def check(conn: Any) -> Any:
            self._keys = key_columns(conn, where, source.tables, source.key is not None)
            self._given |= committed_unseen(conn, where)  # (an earlier run's, perhaps)
            if plugin == "pgoutput":
                encoding = conn.execute("SHOW server_encoding").fetchone()[0]
                if encoding != "UTF8":
                    raise SourceError(f"{where}: the database's encoding is {encoding}: "
                                      "pgoutput's values are read as UTF8")  # fmt: skip
                published = list(source.tables)
                if source.signal_table:
                    check_signal_table(conn, where, source.signal_table)
                    published.append(source.signal_table)
                ensure_publication(conn, where, source.publication, published)
                self._published = publication_filters(conn, source.publication, published)
            return conn.execute("SELECT plugin, wal_status FROM pg_replication_slots "
                                "WHERE slot_name = %s", (source.slot,)).fetchone()  # fmt: skip

        with server_errors(where, plugin):
            found = self._db.run(check)
            if found is not None and found[1] == "lost":  # (its WAL removed: of no use)
                log.warning("%s: slot %s lost its WAL (max_slot_wal_keep_size?): dropped",
                            where, source.slot)  # fmt: skip
                self._drop_slot()
                found = None
            if found is not None and found[0] != plugin:
                raise SourceError(f"{where}: slot {source.slot!r} decodes with {found[0]!r}, "
                                  f"not {plugin!r} (the source's decoder; reset the source to "
                                  "make the slot anew)")  # fmt: skip
            due = self._snapshot_due(found is not None, writer)
            if due == "create":
                self._db.run(lambda conn: conn.execute(
                    "SELECT pg_create_logical_replication_slot(%s, %s)",
                    (source.slot, plugin)))  # fmt: skip
                log.info("%s: created replication slot %s", where, source.slot)
            elif due == "snapshot":
                if not self._saved_ok:
                    raise SourceError(f"{where}: a snapshot notes its plan in "
                                      f"{self.progress_topic}, which cannot be used")  # fmt: skip
                if self._plan is not None:  # (an old slot's plan: forgotten first)
                    self._plan = None
                    self.checkpoint(writer)
                if found is not None:
                    self._drop_slot()
                if not self._initial(writer):
                    return False
                if source.snapshot == "initial_only" and self._plan is None:
                    self._drop_slot()  # (it would keep WAL for changes nobody reads)
            return due not in ("none",) and source.snapshot != "initial_only"

    def _reader(self, writer: Any, table: str,
                stamp: int) -> Callable[[tuple[int, int], dict[str, Any]], None]:  # fmt: skip
        """``give(at, row)``: a snapshot's row of ``table`` to the writer."""
        return row_giver(writer, self.source, self._keys[table], table, stamp)

    def _table_key(self, table: str, row: dict[str, Any]) -> bytes | None:
        """A row's record key (the source's key option's, or its key columns'; None: an
        empty row, as an insert's old one, or one the key option cannot key)."""
        key = self.source.key
        if key is None:
            return record_key(self._keys[table], row)
        if not row:
            return None
        try:
            found = key(row) if callable(key) else row.get(key)
        except Exception:  # (the change's own record reports it, by its policy)
            return None
        return None if found is None else str(found).encode()

    def _snapshot_due(self, found: bool, writer: Any) -> str:
        """What the first read does: ``"stream"``, ``"resume"`` (a plan left: in windows),
        ``"snapshot"`` (a new slot and its snapshot), ``"create"`` (a slot, no snapshot) or
        ``"none"`` (``initial_only``'s snapshot was read)."""
        mode, where = self.source.snapshot, f"source {self.source.name!r}"
        known = max((p for p in (writer.last, self._saved) if p is not None), default=None)
        if self._plan is not None:
            if found and mode != "initial_only":  # (whose windows would need the changes)
                self._add_new_tables()
                log.info("%s: the snapshot of %s goes on after %s, in chunks beside the "
                         "changes", where, ", ".join(self._plan.tables),
                         self.where(known) if known else "its start")  # fmt: skip
                return "resume"
            return "snapshot"  # (its slot gone: begun again)
        done = known is not None and not is_snapshot(known)  # (a change or a snapshot's end)
        if mode == "never" or (done and (found or mode != "when_needed")):
            if found and mode != "initial_only":
                self._add_new_tables()
                return "stream"
            if found:  # (initial_only's slot, if a run was cut before it dropped it)
                self._drop_slot()
                return "none"
            if mode == "initial_only":
                return "none"
            if known is not None:
                log.warning("%s: slot %s is gone (reset?): changes since %s are not read "
                            "(snapshot='when_needed' reads the tables again)", where,
                            self.source.slot, self.where(known))  # fmt: skip
            return "create"
        if found:  # (a slot without a snapshot's plan or end: made by a run cut before both)
            log.warning("%s: the snapshot of %s was not begun: its slot is made anew", where,
                        ", ".join(self.source.tables))  # fmt: skip
        return "snapshot"

    def _add_new_tables(self) -> None:
        """Tables the source has that its progress did not note: a snapshot of their own
        (not with ``never``)."""
        if self._tables is not None and self.source.snapshot != "never":
            self._add([t for t in self.source.tables if t not in self._tables],
                      "added to the source")  # fmt: skip

    def _give_direct(self, writer: Any, chunk: Chunk, query: Any, conn: Any, described: Any,
                     point: int, first: int, stamp: int) -> bool:  # fmt: skip
        """An initial snapshot's chunk straight to the producer, where it can go so
        (:func:`~goka.connect.postgres_snapshot_rows.give_direct`)."""
        return give_direct(writer, self.source, self._keys[chunk.table], chunk, query, conn,
                           described, point, first, stamp)  # fmt: skip

    def _initial(self, writer: Any) -> bool:
        """Make the slot with its exported snapshot and give the rows of the tables in it,
        noting the plan after chunks (every :data:`NOTE_SECONDS`), for up to
        ``snapshot_transaction`` seconds (the rest is left to windows: the plan stays);
        return False if stopped."""
        import psycopg

        source, started = self.source, time.monotonic()
        # (initial_only reads no changes, so no windows: all in the exported snapshot)
        limit = source.snapshot_transaction if source.snapshot != "initial_only" else math.inf
        replication, point_text, name = make_slot(source.dsn, source.slot, source.decoder)
        point, stamp = lsn_int(point_text), int(time.time() * 1000)
        self._plan = plan = Plan(point, list(source.tables))
        noted = time.monotonic()
        described: dict[str, tuple[list[str], list[Callable[[str], Any]]]] = {}
        conn: Any = None
        try:
            writer.reach(begun_at(point))
            self.checkpoint(writer)  # (the plan noted: a cut snapshot goes on where it was)
            conn = psycopg.connect(source.dsn, autocommit=True)
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            conn.execute(f"SET TRANSACTION SNAPSHOT '{name}'", prepare=False)
            replication.close()  # (the snapshot is imported: its exporter may go)
            conn.execute(SESSION)
            for table in source.tables:  # (a TRUNCATE or a rewrite waits for the reads)
                conn.execute(f"LOCK TABLE {qualified(table)} IN ACCESS SHARE MODE")
            while plan.tables and not self.stopping:
                if time.monotonic() - started > limit:
                    log.info("source %s: the snapshot's transaction was open %.0f s: the "
                             "rest is read in chunks beside the changes", source.name,
                             source.snapshot_transaction)  # fmt: skip
                    return True
                table = plan.tables[0]
                if table not in described:  # (the same in the snapshot, chunk to chunk)
                    described[table] = columns_of(conn, table, self._decoder,
                                                  self._publishes(table)[0])  # fmt: skip
                chunk, keys, size = Chunk(table), self._keys[table], source.snapshot_chunk
                only = self._publishes(table)[1]
                query = copy_query(table, described[table][0], keys, plan.after, size, only)
                if not self._give_direct(writer, chunk, query, conn, described[table], point,
                                         plan.count, stamp):  # fmt: skip
                    give = self._reader(writer, table, stamp)
                    rows = stream_chunk(conn, chunk, *described[table], keys, plan.after, size,
                                        only)  # fmt: skip
                    for n, row in enumerate(rows, plan.count):
                        give((point, n - BASE), row)
                plan.advance(chunk, self.source.snapshot_chunk)
                self.totals.snapshot_rows += chunk.count
                if plan.tables and time.monotonic() - noted >= NOTE_SECONDS:
                    self._db.run(lambda conn: conn.execute("SELECT 1"))  # (the lock still held)
                    self.checkpoint(writer)  # (waits for the rows: not after every chunk)
                    noted = time.monotonic()
        finally:
            replication.close()
            if conn is not None:
                conn.close()  # (the snapshot's transaction ends with it)
        if self.stopping and plan.tables:
            return False
        self._plan = None  # (read to its end)
        writer.reach(done_at(point))
        self.checkpoint(writer)
        log.info("source %s: snapshot of %s at %s: %d rows", source.name,
                 ", ".join(source.tables), point_text, plan.count)  # fmt: skip
        return True

    def _open_window(self) -> None:
        """Read the plan's next chunk between two watermarks (see the module docstring), not
        while a transaction whose changes were given is not yet visible (its commit waits
        for a synchronous standby): the chunk's rows could be older than those changes. The
        wait streams nothing, so the transactions it waits for are a fixed few."""
        plan, slot = self._plan, self.source.slot
        assert plan is not None and plan.tables
        table = plan.tables[0]
        waiting: list[int] = []

        def unseen(conn: Any, window: Window) -> bool:
            window.see(conn.execute("SELECT pg_current_snapshot()::text").fetchone()[0])
            waiting[:] = sorted(x for x in self._given if window.unseen(x))
            return bool(waiting)

        def read(conn: Any) -> Window:
            window = Window()  # (a retried attempt's marks are its own)
            if unseen(conn, window):  # (no marks while it waits)
                return window
            conn.execute("SELECT pg_logical_emit_message(true, %s, %s)",
                         (PREFIX, window.mark(slot, "low")))  # fmt: skip
            with conn.transaction():  # (the chunk and its snapshot's ids, one snapshot)
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                if unseen(conn, window):
                    return window  # (no chunk: its marks are ignored)
                listed, only = self._publishes(table)
                columns, converters = columns_of(conn, table, self._decoder, listed)
                window.chunk = read_chunk(conn, table, columns, converters, self._keys[table],
                                          plan.after, self.source.snapshot_chunk, only)  # fmt: skip
            conn.execute("SELECT pg_logical_emit_message(true, %s, %s)",
                         (PREFIX, window.mark(slot, "high")))  # fmt: skip
            return window

        logged = -math.inf
        while not self.stopping:
            window = self._db.run(read)
            if window.chunk is not None:
                self._window = window
                return
            if time.monotonic() - logged >= 30:
                log.info("source %s: transaction(s) %s, whose changes were given, are not yet "
                         "visible (their commits wait for a synchronous standby?): the "
                         "snapshot's next chunk waits", self.source.name,
                         ", ".join(map(str, waiting)))  # fmt: skip
                logged = time.monotonic()
            time.sleep(self.source.poll_interval)

    def _watermark(self, content: str, table_key: Callable[[str, dict[str, Any]], bytes | None]
                   ) -> list[tuple[str, dict[str, Any]]]:  # fmt: skip
        """A watermark message met in the stream: the open window's low one opens it; its high
        one ends it and returns the chunk's rows no change touched, to be given there."""
        window, slot = self._window, self.source.slot
        if window is None or window.chunk is None:
            return []
        if content == window.mark(slot, "low"):
            window.open = True
            return []
        if content != window.mark(slot, "high"):
            return []  # (a mark of a window before a restart)
        chunk, plan = window.chunk, self._plan
        assert plan is not None
        given = [] if window.truncated else [
            (chunk.table, row) for row in chunk.rows
            if table_key(chunk.table, row) not in window.changed]  # fmt: skip
        self.totals.snapshot_rows += len(given)
        plan.advance(chunk, self.source.snapshot_chunk)
        self._window = None
        if not plan.tables:
            self._plan = None
            log.info("source %s: snapshot read to its end", self.source.name)
        return given

    def _changed(self, table: str, keys: Sequence[bytes | None], xid: int) -> None:
        """A change of ``table`` (its record keys, old and new) by transaction ``xid`` met in
        the stream: inside the window, or by a transaction the chunk did not see, it drops
        the keys from the chunk."""
        window = self._window
        if window is not None and window.chunk is not None and window.chunk.table == table \
                and (window.open or window.unseen(xid)):  # fmt: skip
            window.changed.update(keys)

    def _truncated(self, table: str, xid: int) -> None:
        """A TRUNCATE of ``table`` by ``xid`` met in the stream: where a change would drop
        keys from the chunk, it drops the whole chunk (its rows may be gone)."""
        window = self._window
        if window is not None and window.chunk is not None and window.chunk.table == table \
                and (window.open or window.unseen(xid)):  # fmt: skip
            window.truncated = True
