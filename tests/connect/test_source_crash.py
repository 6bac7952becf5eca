"""SIGKILL ``goka connect run`` of a file source at random moments (records buffered in the
producer, files half read) while more files arrive (JSON lines, CSV, Parquet), with a
transform that flat-maps some rows, or with none (JSON lines then go out as read, by the
reader's own loop), and a dead-letter topic for bad rows; restarts until caught up; then
every row of every file must be in the topic exactly once (and every bad row in the
dead-letter topic once), computed here from the files written.

The suite plays seed 1 both ways; ``pytest tests/connect/test_source_crash.py --crash-sequences 10``
plays a series from ``--crash-seed`` on, one line per trial.
"""

from __future__ import annotations

import csv
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from goka.kafka.consumer import read_to_end
from goka.storage.urls import filesystem

from ..spark.crash import crash_seeds, crash_storage, killed_run, killer

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

SOURCES = """
from goka.connect import FileSource


def split(record):
    if int(record["id"]) % 7 == 0:
        return [{{**record, "part": n}} for n in range(3)]
    return record


source = FileSource({path!r}, {topic!r}, key="user", transform={transform},
                    on_error="dead-letter", dead_letter={dead!r})
"""


def drop_file(rng: random.Random, directory: Path, number: int, first: int) -> tuple[int, int]:
    """A file of a random format and size, written whole (moved into place); return the ids
    it holds and its bad rows."""
    rows = rng.choice([500, 3_000, 12_000])
    kind = rng.choice(["jsonl", "csv", "parquet"])
    records = [{"id": first + i, "user": f"u{rng.randrange(50)}"} for i in range(rows)]
    staged = directory / f".{number:04d}.{kind}"
    bad = 0
    if kind == "jsonl":
        lines = []
        for record in records:
            if rng.random() < 0.002:
                lines.append('{"id": broken')
                bad += 1
            lines.append(json.dumps(record))
        staged.write_text("\n".join(lines) + "\n")
    elif kind == "csv":
        with open(staged, "w", newline="") as out:
            writer = csv.DictWriter(out, ["id", "user"])
            writer.writeheader()
            writer.writerows(records)
    else:
        pq.write_table(pa.Table.from_pylist(records), staged)
    os.utime(staged, ns=(time.time_ns(), 1_000_000_000_000 + number * 1_000_000_000))
    staged.rename(directory / f"{number:04d}.{kind}")
    return rows, bad


def trial(seed: int, brokers: str, new_topic: Callable[..., str], work: Path,
          transform: bool, storage: str = "") -> list[str]:  # fmt: skip
    """Play one trial; the source reads ``storage`` (an ``s3://`` prefix each file is uploaded
    to once written) or the local folder the files are written to."""
    rng = random.Random(seed)
    topic, dead = new_topic(partitions=4), new_topic(partitions=2)
    incoming = work / "incoming"
    incoming.mkdir(parents=True)
    module = f"sources_{seed}_{time.monotonic_ns()}"
    (work / f"{module}.py").write_text(
        SOURCES.format(
            path=storage or str(incoming),
            topic=topic,
            dead=dead,
            transform="split" if transform else None,
        )
    )
    ids, bad, files, log = 0, 0, 0, []
    for number in range(5):
        for _ in range(rng.randint(1, 3)):
            rows, broken = drop_file(rng, incoming, files, ids)
            if storage:  # (one put: the object appears whole)
                (dropped,) = incoming.glob(f"{files:04d}.*")
                fs, prefix = filesystem(storage)
                fs.put_file(str(dropped), f"{prefix}/{dropped.name}")
            ids, bad, files = ids + rows, bad + broken, files + 1
        last = number == 4
        command = [sys.executable, "-m", "goka", "connect", "run", f"{module}:source",
                   "--brokers", brokers, "--until-caught-up"]  # fmt: skip

        outside = None if last else killer(rng, 0.3, 2.5)
        killed = killed_run(command, work, work / f"run-{number}.log", meanwhile=outside,
                            last=last, what=f"seed {seed} run {number}")  # fmt: skip
        log.append("killed" if killed else "caught up")
    counted: Counter[tuple[int, int | None]] = Counter()
    for record in read_to_end(brokers, topic, timeout=60):
        value = json.loads(record.value or b"")
        counted[(int(value["id"]), value.get("part"))] += 1
    expected = Counter({(i, p): 1 for i in range(ids)
                        for p in ((0, 1, 2) if transform and i % 7 == 0 else (None,))})  # fmt: skip
    assert counted == expected, (
        f"seed {seed}: {sum((counted - expected).values())} extra, "
        f"{sum((expected - counted).values())} missing ({'; '.join(log)}; logs: {work})"
    )  # fmt: skip
    letters = list(read_to_end(brokers, dead, timeout=60))
    assert len(letters) == bad, f"seed {seed}: {len(letters)} dead letters, want {bad}"
    return [f"{files} files, {ids} rows, {bad} bad: {'; '.join(log)}"]


@pytest.mark.parametrize("transform", [True, False], ids=["transform", "as-read"])
def test_killed_file_sources_produce_each_row_once(
    transform: bool, brokers: str, new_topic: Callable[..., str],
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    seeds = crash_seeds(request)
    storage = crash_storage(request, "incoming")
    kills = 0
    for seed in seeds:
        lines = trial(seed, brokers, new_topic, tmp_path_factory.mktemp(f"source{seed}"),
                      transform, f"{storage}-{seed}-{transform}" if storage else "")  # fmt: skip
        kills += lines[0].count("killed")
        print(f"seed {seed}: {lines[0]}", flush=True)
    assert kills > 0, "no run was killed"
