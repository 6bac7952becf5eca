"""A PostgreSQL connection for connectors that survives the server going away: each piece of
work is retried whole on a new connection, with backoff, when the server is unreachable or
restarting (psycopg's ``OperationalError``); other errors are the work's own and raised."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Database", "table_name"]

log = logging.getLogger(__name__)


class Database:
    """One connection to ``dsn`` at a time, made when needed.

    Args:
        dsn: the libpq connection string.
        who: names the connector in log lines (``PostgreSQL sink 'clicks'``).
        retries: attempts of a piece of work (backoff from 0.2 s, doubling, at most 5 s).
        autocommit: the connection's mode.
        prepare: called with each new connection (in a transaction unless ``autocommit``).

    Not thread-safe: one per thread.
    """

    def __init__(self, dsn: str, who: str, *, retries: int = 8, autocommit: bool = False,
                 prepare: Callable[[Any], None] | None = None) -> None:  # fmt: skip
        self.dsn, self.who, self.retries = dsn, who, retries
        self._autocommit, self._prepare = autocommit, prepare
        self._conn: Any = None

    def connect(self) -> Any:
        """The connection (a new one if there is none or it closed)."""
        import psycopg

        if self._conn is None or self._conn.closed:
            conn = psycopg.connect(self.dsn, autocommit=self._autocommit)
            try:
                if self._prepare is not None and self._autocommit:
                    self._prepare(conn)
                elif self._prepare is not None:
                    with conn.transaction():
                        self._prepare(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def run(self, work: Callable[[Any], Any], *, transaction: bool = False) -> Any:
        """``work(connection)``, retried whole on a new connection while the server is
        unreachable; in one transaction if ``transaction`` (else committed after it, unless
        autocommit).

        Raises:
            psycopg.OperationalError: still unreachable after ``retries`` attempts.
        """
        import psycopg

        delay = 0.2
        for attempt in range(1, self.retries + 1):
            try:
                conn = self.connect()
                if not transaction:
                    result = work(conn)
                    if not self._autocommit:
                        conn.commit()
                    return result
                with conn.transaction():
                    return work(conn)
            except psycopg.OperationalError as exc:
                self.close()
                if attempt == self.retries:
                    raise
                log.warning("%s: %s; retrying in %.1f s (attempt %d of %d)", self.who,
                            str(exc).strip(), delay, attempt, self.retries)  # fmt: skip
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()


def table_name(table: str) -> Any:
    """``schema.table`` (or ``table``) as an SQL identifier, each part quoted."""
    from psycopg import sql

    return sql.Identifier(*table.split(".", 1))
