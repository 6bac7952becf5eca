"""What the exactly-once Spark tests share: a click count that tells, for every click, which
input record it was (``tests/spark/crash_run.py --tell``), run until caught up, and what a
``read_committed`` reader finds afterwards."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from goka import Int64Codec, StringCodec

from .crash import run_killable
from .timed import topic_rows

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS, CLICKS, USERS = 2, 1_200, 30


def run_told(brokers: str, topic: str, tmp_path: Path, guarantee: str, *extra: str,
         mode: str = "available-now") -> str:  # fmt: skip
    command = [sys.executable, "-m", "tests.spark.crash_run", brokers, topic, f"{topic}-g",
               str(tmp_path / "state"), str(tmp_path / "checkpoint"), "--mode", mode,
               "--max-offsets", "200", "--snapshot-interval", "0", "--guarantee", guarantee,
               "--tell", f"{topic}-seen", *extra]  # fmt: skip
    code, err = run_killable(command, ROOT, tmp_path / f"run{len(list(tmp_path.glob('run*')))}")
    if not extra:
        assert code == 0, err[-3000:]
    return err


def killed_then_caught_up(brokers: str, topic: str, tmp_path: Path, guarantee: str,
                           kill: str, mode: str = "available-now",
                           ) -> tuple[Counter[tuple[int, int]], dict[str, int]]:  # fmt: skip
    """Kill a run in ``mode`` at ``kill``, catch up; return :func:`told_of`."""
    marker = tmp_path / "killed"
    nth = "3" if mode == "available-now" else "1"  # (an epoch may read the input at once)
    run_told(brokers, topic, tmp_path, guarantee, "--kill", kill, "--nth", nth,
         "--marker", str(marker), mode=mode)  # fmt: skip
    assert marker.exists(), f"the run was not killed at {kill}"
    run_told(brokers, topic, tmp_path, guarantee)
    return told_of(brokers, topic)


def told_of(brokers: str, topic: str) -> tuple[Counter[tuple[int, int]], dict[str, int]]:
    """How often each input record was told, and the table's counts (both read committed)."""
    told = Counter(
        tuple(int(x) for x in (row[3] or b"").decode().split())
        for rows in topic_rows(brokers, f"{topic}-seen", PARTITIONS).values() for row in rows
    )  # fmt: skip
    table: dict[str, int] = {}
    for rows in topic_rows(brokers, f"{topic}-g-table", PARTITIONS).values():
        for row in rows:
            table[StringCodec().decode(row[2])] = Int64Codec().decode(row[3])
    return told, table  # type: ignore[return-value]


def inputs_of(brokers: str, topic: str) -> tuple[set[tuple[int, int]], dict[str, int]]:
    """Every input record's (partition, offset), and the clicks per user."""
    places, counts = set(), Counter[str]()
    for partition, rows in topic_rows(brokers, topic, PARTITIONS).items():
        for row in rows:
            places.add((partition, row[1]))
            counts[StringCodec().decode(row[2])] += 1
    return places, dict(counts)
