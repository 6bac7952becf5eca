"""The replication slot of a PostgreSQL change source's job: its lock (one run of a source at a
time), its position, dropping and advancing it.

A run's connection to the database holds the slot's advisory lock from before the run reads
its positions until it ends (:meth:`Slot.begin`); a connection made again during a run (the
first one lost) takes it without waiting, and the run stops if another run has it. The tools
(:meth:`Slot.reset`, :meth:`Slot.slot_position`, a snapshot's signal) use connections of their
own; ``reset`` refuses while a run holds the lock."""

from __future__ import annotations

from typing import Any

from goka.connect.database import Database
from goka.connect.pgoutput import SESSION, lsn_text
from goka.connect.postgres_catalog import drop_slot, hold_slot
from goka.connect.postgres_snapshot import BASE, is_milestone

__all__ = ["Slot"]


class Slot:
    """The slot steps of :class:`~goka.connect.postgres_cdc.PostgresCdcSourceJob`."""

    source: Any
    _db: Any
    _running: bool = False  # (a run's connections hold the slot's lock)
    _held: bool = False  # (a connection of this run held it)

    def reset(self) -> None:
        """Drop the slot (the next run creates it anew, at the database's current position);
        the topics keep their records.

        Raises:
            SourceError: a run of the source holds the slot.
        """
        slot = self.source.slot

        def drop(conn: Any) -> None:
            hold_slot(conn, self._who, slot, 0)  # (let go with the connection)
            drop_slot(conn, slot)

        self._tool(drop)

    def slot_position(self) -> str | None:
        """The slot's confirmed position (None: no slot)."""
        found = self._tool(lambda conn: conn.execute(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s",
            (self.source.slot,)).fetchone())  # fmt: skip
        return None if found is None else str(found[0])

    def begin(self) -> None:
        """A run's connection, holding the slot's lock (waiting up to
        :data:`~goka.connect.postgres_catalog.HOLD_WAIT` seconds for it)."""
        self._running, self._held = True, False
        self._db.close()
        self._db.run(lambda conn: None)  # (retried while the database is unreachable)

    def _session(self, conn: Any) -> None:
        """A connection's settings (the values' text as the decoder reads it) and, in a run,
        the slot's lock (:func:`~goka.connect.postgres_catalog.hold_slot`): at once if a
        connection of the run held it (another run may have begun since)."""
        conn.execute(SESSION)
        if self._running:
            hold_slot(conn, self._who, self.source.slot, 0 if self._held else None)
            self._held = True

    @property
    def _who(self) -> str:
        return f"source {self.source.name!r}"

    def _tool(self, work: Any) -> Any:
        """``work(connection)`` on a connection of its own (not the run's)."""
        db = Database(self.source.dsn, f"PostgreSQL change source {self.source.name!r}",
                      retries=2, autocommit=True,
                      prepare=lambda conn: conn.execute(SESSION))  # fmt: skip
        try:
            return db.run(work)
        finally:
            db.close()

    def _drop_slot(self) -> None:
        self._db.run(lambda conn: drop_slot(conn, self.source.slot))

    def _advance(self, end: str) -> None:
        """Every change before ``end`` is acknowledged: the slot moves past them."""
        self._db.run(lambda conn: conn.execute(
            "SELECT pg_replication_slot_advance(%s, %s)", (self.source.slot, end)))  # fmt: skip

    def where(self, position: tuple[Any, ...]) -> str:
        point = lsn_text(position[0])
        if position[1] == -BASE - 1:
            return f"the beginning of the snapshot at {point}"
        if position[1] == -1:
            return f"the end of the snapshot at {point}"
        if position[1] < -1:
            return f"row {position[1] + BASE} of the snapshot at {point}"
        return f"change {position[1]} of the transaction committed at {point}"

    def milestone(self, position: Any) -> bool:
        return is_milestone(position)  # (a snapshot's beginning or end)
