"""What a PostgreSQL change source asks the server: each table's key columns (and whether its
changes can be decoded at all), its publication, the types of its columns, a position every
committed transaction precedes; the server's refusals to decode as errors that say what to do."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from goka.connect.database import table_name
from goka.connect.pgoutput import TypeInfo
from goka.errors import SourceError

__all__ = [
    "committed_now",
    "committed_unseen",
    "compacted",
    "drop_slot",
    "ensure_publication",
    "hold_slot",
    "key_columns",
    "publication_filters",
    "server_errors",
    "type_infos",
]

log = logging.getLogger(__name__)

_TABLE = """
SELECT c.relreplident, c.relkind,
       ARRAY(SELECT a.attname::text FROM pg_index i
             JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
             WHERE i.indrelid = c.oid AND i.indisprimary ORDER BY k.n),
       ARRAY(SELECT a.attname::text FROM pg_index i
             JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
             WHERE i.indrelid = c.oid AND i.indisreplident ORDER BY k.n),
       ARRAY(SELECT a.attname::text FROM pg_attribute a
             WHERE a.attrelid = c.oid AND a.attgenerated <> '')
FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
WHERE s.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')
"""


def key_columns(conn: Any, where: str, tables: Iterable[str],
                own_key: bool) -> dict[str, list[str]]:  # fmt: skip
    """Each table's key columns: its primary key, else its replica identity index ([] when
    ``own_key``: the source's key option keys the rows, which needs ``REPLICA IDENTITY
    FULL`` for deletes to carry the row).

    Raises:
        SourceError: a table is missing, or its updates and deletes would have no key or could
            not be decoded (naming the table and what to change).
    """
    found: dict[str, list[str]] = {}
    for table in tables:
        schema, name = table.split(".")
        row = conn.execute(_TABLE, (schema, name)).fetchone()
        if row is None:
            raise SourceError(f"{where}: table {table} does not exist (or is not a table)")
        identity, kind, primary, index = row[0], row[1], list(row[2]), list(row[3])
        generated = [c for c in primary or index if c in row[4]]
        if generated:
            raise SourceError(f"{where}: table {table} is keyed by generated column(s) "
                              f"{', '.join(generated)}, which logical decoding does not "
                              "send")  # fmt: skip
        if kind == "p":
            raise SourceError(f"{where}: table {table} is partitioned: pgoutput names its "
                              "partitions' changes, not its own; give the source its "
                              "partitions")  # fmt: skip
        if identity == "i" and primary and index != primary:
            raise SourceError(f"{where}: table {table} has REPLICA IDENTITY USING INDEX on "
                              f"({', '.join(index)}), not its primary key "
                              f"({', '.join(primary)}): its deletes would not carry the key; "
                              "ALTER TABLE ... REPLICA IDENTITY DEFAULT or FULL")  # fmt: skip
        if identity == "n":
            raise SourceError(f"{where}: table {table} has REPLICA IDENTITY NOTHING: its updates "
                              "and deletes cannot be decoded; ALTER TABLE ... REPLICA IDENTITY "
                              "DEFAULT (with a primary key) or FULL")  # fmt: skip
        keys = primary or (index if identity == "i" else [])
        if not keys and not (own_key and identity == "f"):
            raise SourceError(
                f"{where}: table {table} has no primary key (nor a replica identity index): "
                "its changes have no key, and a publication of its updates makes the server "
                "refuse them; add a primary key, or ALTER TABLE ... REPLICA IDENTITY FULL and "
                "give the source a key option"
            )
        found[table] = keys
    return found


def ensure_publication(conn: Any, where: str, name: str, tables: Sequence[str]) -> None:
    """Make publication ``name`` of ``tables``, or check that it publishes every change of
    them (adding the tables it lacks).

    Raises:
        SourceError: it leaves out inserts, updates, deletes or truncates, or cannot be made
            or changed (naming what to do instead).
    """
    import psycopg
    from psycopg import sql

    found = conn.execute(
        "SELECT puballtables, pubinsert AND pubupdate AND pubdelete AND pubtruncate "
        "FROM pg_publication WHERE pubname = %s", (name,)).fetchone()  # fmt: skip
    listed = sql.SQL(", ").join(map(table_name, tables))
    try:
        if found is None:
            conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                sql.Identifier(name), listed))  # fmt: skip
            return
        if not found[1]:
            raise SourceError(f"{where}: publication {name!r} does not publish every insert, "
                              "update, delete and truncate; ALTER PUBLICATION ... SET (publish "
                              "= 'insert, update, delete, truncate')")  # fmt: skip
        if found[0]:
            return
        have = {f"{s}.{t}" for s, t in conn.execute(
            "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
            (name,)).fetchall()}  # fmt: skip
        missing = [t for t in tables if t not in have]
        if missing:
            conn.execute(sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                sql.Identifier(name),
                sql.SQL(", ").join(map(table_name, missing))))  # fmt: skip
    except psycopg.errors.InsufficientPrivilege as exc:
        raise SourceError(f"{where}: cannot make or change publication {name!r} of "
                          f"{', '.join(tables)} ({str(exc).strip()}); its owner can: CREATE "
                          "PUBLICATION ... FOR TABLE ..., or give the source a publication "
                          "that has them") from exc  # fmt: skip


def type_infos(conn: Any, oids: Iterable[int]) -> Mapping[int, TypeInfo]:
    """The ``pg_type`` facts of ``oids``."""
    rows = conn.execute("SELECT oid::int, typname::text, typcategory::text, typelem::int, "
                        "typdelim::text FROM pg_type WHERE oid = ANY(%s)",
                        (list(oids),)).fetchall()  # fmt: skip
    return {oid: TypeInfo(name, category, element, delimiter)
            for oid, name, category, element, delimiter in rows}  # fmt: skip


@contextlib.contextmanager
def server_errors(where: str, plugin: str) -> Iterator[None]:
    """The server's refusals to decode as errors that say what to do."""
    import psycopg

    try:
        yield
    except psycopg.errors.ObjectNotInPrerequisiteState as exc:
        raise SourceError(f"{where}: the server cannot decode changes: {str(exc).strip()} "
                          "(set wal_level = logical)") from exc  # fmt: skip
    except psycopg.errors.UndefinedFile as exc:
        raise SourceError(f"{where}: the output plugin {plugin} is not installed on the "
                          f"server ({str(exc).strip()}; Debian: postgresql-<version>-wal2json; "
                          "or decoder='pgoutput', PostgreSQL's own)") from exc  # fmt: skip


