"""SIGKILL the whole processor (driver, JVM, Python workers) at random moments and at named
points, restart it until it is caught up, and check the group table is exact.

Named points are reached through fault-injecting builders (``tests/spark/crash.py``): mid-produce,
after the flush, after the state commit, during a snapshot upload, during a restore. A killed run
often starts on a new state directory (a new machine), so partitions restore from snapshots; the
final run restarts where the last one was killed.

The suite runs three trials; ``pytest tests/spark/test_crash.py --crash-trials 12`` runs a longer
random series (``--crash-seed`` picks it) and prints one line per trial.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from goka import Int64Codec
from goka.kafka.consumer import read_to_end
from goka.view import View

from .crash import POINTS, kill_session
from .test_processor import clicks

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
EVENTS = 3_000


@dataclass
class Step:
    """One run of the processor: killed at ``point`` (its ``nth`` time, or after ``nth``
    seconds for ``timer``), on a new machine's state directory or the previous one."""

    point: str
    nth: float
    new_machine: bool = True


@dataclass
class Trial:
    name: str
    steps: list[Step]
    log: list[str] = field(default_factory=list)


def run(brokers: str, topic: str, state: Path, checkpoint: Path, step: Step | None,
        marker: Path) -> tuple[int, dict[str, Any] | None]:  # fmt: skip
    command = [sys.executable, "-m", "tests.spark.crash_run", brokers, topic, f"{topic}-g",
               str(state), str(checkpoint)]  # fmt: skip
    if step is not None and step.point != "timer":
        command += ["--kill", step.point, "--nth", str(int(step.nth)), "--marker", str(marker)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GOKA_LOG_LEVEL": "WARNING"}
    with subprocess.Popen(command, env=env, cwd=ROOT, start_new_session=True, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:  # fmt: skip
        try:
            timeout = step.nth if step is not None and step.point == "timer" else 600
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_session(process.pid)  # a random moment: the whole session, at once
            out, err = process.communicate()
    if process.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"processor exited with {process.returncode}:\n{err[-4000:]}")
    lines = out.strip().splitlines()
    return process.returncode, json.loads(lines[-1]) if process.returncode == 0 else None


def play(trial: Trial, brokers: str, new_topic: Callable[..., str], tmp_path: Path) -> int:
    """Run the trial's killed runs, then one that must catch up; return duplicate records."""
    topic = new_topic(partitions=2)
    sent = clicks(brokers, topic, EVENTS, users=200)
    machine = 0
    for number, step in enumerate(trial.steps):
        machine += step.new_machine
        marker = tmp_path / f"killed-{number}"
        code, result = run(
            brokers, topic, tmp_path / f"state-{machine}", tmp_path / "ckpt", step, marker
        )
        reached = code == -signal.SIGKILL
        trial.log.append(f"{step.point}#{step.nth:g}:{'killed' if reached else 'not reached'}")
        if step.point != "timer" and trial.name in FIXED_NAMES:
            assert reached and marker.read_text() == step.point, trial.log
    code, result = run(brokers, topic, tmp_path / f"state-{machine}", tmp_path / "ckpt", None,
                       tmp_path / "unused")  # fmt: skip  # restarted where it was killed
    assert code == 0 and result is not None
    trial.log.append(f"final stores {dict(result['stores'])}")
    with View(brokers, f"{topic}-g-table", Int64Codec()) as view:
        view.wait_recovered(60)
        assert dict(view.items()) == dict(sent), trial.log
    return sum(1 for _ in read_to_end(brokers, f"{topic}-g-table")) - EVENTS


FIXED = [
    Trial("killed during a snapshot upload", [Step("upload", 3)]),
    Trial("killed after a commit, then during the restore", [Step("commit", 3), Step("restore", 1)]),
    Trial("killed at a random moment", [Step("timer", random.uniform(12, 22))]),
]  # fmt: skip
FIXED_NAMES = {t.name for t in FIXED[:2]}


@pytest.mark.parametrize("trial", FIXED, ids=["upload", "commit-restore", "random-moment"])
def test_sigkill_then_restarts_leave_an_exact_table(
    trial: Trial, brokers: str, new_topic: Callable[..., str], tmp_path: Path, record_property: Any
) -> None:
    duplicates = play(trial, brokers, new_topic, tmp_path)
    record_property("duplicate_table_records", duplicates)
    print(f"\n{trial.name}: {' -> '.join(trial.log)}; {duplicates} duplicate table records")
    assert duplicates >= 0


def test_random_crash_series(
    request: pytest.FixtureRequest, brokers: str, new_topic: Callable[..., str],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:  # fmt: skip
    count = request.config.getoption("--crash-trials")
    if not count:
        pytest.skip("a long series: run with --crash-trials N")
    rng = random.Random(request.config.getoption("--crash-seed"))
    results: list[int] = []
    for number in range(2 * count):  # trials whose kills were all missed do not count
        if len(results) == count:
            break
        trial = random_trial(rng, f"trial {number + 1}")
        duplicates = play(trial, brokers, new_topic, tmp_path_factory.mktemp(f"trial{number}"))
        killed = all(entry.endswith(":killed") for entry in trial.log[:-1])
        if killed:
            results.append(duplicates)
        print(
            f"\n{trial.name}: {' -> '.join(trial.log)}; {duplicates} duplicate table records"
            f"{'' if killed else ' (a kill point was not reached: not counted)'}",
            flush=True,
        )
    print(f"\n{len(results)} killed trials, every table exact; duplicates per trial: {results}")
    assert len(results) == count


def random_trial(rng: random.Random, name: str) -> Trial:
    """One or two killed runs: the first at a point every run reaches (or a random moment);
    a second, on a new machine, may be killed while it restores, so then the first is killed
    late enough for a snapshot to have been published."""
    second = rng.choice(("restore", "restore", "produce", "commit", "timer", None, None, None))
    first = rng.choice(("produce", "flush", "commit", "upload", "timer", "timer"))
    steps = [_random_step(rng, first, new_machine=rng.random() < 0.7, late=second == "restore")]
    if second is not None:
        steps.append(_random_step(rng, second, new_machine=True, late=False))
    return Trial(name, steps)


def _random_step(rng: random.Random, point: str, *, new_machine: bool, late: bool) -> Step:
    assert point in (*POINTS, "timer")
    if point == "timer":
        return Step(point, rng.uniform(16 if late else 10, 24), new_machine)
    if point in ("restore", "upload"):
        return Step(point, 2 if late else 1, new_machine)
    return Step(point, rng.randint(3, 6) if late else rng.randint(1, 3), new_machine)
