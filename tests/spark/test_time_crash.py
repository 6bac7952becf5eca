"""SIGKILL a timed group (windows with final results, stream timers, a TTL) while windows close
and timers fire, in trials of runs (micro-batch or continuous, rate-limited, with a fire budget
of 2 or the default, killed mid-produce, after a flush or after a commit, on the same or a new
machine) until a last run catches up; then the group table, the window table and the final
results must equal the tester's over the same records: **no final result twice or lost**.
Under at-least-once timer outputs are ordinary emits: their duplicates are reported per trial;
under exactly-once (a window table's and the timers' changelogs written once per key and
commit, kills also after a transaction's commit) a ``read_committed`` reader finds none.

The suite plays seed 1 under exactly-once with 64 records of a partition in flight (each
awaiting 0-4 ms: they finish in a random order) and 404 under at-least-once one at a time;
``pytest tests/spark/test_time_crash.py --crash-sequences 10 [--crash-concurrency 64]`` plays
a series of trials from seed ``--crash-seed`` on, odd seeds under exactly-once, one line per
trial (replay one with ``--crash-seed SEED --crash-sequences 1``).
"""

from __future__ import annotations

import random
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from goka import JsonCodec

from ..helpers import produce
from .crash import killed_run
from .timed import events, read_topic, reference, timed_graph, timed_wrong

pytestmark = [pytest.mark.cost(130), pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def trial(seed: int, brokers: str, topic: str, work: Path, guarantee: str,
          concurrency: int = 1) -> tuple[int, int, list[str]]:  # fmt: skip
    """Play one trial (its group's records ``concurrency`` in flight, awaiting 0-4 ms each);
    return its kills, its duplicate timer outputs and what its runs did."""
    rng = random.Random(seed)
    graph = timed_graph(topic)
    items = events(1_500, keys=25, seed=seed)
    produce(brokers, topic, JsonCodec(), items)
    kills, log, machine = 0, [], 0
    budgets = random.Random(-seed)  # apart from rng: the seeds' sequences stay as they were
    for number in range(4):
        last = number == 3 or (number > 0 and rng.random() < 0.3)
        if rng.random() < 0.3:
            machine += 1  # a new machine: the stores are rebuilt or restored
        mode = rng.choice(["available-now", "continuous"])
        args = [
            "--mode",
            mode,
            "--max-offsets",
            str(rng.choice([100, 400, 2000])),
            "--fire-budget",
            str(budgets.choice([2, 10_000])),
            "--guarantee",
            guarantee,
            "--concurrency",
            str(concurrency),
        ]  # 2: slices everywhere
        if not last:
            point = rng.choice(["produce", "flush", "commit"])
            if guarantee == "exactly-once" and rng.random() < 0.3:
                point = "transaction"
            nth = rng.randint(1, 400) if point == "produce" else rng.randint(1, 3)
            args += ["--kill", point, "--nth", str(nth),
                     "--marker", str(work / f"killed-{number}")]  # fmt: skip
        command = [sys.executable, "-m", "tests.spark.crash_time_run", brokers, topic,
                   str(work / f"machine-{machine}"), str(work / "checkpoint"), *args]  # fmt: skip
        killed = killed_run(command, ROOT, work / f"run-{number}.log", last=last,
                            what=f"seed {seed} run {number} {args}")  # fmt: skip
        kills += killed
        log.append(f"{mode} machine {machine} budget {args[5]} {' '.join(args[10:12])}: "
                   f"{'killed' if killed else 'caught up'}")  # fmt: skip
        if last:
            break
    else:  # every run was killed: one more, to the end
        raise AssertionError("unreachable: the fourth run is always the last")
    runs = f"{'; '.join(log)}; their logs and stores: {work}"
    expected = reference(graph, topic, items, partitions=4)
    wrong = timed_wrong(graph, brokers, topic, expected, guarantee == "exactly-once")
    assert not wrong, f"seed {seed} ({runs}): " + "; ".join(wrong)
    quiet = Counter(r.value for r in expected.messages("quiet-" + topic))
    found = Counter(v for _, v, _ in read_topic(brokers, "quiet-" + topic))
    shutil.rmtree(work, ignore_errors=True)
    return kills, sum((found - quiet).values()), log


def test_killed_timed_groups_end_with_exact_windows_and_final_results_once(
    brokers: str, new_topic: Callable[..., str], tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    count = request.config.getoption("--crash-sequences")
    first = request.config.getoption("--crash-seed")
    # the suite: seed 1, and 404 (a continuous run after a killed rate-limited micro-batch
    # run after a killed continuous one, on new machines: it found four defects, the last
    # one final results lost to outbox deletions that landed without them; final results
    # have no outbox since: they are read back from the store behind a delivered watermark)
    # (seed 1 with 64 records in flight: windows, timers and TTLs of records released in
    # offset order, slices cut by the fire budget and the kills)
    concurrency = request.config.getoption("--crash-concurrency")
    seeds = list(range(first, first + count)) if count else [1, 404]
    lines, all_kills, duplicates = [], [], []
    for seed in seeds:
        guarantee = "exactly-once" if seed % 2 else "at-least-once"
        flight = concurrency if count else 64 if seed == 1 else 1
        kills, extra, log = trial(seed, brokers, new_topic(partitions=4),
                                  tmp_path_factory.mktemp(f"time{seed}"), guarantee,
                                  flight)  # fmt: skip
        all_kills.append(kills)
        duplicates.append(extra)
        lines.append(f"seed {seed} ({guarantee}, concurrency {flight}): {kills} kills, {extra} "
                     f"duplicate timer outputs: {'; '.join(log)}")  # fmt: skip
        print(f"\n{lines[-1]}", flush=True)
    print(f"\n{len(seeds)} trials, every one exact with each final result once: kills per trial "
          f"{all_kills}; duplicate timer outputs per trial {duplicates}")  # fmt: skip
    assert sum(all_kills) >= 1  # the series killed something, or it shows nothing
