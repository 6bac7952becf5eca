"""SIGKILL ``goka connect run`` of a change source while it snapshots a table of 200,000 rows and
while it streams, with a writer inserting, updating and deleting rows the whole time (single-row
transactions, each update counting the row's version), a second table of 50,000 rows (and a
writer of its own) added to the source half-way (read by a snapshot of its own, in chunks
beside the changes, under the same kills) and truncated later, the runs after that in another
configuration (chunk size, the exported snapshot's time); restarts until caught up; then for
both, each key's records are its versions in commit order (a read or an insert, then every
change once: no version skipped or repeated; a read never older than the record before it),
every position once, and the last equal to the table. A trial reads its snapshot in the
snapshot exported with the slot, or, with no time for that transaction, wholly in chunks
between watermarks.

``make test-slow`` plays seed 1 (about a minute); ``pytest -m longrun
tests/connect/test_postgres_snapshot_crash.py --crash-sequences 5`` plays a series from
``--crash-seed`` on, one line per trial.
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from goka.connect.positions import POSITION_HEADER
from goka.kafka.consumer import read_to_end

from ..spark.crash import crash_seeds, killed_run, killer
from .versions import Writer, check_runs, database_of

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow, pytest.mark.longrun]

psycopg = pytest.importorskip("psycopg")

ROWS = 200_000
SOURCES = """
from goka.connect import PostgresCdcSource

changes = PostgresCdcSource({dsn!r}, {tables!r}, slot={slot!r}, snapshot_chunk={chunk},
                            snapshot_transaction={transaction})
"""
MORE = 50_000  # the rows of the table added to the source half-way


def trial(seed: int, brokers: str, new_topic: Callable[..., str], dsn: str,
          work: Path) -> str:  # fmt: skip
    rng = random.Random(seed)
    topic, second = new_topic(partitions=3), new_topic(partitions=2)
    module = f"pg_snapshot_{seed}_{time.monotonic_ns()}"
    transaction = rng.choice([0, 600])  # (0: every chunk between watermarks)
    settings = {"dsn": dsn, "slot": f"snap_{seed}_{time.monotonic_ns()}",
                "chunk": rng.choice([5_000, 20_000]), "transaction": transaction}  # fmt: skip
    (work / f"{module}.py").write_text(SOURCES.format(tables={"public.items": topic},
                                                      **settings))  # fmt: skip
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table, rows in (("items", ROWS), ("more", MORE)):
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, n int)")
            conn.execute(f"INSERT INTO {table} SELECT g, 0 FROM generate_series(1, %s) g",
                         (rows,))  # fmt: skip
    writer, other = Writer(dsn, seed, ROWS + 1), Writer(dsn, seed + 1, MORE + 1, "more")
    command = [sys.executable, "-m", "goka", "connect", "run", f"{module}:changes",
               "--brokers", brokers, "--until-caught-up"]  # fmt: skip
    log: list[str] = []
    try:
        for number in range(8):
            last = number == 7
            if number == 3:  # (a table added to the source while it streams)
                (work / f"{module}.py").write_text(SOURCES.format(
                    tables={"public.items": topic, "public.more": second}, **settings))  # fmt: skip
            if number == 5:  # (its snapshot perhaps still in windows, its writer writing)
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("TRUNCATE more")
                # and the runs from here in another configuration: chunks, transaction time
                settings = {**settings, "chunk": 25_000 - settings["chunk"],
                            "transaction": 600 - settings["transaction"]}  # fmt: skip
                (work / f"{module}.py").write_text(SOURCES.format(
                    tables={"public.items": topic, "public.more": second}, **settings))  # fmt: skip
            if last:
                writer.close()
                other.close()

            outside = None if last else killer(rng, 0.5, 4.0)
            killed = killed_run(command, work, work / f"run-{number}.log", meanwhile=outside,
                                last=last, what=f"seed {seed} run {number}")  # fmt: skip
            log.append("killed" if killed else "caught up")
    finally:
        writer.close()
        other.close()
    ops = check_runs(brokers, topic, dsn, reads_twice=True)
    added = check_runs(brokers, second, dsn, reads_twice=True, table="more")
    assert added[b"r"] > 0 and added[b"t"] == 2, added  # (a truncate in each partition)
    records = [*read_to_end(brokers, topic, timeout=60), *read_to_end(brokers, second)]
    twice = sum(n - 1 for n in Counter(dict(r.headers)[POSITION_HEADER] for r in records).values())
    assert twice == 0, f"seed {seed}: {twice} positions twice ({'; '.join(log)}; logs: {work})"
    changes = sum(n for op, n in ops.items() if op != b"r")
    assert ops[b"r"] >= ROWS * 0.5 and changes <= writer.done, (ops, writer.done)
    with psycopg.connect(dsn, autocommit=True) as conn:  # (slots hold WAL: gone with the trial)
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     "WHERE database = current_database()")  # fmt: skip
    kills = log.count("killed")
    return (f"{ops[b'r']} reads, {changes} changes of {writer.done} written, then "
            f"{added[b'r']} reads of the table added and {sum(added.values()) - added[b'r']} "
            f"changes (a truncate), {kills} kills, transaction {transaction} s then {600 - transaction} s: {'; '.join(log)}")  # fmt: skip


def test_killed_snapshots_and_streams_give_each_version_once_in_order(
    brokers: str, new_topic: Callable[..., str], dsn: str,
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    for seed in crash_seeds(request):
        line = trial(seed, brokers, new_topic, database_of(dsn, f"snapshot{seed}"),
                     tmp_path_factory.mktemp(f"snap{seed}"))  # fmt: skip
        print(f"seed {seed}: {line}", flush=True)
