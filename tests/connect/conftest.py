"""A throwaway PostgreSQL server (``goka.dev.postgres``) for the connector tests: one per
session, a fresh database per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from goka.dev.postgres import LocalPostgres, find_postgres

_databases = itertools.count()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[LocalPostgres]:
    if find_postgres() is None:  # make test installs it; a bare pytest may run without
        pytest.skip("PostgreSQL is not installed (make test installs Debian's postgresql)")
    with LocalPostgres() as server:
        yield server


@pytest.fixture
def wal2json(postgres_server: LocalPostgres) -> None:
    """Skip unless the server has the wal2json output plugin (make test installs it)."""
    if not (postgres_server.bin_dir.parent / "lib" / "wal2json.so").exists():
        pytest.skip("wal2json is not installed (make test installs postgresql-15-wal2json)")


@pytest.fixture
def dsn(postgres_server: LocalPostgres) -> Iterator[str]:
    """A new, empty database's connection string (its replication slots are dropped after
    the test: they hold the server's WAL)."""
    import psycopg

    name = f"test{next(_databases)}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield postgres_server.dsn.replace(f"dbname={postgres_server.database}", f"dbname={name}")
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     "WHERE database = %s AND NOT active", (name,))  # fmt: skip
