"""Signals to a PostgreSQL change source, met in its stream in order with the changes: a
logical decoding message ``goka-snapshot`` (:meth:`Signals.snapshot`, ``goka connect
snapshot``), or a row inserted into a table of its database (Debezium's signal table,
``signal_table=``). The table has Debezium's columns, ``id`` (text: the signal's name),
``type`` and ``data`` (JSON text); a source acts on ``execute-snapshot``::

    INSERT INTO public.goka_signals (id, type, data) VALUES ('again-1', 'execute-snapshot',
        '{"data-collections": ["public.orders"], "type": "incremental"}');

``data-collections`` lists tables (``schema.table``) or regular expressions matching the whole
name of the source's tables. Other signal types, and snapshots other than ``incremental``, are
logged and listed in the run's errors; so are tables that are not the source's.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from goka.connect.postgres_snapshot import SIGNAL
from goka.errors import SourceError

__all__ = ["COLUMNS", "Signals", "check_signal_table", "signalled_tables"]

log = logging.getLogger(__name__)

#: The signal table's columns (Debezium's).
COLUMNS = ("id", "type", "data")


class Signals:
    """The signal steps of :class:`~goka.connect.postgres_cdc.PostgresCdcSourceJob`: asking
    for a snapshot, and the signals met in the stream (their tables join the snapshot's plan,
    :meth:`~goka.connect.postgres_snapshot_steps.Snapshots._add`)."""

    source: Any
    totals: Any

    if TYPE_CHECKING:  # (Snapshots', and Slot's)

        def _add(self, tables: Sequence[str], why: str) -> None: ...
        def _tool(self, work: Any) -> Any: ...

    def snapshot(self, tables: Sequence[str]) -> None:
        """Have the source read ``tables`` again (an incremental snapshot), in chunks between
        watermarks beside the changes: a signal written to the database's WAL, which the
        source meets in order with the changes (now if it runs, else at its next run).

        Raises:
            ConfigurationError: a table is not one of the source's.
        """
        from goka.errors import ConfigurationError

        if self.source.decoder != "pgoutput":
            raise ConfigurationError(f"source {self.source.name!r}: snapshots need "
                                     "decoder='pgoutput'")  # fmt: skip
        unknown = [t for t in tables if t not in self.source.tables]
        if unknown or not tables:
            raise ConfigurationError(f"source {self.source.name!r}: can snapshot its tables "
                                     f"({', '.join(self.source.tables)}), not "
                                     f"{', '.join(unknown) or 'none'}")  # fmt: skip
        content = f"{self.source.slot}\t{json.dumps(list(tables))}"
        self._tool(lambda conn: conn.execute(
            "SELECT pg_logical_emit_message(true, %s, %s)", (SIGNAL, content)))  # fmt: skip

    def _signal(self, content: str) -> bool:
        """A snapshot signal met in the stream: its tables join the plan. Returns whether it
        was this source's."""
        slot, _, listed = content.partition("\t")
        if slot != self.source.slot:
            return False
        tables = [t for t in json.loads(listed) if t in self.source.tables]
        self._add(tables, "asked for")
        return True

    def _signal_row(self, row: dict[str, Any]) -> bool:
        """A row of the signal table met in the stream: the tables it asks a snapshot of join
        the plan (what it asks that is not done: logged, in the run's errors). Returns
        whether it asked for one."""
        tables, problems = signalled_tables(row, list(self.source.tables))
        for problem in problems:
            log.warning("source %s: %s", self.source.name, problem)
            self.totals.errors.append(problem)
        self._add(tables, f"asked for by signal {row.get('id')!r}")
        return bool(tables)


def check_signal_table(conn: Any, where: str, table: str) -> None:
    """Refuse a signal table that is missing or lacks one of :data:`COLUMNS`."""
    from goka.connect.postgres_snapshot import qualified

    found = conn.execute("SELECT to_regclass(%s)::oid", (qualified(table),)).fetchone()[0]
    if found is None:
        raise SourceError(f"{where}: signal table {table} does not exist: create it with "
                          "columns id text PRIMARY KEY, type text NOT NULL, data text")  # fmt: skip
    columns = {name for (name,) in conn.execute(
        "SELECT attname::text FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
        "AND NOT attisdropped", (found,))}  # fmt: skip
    missing = [c for c in COLUMNS if c not in columns]
    if missing:
        raise SourceError(f"{where}: signal table {table} lacks column(s) "
                          f"{', '.join(missing)} (it needs id, type and data)")  # fmt: skip


def signalled_tables(row: dict[str, Any], tables: Sequence[str]) -> tuple[list[str], list[str]]:
    """The source's ``tables`` that a signal ``row`` asks a snapshot of, and what in it was
    not acted on (for the log and the run's errors)."""
    name, kind = row.get("id"), row.get("type")
    where = f"signal {name!r}"
    if kind != "execute-snapshot":
        return [], [f"{where}: type {kind!r} is not one this source acts on "
                    "(execute-snapshot)"]  # fmt: skip
    try:
        data = json.loads(row.get("data") or "")
        wanted = data["data-collections"]
        if not isinstance(wanted, list) or not all(isinstance(w, str) for w in wanted):
            raise TypeError("data-collections must be a list of names")
        patterns = [re.compile(w) for w in wanted]
    except (ValueError, KeyError, TypeError, re.error) as exc:
        return [], [f"{where}: data must be JSON with data-collections, a list of tables or "
                    f"regular expressions ({type(exc).__name__}: {exc})"]  # fmt: skip
    if str(data.get("type", "incremental")).lower() != "incremental":
        return [], [f"{where}: snapshot type {data['type']!r}: only incremental snapshots "
                    "are read (in chunks beside the changes)"]  # fmt: skip
    chosen = [t for t in tables if any(p.fullmatch(t) for p in patterns)]
    unknown = [w for w, p in zip(wanted, patterns, strict=True)
               if not any(p.fullmatch(t) for t in tables)]  # fmt: skip
    return chosen, [f"{where}: {w!r} is none of the source's tables" for w in unknown]
