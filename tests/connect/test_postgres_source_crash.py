"""SIGKILL ``goka connect run`` of the PostgreSQL sources at random moments (records buffered in
the producer, a query's rows half produced, the change slot not yet advanced) while rows are
inserted, updated, deleted and re-keyed between runs; restarts until caught up; then the
query source's topic holds every row once, and the change source's topics hold every change
once (each position once, as many records as changes made here) and end equal to the tables.

The suite plays seed 1; ``pytest tests/connect/test_postgres_source_crash.py
--crash-sequences 10`` plays a series from ``--crash-seed`` on, one line per trial.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from goka.connect.positions import POSITION_HEADER
from goka.kafka.consumer import read_to_end

from ..spark.crash import crash_seeds, killed_run, killer, run_killable
from .versions import database_of

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

psycopg = pytest.importorskip("psycopg")

SOURCES = """
from goka.connect import PostgresCdcSource, PostgresSource

rows = PostgresSource({dsn!r}, {rows!r}, table="items", incrementing_column="id", key="owner",
                      batch={batch})
changes = PostgresCdcSource({dsn!r}, {{"public.accounts": {changes!r}}}, batch={batch},
                            slot={slot!r})
"""


def change(rng: random.Random, conn: Any, state: dict[int, int], made: list[int],
           first: int) -> int:  # fmt: skip
    """Random transactions on ``accounts`` (``state``: id -> n, kept equal to it); count the
    records they must give in ``made``; return the next new id."""
    for _ in range(rng.randint(2, 6)):
        with conn.transaction():
            kind = rng.choice(["insert", "insert", "update", "delete", "rekey"])
            if kind == "insert" or not state:
                count = rng.randint(100, 3_000)
                conn.execute("INSERT INTO accounts SELECT g, 0 FROM generate_series(%s::int, %s::int) g",
                             (first, first + count - 1))  # fmt: skip
                state.update(dict.fromkeys(range(first, first + count), 0))
                made[0] += count
                first += count
            elif kind == "update":
                chosen = rng.sample(sorted(state), min(len(state), rng.randint(1, 500)))
                conn.execute("UPDATE accounts SET n = n + 1 WHERE id = ANY(%s)", (chosen,))
                for key in chosen:
                    state[key] += 1
                made[0] += len(chosen)
            elif kind == "delete":
                chosen = rng.sample(sorted(state), min(len(state), rng.randint(1, 200)))
                conn.execute("DELETE FROM accounts WHERE id = ANY(%s)", (chosen,))
                for key in chosen:
                    del state[key]
                made[0] += len(chosen)
            else:
                old = rng.choice(sorted(state))
                conn.execute("UPDATE accounts SET id = %s WHERE id = %s", (first, old))
                state[first] = state.pop(old)
                made[0] += 2  # a tombstone of the old key, then the row
                first += 1
    return first


def trial(seed: int, brokers: str, new_topic: Callable[..., str], dsn: str,
          work: Path) -> str:  # fmt: skip
    rng = random.Random(seed)
    rows, changes = new_topic(partitions=4), new_topic(partitions=3)
    module = f"pg_sources_{seed}_{time.monotonic_ns()}"
    (work / f"{module}.py").write_text(SOURCES.format(
        dsn=dsn, rows=rows, changes=changes, slot=f"crash_{seed}_{time.monotonic_ns()}",
        batch=rng.choice([500, 5_000])))  # fmt: skip
    state: dict[int, int] = {}
    made, items, first, log = [0], 0, 1, []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id bigserial PRIMARY KEY, owner text)")
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, n int)")
        command = [sys.executable, "-m", "goka", "connect", "run", f"{module}:changes",
                   "--brokers", brokers, "--until-caught-up"]  # fmt: skip
        code, err = run_killable(command, work, work / "slot.log")  # the slot: changes from here
        assert code == 0, err[-4000:]
        for number in range(6):
            count = rng.choice([1_000, 10_000, 40_000])
            conn.execute("INSERT INTO items (owner) SELECT 'o' || (g %% 97) FROM "
                         "generate_series(1, %s::int) g", (count,))  # fmt: skip
            items += count
            first = change(rng, conn, state, made, first)
            last = number == 5
            for name in ("rows", "changes"):
                command = [sys.executable, "-m", "goka", "connect", "run", f"{module}:{name}",
                           "--brokers", brokers, "--until-caught-up"]  # fmt: skip

                outside = None if last else killer(rng, 0.5, 2.0)
                killed = killed_run(command, work, work / f"{name}-{number}.log",
                                    meanwhile=outside, last=last,
                                    what=f"seed {seed} {name} run {number}")  # fmt: skip
                log.append(f"{name} {'killed' if killed else 'caught up'}")
    got = Counter(int(json.loads(r.value or b"")["id"]) for r in read_to_end(brokers, rows))
    assert got == Counter(range(1, items + 1)), (
        f"seed {seed}: rows {sum((got - Counter(range(1, items + 1))).values())} extra, "
        f"{items - len(got)} missing ({'; '.join(log)}; logs: {work})"
    )  # fmt: skip
    records = list(read_to_end(brokers, changes))
    positions = Counter(dict(r.headers)[POSITION_HEADER] for r in records)
    twice = sum(n - 1 for n in positions.values())
    assert twice == 0 and len(records) == made[0], (
        f"seed {seed}: {len(records)} change records for {made[0]} changes, {twice} "
        f"positions twice ({'; '.join(log)}; logs: {work})"
    )  # fmt: skip
    final = {int(r.key or b"0"): None if r.value is None else json.loads(r.value)["n"]
             for r in records}  # fmt: skip
    assert {k: v for k, v in final.items() if v is not None} == state, f"seed {seed}: tables differ"
    with psycopg.connect(dsn, autocommit=True) as conn:  # (slots hold WAL: gone with the trial)
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     "WHERE database = current_database()")  # fmt: skip
    kills = sum("killed" in line for line in log)
    return f"{items} rows, {made[0]} changes, {kills} kills: {'; '.join(log)}"


def test_killed_postgres_sources_produce_each_row_and_change_once(
    brokers: str, new_topic: Callable[..., str], dsn: str,
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    seeds = crash_seeds(request)
    kills = 0
    for seed in seeds:
        line = trial(seed, brokers, new_topic, database_of(dsn, f"crash{seed}"),
                     tmp_path_factory.mktemp(f"pg{seed}"))  # fmt: skip
        kills += int(line.split(" kills")[0].rsplit(" ", 1)[1])
        print(f"seed {seed}: {line}", flush=True)
    assert kills > 0, "no run was killed"
