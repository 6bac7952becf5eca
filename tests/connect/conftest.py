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
def dsn(postgres_server: LocalPostgres) -> str:
    """A new, empty database's connection string."""
    import psycopg

    name = f"test{next(_databases)}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return postgres_server.dsn.replace(f"dbname={postgres_server.database}", f"dbname={name}")
