"""SIGKILL sink jobs (an upsert and an append PostgreSQL sink and a Parquet sink of one topic)
at random moments: after the COPY or the files staged, with the transaction open or the
manifest's entry committed before the files' moves, after the commit and before Spark's, or
from outside after a random delay; restarts with the checkpoint kept or lost, while more
records arrive; then the upsert table must equal the topic's last value per key (computed
here), the append table and the Parquet files (through the manifest and read as a plain
directory) must hold each record exactly once, and the offsets be the topic's ends.

The suite plays seed 1; ``pytest tests/connect/test_sink_crash.py --crash-sequences 10``
plays a series from ``--crash-seed`` on, one line per trial.
"""

from __future__ import annotations

import random
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.dataset as ds
import pytest

from goka import JsonCodec
from goka.connect import read_table
from goka.connect.manifest import Manifest
from goka.kafka.offsets import EndOffsets
from goka.storage.urls import filesystem

from ..helpers import produce
from ..spark.crash import crash_seeds, crash_storage, killed_run, killer
from .records import last_values

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow,
              pytest.mark.cost(75)]  # fmt: skip

ROOT = Path(__file__).resolve().parents[2]
POINTS = ("copy", "before-commit", "after-commit", "outside")


def items(n: int, rng: random.Random, start: int) -> list[tuple[str, Any]]:
    return [(f"user-{rng.randrange(80)}",
             None if rng.random() < 0.1 else {"clicks": rng.randrange(1000), "n": start + i})
            for i in range(n)]  # fmt: skip


def trial(seed: int, brokers: str, topic: str, dsn: str, work: Path,
          archive: str = "") -> tuple[int, list[str]]:  # fmt: skip
    """Play one trial (the Parquet archive in ``archive``, default ``work/archive``); return
    its kills and what its runs did."""
    archive = archive or str(work / "archive")
    rng = random.Random(seed)
    written: list[tuple[str, Any]] = []
    kills, log = 0, []
    for number in range(4):
        batch = items(rng.choice([300, 1_500]), rng, len(written))
        produce(brokers, topic, JsonCodec(), batch)
        written += batch
        last = number == 3 or (number > 0 and rng.random() < 0.25)
        if rng.random() < 0.3 and (work / "checkpoints").exists():
            shutil.rmtree(work / "checkpoints")  # the checkpoint lost: the database says
        args = ["--max-offsets", str(rng.choice([200, 800, 5_000])),
                "--chunk", str(rng.choice([100, 50_000])), "--rotate", str(rng.randrange(3))]  # fmt: skip
        point = None if last else rng.choice(POINTS)
        if point is not None and point != "outside":
            args += ["--kill", point, "--nth", str(rng.randint(1, 4)),
                     "--marker", str(work / f"killed-{number}")]  # fmt: skip
        command = [sys.executable, "-m", "tests.connect.crash_sink_run", brokers, topic, dsn,
                   str(work / "checkpoints"), archive, *args]  # fmt: skip

        outside = killer(rng, 3.0, 12.0) if point == "outside" else None
        killed = killed_run(command, ROOT, work / f"run-{number}.log", meanwhile=outside,
                            last=last, what=f"seed {seed} run {number} {args}")  # fmt: skip
        kills += killed
        log.append(f"{point or 'no kill'} {' '.join(args[:6])}: "
                   f"{'killed' if killed else 'caught up'}")  # fmt: skip
        if last:
            break
    runs = f"{'; '.join(log)}; logs: {work}"
    want = last_values(written)
    with psycopg.connect(dsn) as conn:
        got: dict[str, int] = dict(conn.execute("SELECT key, n FROM users").fetchall())
        appended = conn.execute(
            "SELECT count(*), count(DISTINCT (goka_partition, goka_offset)), count(*) FILTER "
            "(WHERE goka_deleted) FROM users_log").fetchone()  # fmt: skip
        offsets: dict[str, int] = dict(conn.execute("SELECT sink || '/' || partition, next_offset FROM "
                                    "goka_sink_offsets").fetchall())  # fmt: skip
    assert got == want, f"seed {seed}: upsert table differs ({runs})"
    tombstones = sum(1 for _, v in written if v is None)
    assert appended == (len(written), len(written), tombstones), (
        f"seed {seed}: append table {appended}, want {len(written)} rows ({runs})"
    )
    ends = EndOffsets(brokers, {})
    try:
        high = ends.high([(topic, p) for p in range(4)])
    finally:
        ends.close()
    assert offsets == {f"{s}/{p}": high[(topic, p)] for s in ("users", "users_log")
                       for p in range(4)}, f"seed {seed}: offsets ({runs})"  # fmt: skip
    every = sorted((p, o) for p in range(4) for o in range(high[(topic, p)]))
    assert len(every) == len(written)
    assert Manifest(archive).offsets() == {p: high[(topic, p)] for p in range(4)
                                           if high[(topic, p)]}, f"seed {seed}: manifest ({runs})"  # fmt: skip
    fs, root = filesystem(archive)
    fs.invalidate_cache()
    for name, table in (("manifest", read_table(archive)),
                        ("directory", ds.dataset(root, filesystem=fs, format="parquet",
                                                 partitioning="hive").to_table())):  # fmt: skip
        pairs = sorted(zip(table.column("goka_partition").to_pylist(),
                           table.column("goka_offset").to_pylist(), strict=True))  # fmt: skip
        assert pairs == every, f"seed {seed}: Parquet files through the {name} ({runs})"
        deleted = sum(table.column("goka_deleted").to_pylist())
        assert deleted == tombstones, f"seed {seed}: Parquet tombstones ({runs})"
    shutil.rmtree(work, ignore_errors=True)
    return kills, log


def test_killed_sink_jobs_end_with_exact_tables(
    brokers: str, new_topic: Callable[..., str], postgres_server: Any,
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    seeds = crash_seeds(request)
    storage = crash_storage(request, "archive")
    lines, total = [], 0
    for seed in seeds:
        dsn = _database(postgres_server, f"crash{seed}_{time.monotonic_ns()}")
        kills, log = trial(seed, brokers, new_topic(partitions=4), dsn,
                           tmp_path_factory.mktemp(f"sink{seed}"),
                           f"{storage}{seed}" if storage else "")  # fmt: skip
        total += kills
        lines.append(f"seed {seed}: {kills} kills: {'; '.join(log)}")
        print(lines[-1], flush=True)
    assert total > 0 or len(seeds) < 3, "no trial was killed"


def _database(server: Any, name: str) -> str:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return str(server.dsn).replace(f"dbname={server.database}", f"dbname={name}")
