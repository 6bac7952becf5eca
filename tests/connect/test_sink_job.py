"""Sinks as Spark jobs on the embedded broker, a real PostgreSQL server and real files: the
table equals the topic's last value per key after each run; a run with a lost checkpoint
resumes from the database's offsets or the Parquet manifest (reads nothing again); a
checkpoint behind the target replays records that are left out (nothing twice, in upsert and
append mode and in the Parquet files alike)."""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from goka import JsonCodec
from goka.connect import ParquetSink, PostgresSink, read_table
from goka.kafka.offsets import EndOffsets
from goka.spark.sink import SinkJob

from ..helpers import produce
from .records import last_values

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow,
              pytest.mark.cost(65)]  # fmt: skip


def items(n: int, seed: int) -> list[tuple[str, Any]]:
    rng = random.Random(seed)
    return [(f"user-{rng.randrange(60)}",
             None if rng.random() < 0.1 else {"clicks": rng.randrange(1000), "n": i})
            for i in range(n)]  # fmt: skip


def table(dsn: str, name: str = "users") -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute(f"SELECT key, n FROM {name}").fetchall())


def ends(brokers: str, topic: str) -> dict[int, int]:
    offsets = EndOffsets(brokers, {})
    try:
        return {p: o for (_, p), o in offsets.high([(topic, p) for p in range(4)]).items()}
    finally:
        offsets.close()


def test_a_sink_job_resumes_from_the_database_with_or_without_its_checkpoint(
    spark: Any, brokers: str, new_topic: Callable[..., str], dsn: str, tmp_path: Path
) -> None:
    topic = new_topic(partitions=4)
    upserts = PostgresSink(topic, JsonCodec(), dsn, table="users")
    log = PostgresSink(topic, JsonCodec(), dsn, table="users_log", mode="append")
    archive = ParquetSink(topic, JsonCodec(), str(tmp_path / "archive"), max_file_records=300)
    jobs = [SinkJob(s, brokers, spark=spark, checkpoint_dir=tmp_path / s.name,
                    max_offsets_per_trigger=700) for s in (upserts, log, archive)]  # fmt: skip
    written = items(2_000, seed=1)
    produce(brokers, topic, JsonCodec(), written)
    for job in jobs:
        run = job.run_until_caught_up(timeout=240)
        assert run.records == 2_000 and run.already == 0 and run.batches >= 2
        assert job.offsets() == ends(brokers, topic)
    assert table(dsn) == last_values(written)

    more = items(1_000, seed=2)  # the checkpoint lost: the database says where to resume
    produce(brokers, topic, JsonCodec(), more)
    for job in jobs:
        shutil.rmtree(job.checkpoint_dir)
        run = job.run_until_caught_up(timeout=240)
        assert run.records == 1_000 and run.already == 0  # nothing read again
    assert table(dsn) == last_values(written + more)

    kept = {j.sink.name: tmp_path / f"{j.sink.name}-kept" for j in jobs}
    for job in jobs:  # a checkpoint behind the database: its batches replay, nothing twice
        shutil.copytree(job.checkpoint_dir, kept[job.sink.name])
    last = items(500, seed=3)
    produce(brokers, topic, JsonCodec(), last)
    for job in jobs:
        job.run_until_caught_up(timeout=240)
        shutil.rmtree(job.checkpoint_dir)
        shutil.copytree(kept[job.sink.name], job.checkpoint_dir)
        run = job.run_until_caught_up(timeout=240)
        assert run.records == 500 and run.already == 500
        assert job.offsets() == ends(brokers, topic)
    everything = written + more + last
    assert table(dsn) == last_values(everything)
    with psycopg.connect(dsn) as conn:
        appended = conn.execute("SELECT count(*), count(DISTINCT (goka_partition, goka_offset)),"
                                " count(*) FILTER (WHERE goka_deleted) FROM users_log").fetchone()  # fmt: skip
    assert appended == (3_500, 3_500, sum(1 for _, v in everything if v is None))
    files = read_table(str(tmp_path / "archive"))
    high = ends(brokers, topic)
    assert sorted(zip(files.column("goka_partition").to_pylist(),
                      files.column("goka_offset").to_pylist(), strict=True)) == sorted(
        (p, o) for p in range(4) for o in range(high[p]))  # fmt: skip


@pytest.mark.smoke
def test_goka_connect_runs_a_sink_and_reports_its_offsets(
    brokers: str, new_topic: Callable[..., str], dsn: str, tmp_path: Path
) -> None:
    import json
    import os
    import subprocess
    import sys

    topic = new_topic(partitions=4)
    written = items(800, seed=4)
    produce(brokers, topic, JsonCodec(), written)
    (tmp_path / "mysinks.py").write_text(
        "from goka import JsonCodec\nfrom goka.connect import PostgresSink\n"
        f"users = PostgresSink({topic!r}, JsonCodec(), {dsn!r}, table='users')\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{Path.cwd()}",
           "GOKA_BROKERS": brokers, "GOKA_CHECKPOINT": str(tmp_path / "checkpoint")}  # fmt: skip

    def goka(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "goka", "connect", *args, "mysinks:users"],
                              env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    assert "lag 800" in goka("status")
    assert "800 records" in goka("run", "--until-caught-up")
    assert table(dsn) == last_values(written)
    assert json.loads(goka("offsets", "--json")) == {
        str(p): o for p, o in ends(brokers, topic).items()
    }
    status = json.loads(goka("status", "--json"))
    assert [p["lag"] for p in status["partitions"]] == [0, 0, 0, 0]
    assert "pass --yes" in goka("reset")
    goka("reset", "--yes")
    assert json.loads(goka("offsets", "--json")) == {}
    assert not (tmp_path / "checkpoint").exists()


def test_a_sink_job_sends_refused_records_to_its_dead_letter_topic_once(
    spark: Any, brokers: str, new_topic: Callable[..., str], dsn: str, tmp_path: Path
) -> None:
    from goka.kafka.consumer import read_to_end

    topic, dead = new_topic(partitions=4), new_topic(partitions=4)
    sink = PostgresSink(topic, JsonCodec(), dsn, table="users", on_error="dead-letter",
                        dead_letter=dead)  # fmt: skip
    good = items(600, seed=3)
    bad = [(f"user-{i}", {"clicks": "many", "n": i}) for i in range(40)]  # bigint: no str
    produce(brokers, topic, JsonCodec(), good[:300])  # the column is bigint from here
    job = SinkJob(sink, brokers, spark=spark, checkpoint_dir=tmp_path / "checkpoint")
    job.run_until_caught_up()
    produce(brokers, topic, JsonCodec(), bad + good[300:])
    totals = job.run_until_caught_up()
    shutil.rmtree(tmp_path / "checkpoint")  # a lost checkpoint: the database says where
    SinkJob(
        sink, brokers, spark=spark, checkpoint_dir=tmp_path / "checkpoint"
    ).run_until_caught_up()
    letters = list(read_to_end(brokers, dead, timeout=30))
    assert totals.dead_lettered == 40
    assert sorted(int((r.key or b"").split(b"-")[1]) for r in letters) == list(range(40))
    assert table(dsn) == last_values(good)
