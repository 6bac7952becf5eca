"""The replication slot of a PostgreSQL change source's job: its lock (one run of a source at a
time), its position, dropping and advancing it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from goka.connect.pgoutput import SESSION
from goka.connect.postgres_catalog import drop_slot, hold_slot

__all__ = ["Slot"]


class Slot:
    """The slot steps of :class:`~goka.connect.postgres_cdc.PostgresCdcSourceJob`."""

    source: Any
    _db: Any
    _running: bool = False  # (a run's connections hold the slot's lock)

    if TYPE_CHECKING:  # (the job's own)

        def close(self) -> None: ...

    def reset(self) -> None:
        """Drop the slot (the next run creates it anew, at the database's current position);
        the topics keep their records."""
        try:
            self._drop_slot()
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

    def _session(self, conn: Any) -> None:
        """A connection's settings (the values' text as the decoder reads it) and, in a run,
        the slot's lock (:func:`~goka.connect.postgres_catalog.hold_slot`)."""
        conn.execute(SESSION)
        if self._running:
            hold_slot(conn, f"source {self.source.name!r}", self.source.slot)

    def _drop_slot(self) -> None:
        self._db.run(lambda conn: drop_slot(conn, self.source.slot))

    def _advance(self, end: str) -> None:
        """Every change before ``end`` is acknowledged: the slot moves past them."""
        self._db.run(lambda conn: conn.execute(
            "SELECT pg_replication_slot_advance(%s, %s)", (self.source.slot, end)))  # fmt: skip