def committed_now(conn: Any) -> tuple[str, str]:
    """An LSN that every transaction committed before now precedes, with the WAL flushed up
    to it (decoding reads flushed WAL only, and a server with ``synchronous_commit = off``
    leaves commits unflushed for a while): a transaction that commits with a local flush and
    writes WAL (a logical decoding message, which the source ignores) flushes it. And a
    snapshot taken now (``pg_current_snapshot()``): what it does not see is not visible yet."""
    with conn.transaction():
        conn.execute("SET LOCAL synchronous_commit = local")  # (no standby's wait)
        conn.execute("SELECT pg_logical_emit_message(true, 'goka-source', '')")
    lsn, snapshot = conn.execute("SELECT pg_current_wal_insert_lsn()::text, "
                                 "pg_current_snapshot()::text").fetchone()  # fmt: skip
    return str(lsn), str(snapshot)


def committed_unseen(conn: Any, where: str) -> set[int]:
    """The transactions (32 bits) committed in the WAL that snapshots do not see yet, their
    sessions waiting for a synchronous standby (an earlier run may have given their changes):
    as ``pg_stat_activity`` shows them, all of them to a role with ``pg_read_all_stats`` (a
    warning where the server has synchronous standbys and the role cannot see them)."""
    rows = conn.execute("SELECT backend_xid::text FROM pg_stat_activity WHERE wait_event = "
                        "'SyncRep' AND backend_xid IS NOT NULL AND backend_xid NOT IN "
                        "(SELECT transaction FROM pg_prepared_xacts)").fetchall()  # fmt: skip
    blind = conn.execute("SELECT current_setting('synchronous_standby_names') <> '' AND NOT "
                         "pg_has_role('pg_read_all_stats', 'USAGE')").fetchone()[0]  # fmt: skip
    if blind:
        log.warning("%s: the server has synchronous standbys, and the source's role cannot see "
                    "other roles' commits waiting for them (grant it pg_read_all_stats): a "
                    "snapshot resumed after a restart may read a row older than a change "
                    "given before it", where)  # fmt: skip
    return {int(x) & 0xFFFFFFFF for (x,) in rows}


def publication_filters(conn: Any, name: str, tables: Sequence[str]) -> dict[str, Any]:
    """The column list and row filter (SQL, or None) of each of ``tables`` in publication
    ``name`` (PostgreSQL 15 or later: before, a publication has neither)."""
    if conn.info.server_version < 150000:
        return {}
    rows = conn.execute(
        "SELECT schemaname || '.' || tablename, attnames::text[], rowfilter "
        "FROM pg_publication_tables WHERE pubname = %s", (name,)).fetchall()  # fmt: skip
    return {table: (list(names), rowfilter) for table, names, rowfilter in rows
            if table in tables}  # fmt: skip


#: Seconds a run waits for the slot's lock (a killed run's session may still be ending).
HOLD_WAIT = 30.0


def hold_slot(conn: Any, where: str, slot: str, wait: float | None = None) -> None:
    """Take the advisory lock of ``slot`` for ``conn``'s session: a second run of the same
    source refuses to start, rather than give every change a second time. It waits up to
    ``wait`` seconds for the lock (default :data:`HOLD_WAIT`, as a run begins: the session of
    a run just killed lets it go when its query ends).

    Raises:
        SourceError: another session still holds it.
    """
    deadline = time.monotonic() + (HOLD_WAIT if wait is None else wait)
    while True:
        row = conn.execute(
            "SELECT pg_try_advisory_lock(k), (SELECT string_agg(pid::text, ', ') FROM pg_locks "
            "WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND (classid::int8 << 32 "
            "| objid::int8) = k AND pid <> pg_backend_pid()) "
            "FROM (SELECT hashtextextended(%s, 0) AS k) AS lock", (f"goka-source:{slot}",)
        ).fetchone()  # fmt: skip
        if row[0]:
            return
        if time.monotonic() > deadline:
            raise SourceError(f"{where}: another run of it holds slot {slot!r} (server "
                              f"process {row[1]}); a source runs once at a time")  # fmt: skip
        time.sleep(0.2)


def drop_slot(conn: Any, slot: str) -> None:
    """Drop ``slot`` if it is there."""
    conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                 "WHERE slot_name = %s", (slot,))  # fmt: skip


def compacted(brokers: str, kafka_config: Any, topic: str) -> bool:
    """Whether ``topic``'s cleanup policy compacts it."""
    from goka.kafka.admin import KafkaAdmin

    config = KafkaAdmin(brokers, kafka_config).topic_config(topic)
    return "compact" in config.get("cleanup.policy", "")
