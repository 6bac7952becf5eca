"""Versions of rows, for the change source's snapshot tests: a writer of single-row
transactions whose rows count their updates, and the check that each key's records are its
versions in commit order, ending equal to the table."""

from __future__ import annotations

import json
import random
import threading
from typing import Any

from goka.connect.postgres_cdc import OP_HEADER
from goka.kafka.consumer import read_to_end


class Writer:
    """Single-row transactions on ``items (id, n)`` until stopped: inserts (n = 0), updates
    (n + 1) and deletes, by a thread of its own."""

    def __init__(self, dsn: str, seed: int, first: int, table: str = "items") -> None:
        self.dsn, self.rng, self.next, self.table = dsn, random.Random(seed), first, table
        self.stop, self.done = threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with _psycopg().connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                kind = self.rng.random()
                if kind < 0.2:
                    conn.execute(f"INSERT INTO {self.table} VALUES (%s, 0)", (self.next,))
                    self.next += 1
                else:
                    key = self.rng.randrange(1, self.next)
                    if kind < 0.3:
                        conn.execute(f"DELETE FROM {self.table} WHERE id = %s", (key,))
                    else:
                        conn.execute(f"UPDATE {self.table} SET n = n + 1 WHERE id = %s", (key,))
                self.done += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


def check_runs(brokers: str, topic: str, dsn: str, *, reads_twice: bool = False,
               table: str = "items") -> Any:  # fmt: skip
    """Each key's records: a read (or an insert at n = 0), then n + 1 per update, a tombstone
    for a delete or a truncate of its partition (after which only an insert at 0 or a read),
    no version skipped or repeated, the last equal to the table. With ``reads_twice`` (a
    snapshot read in windows: a key may be read again, and its first records may be changes),
    a read is never older than the record before it. Returns the ops."""
    versions: dict[bytes, list[tuple[bytes, int | None]]] = {}
    partitions: dict[bytes, int] = {}
    ops: dict[bytes, int] = {}
    for record in read_to_end(brokers, topic, timeout=60):
        op = dict(record.headers)[OP_HEADER]
        ops[op] = ops.get(op, 0) + 1
        if op == b"t":  # a TRUNCATE: every key of its partition has no row from here
            assert record.key is None and record.value is None, record
            for key, at in partitions.items():
                if at == record.partition:
                    versions[key].append((op, None))
            continue
        n = None if record.value is None else json.loads(record.value)["n"]
        versions.setdefault(record.key or b"", []).append((op, n))
        assert partitions.setdefault(record.key or b"", record.partition) == record.partition
    with _psycopg().connect(dsn) as conn:
        table = {str(k).encode(): n for k, n in conn.execute(f"SELECT id, n FROM {table}")}
    for key, runs in versions.items():
        last: int | None = None  # (None: no row)
        for op, n in runs:
            if op == b"r":
                assert reads_twice or last is None, (key, runs)
                assert last is None or (n is not None and n >= last), (key, runs)
            elif op == b"c":
                assert last is None and n == 0, (key, runs)
            elif op == b"u":  # (after a cut snapshot, a row's first record may be a change)
                assert n == last + 1 if last is not None else reads_twice, (key, runs)
            elif op == b"d":  # (after a cut snapshot, a row's first record may be its delete)
                assert last is not None or reads_twice, (key, runs)
            else:
                assert op == b"t", (key, runs)
            last = n
        assert last == table.get(key), (key, runs, table.get(key))
    assert {k for k, v in versions.items() if v[-1][1] is not None} == set(table)
    return ops


def _psycopg() -> Any:
    import psycopg

    return psycopg


def database_of(dsn: str, prefix: str) -> str:
    """A new database of its own (for one trial of a crash test): its connection string."""
    import time

    name = f"{prefix}_{time.monotonic_ns()}"
    with _psycopg().connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return dsn.rsplit("dbname=", 1)[0] + f"dbname={name}"


def items(dsn: str, rows: int, table: str = "items") -> None:
    """Make ``table (id int PRIMARY KEY, n int)`` with rows ``1..rows`` at ``n = 0``."""
    execute(dsn, f"CREATE TABLE {table} (id int PRIMARY KEY, n int)",
            f"INSERT INTO {table} SELECT g, 0 FROM generate_series(1, {rows}) g")  # fmt: skip


def execute(dsn: str, *statements: str) -> None:
    """Run ``statements`` in autocommit, each its own transaction."""
    with _psycopg().connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)
