"""SIGKILL the whole processor (driver, JVM, Python workers) at random moments and at named
points, restart it until it is caught up, and check the group table is exact.

Named points are reached through fault-injecting builders (``tests/spark/crash.py``): mid-produce,
after the flush, after the state commit, during a snapshot upload, during a restore. A killed run
often starts on a new state directory (a new machine), so partitions restore from snapshots; the
final run restarts where the last one was killed.

Continuous trials run the processor in continuous mode while clicks flow at a steady rate: it is
killed mid-epoch (at a random moment or a named point), restarted, and the last run is stopped
with SIGTERM once the table is exact.

The suite runs four trials; ``pytest tests/spark/test_crash.py --crash-trials 12`` runs a longer
random series (``--crash-seed`` picks it, ``--crash-mode continuous`` makes it continuous) and
prints one line per trial.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from goka import Int64Codec, StringCodec
from goka.emitter import Emitter
from goka.kafka.consumer import read_to_end
from goka.view import View

from ..helpers import wait_for
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
    mode: str = "micro-batch"
    log: list[str] = field(default_factory=list)


class Flow:
    """Clicks emitted at ``rate`` per second on a thread until :meth:`stop` (continuous trials)."""

    def __init__(self, brokers: str, topic: str, rate: int = 200) -> None:
        self.brokers, self.topic, self.rate = brokers, topic, rate
        self.sent: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        rng, began, count = random.Random(7), time.monotonic(), 0
        with Emitter(self.brokers, self.topic, StringCodec()) as emitter:
            while not self._stop.is_set():
                user = f"user-{rng.randrange(200)}"
                emitter.emit(user, "/page")
                self.sent[user] += 1
                count += 1
                self._stop.wait(max(0.0, began + count / self.rate - time.monotonic()))
            assert emitter.flush(60) == 0

    def stop(self) -> Counter[str]:
        """Stop emitting; return what was sent (every click acknowledged)."""
        self._stop.set()
        self._thread.join(90)
        assert not self._thread.is_alive()
        return self.sent


def run(brokers: str, topic: str, state: Path, checkpoint: Path, step: Step | None, marker: Path,
        mode: str = "micro-batch", until: Callable[[subprocess.Popen[str]], None] | None = None,
        ) -> tuple[int, dict[str, Any] | None]:  # fmt: skip
    """Run the processor once: killed as ``step`` says, or (continuous, no step) stopped with
    SIGTERM once ``until()`` returned."""
    command = [sys.executable, "-m", "tests.spark.crash_run", brokers, topic, f"{topic}-g",
               str(state), str(checkpoint), "--mode", mode]  # fmt: skip
    if step is not None and step.point != "timer":
        command += ["--kill", step.point, "--nth", str(int(step.nth)), "--marker", str(marker)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GOKA_LOG_LEVEL": "WARNING"}
    with subprocess.Popen(command, env=env, cwd=ROOT, start_new_session=True, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:  # fmt: skip
        if until is not None:
            try:
                until(process)
            except AssertionError as exc:
                kill_session(process.pid)
                err = process.communicate()[1]
                raise AssertionError(f"{exc}\nthe processor's log ends:\n{err[-6000:]}") from exc
            process.send_signal(signal.SIGTERM)  # the epoch ends, the query stops
        try:
            timeout = step.nth if step is not None and step.point == "timer" else 600
            if step is not None and mode == "continuous":
                timeout = min(timeout, 120)  # a point not reached: killed at this moment
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_session(process.pid)  # a random moment: the whole session, at once
            out, err = process.communicate()
    if process.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"processor exited with {process.returncode}:\n{err[-4000:]}")
    lines = out.strip().splitlines()
    return process.returncode, json.loads(lines[-1]) if process.returncode == 0 else None


def play(trial: Trial, brokers: str, new_topic: Callable[..., str], tmp_path: Path) -> int:
    """Run the trial's killed runs, then one that must catch up; return duplicate records.

    Micro-batch trials process a fixed backlog; continuous ones process clicks flowing while
    they run and are killed, and the last run is stopped once its table is exact."""
    topic = new_topic(partitions=2)
    continuous = trial.mode == "continuous"
    flow = Flow(brokers, topic) if continuous else None
    sent = Counter[str]() if flow is not None else clicks(brokers, topic, EVENTS, users=200)
    machine = 0
    for number, step in enumerate(trial.steps):
        machine += step.new_machine
        marker = tmp_path / f"killed-{number}"
        code, result = run(brokers, topic, tmp_path / f"state-{machine}", tmp_path / "ckpt",
                           step, marker, trial.mode)  # fmt: skip
        reached = code == -signal.SIGKILL and (step.point == "timer" or marker.exists())
        trial.log.append(f"{step.point}#{step.nth:g}:{'killed' if reached else 'not reached'}")
        if step.point != "timer" and trial.name in FIXED_NAMES:
            assert reached and marker.read_text() == step.point, trial.log
    table = f"{topic}-g-table"
    with View(brokers, table, Int64Codec()) as view:

        def exact(process: subprocess.Popen[str]) -> None:  # clicks flow on a while, then stop
            assert flow is not None
            time.sleep(5)  # how long they flow on, not a synchronisation
            sent.update(flow.stop())
            view.wait_recovered(60)
            wait_for(lambda: process.poll() is not None or dict(view.items()) == dict(sent),
                     300, f"an exact table {trial.log}")  # fmt: skip
            assert process.poll() is None, f"the processor exited ({process.returncode})"

        code, result = run(brokers, topic, tmp_path / f"state-{machine}", tmp_path / "ckpt",
                           None, tmp_path / "unused", trial.mode,
                           exact if continuous else None)  # fmt: skip  # where it was killed
        assert code == 0 and result is not None
        trial.log.append(f"final stores {dict(result['stores'])}")
    with View(brokers, table, Int64Codec()) as view:  # all of it, after the last run
        view.wait_recovered(60)
        assert dict(view.items()) == dict(sent), trial.log
    return sum(1 for _ in read_to_end(brokers, table)) - sum(sent.values())


FIXED = [
    Trial("killed during a snapshot upload", [Step("upload", 3)]),
    Trial("killed after a commit, then during the restore", [Step("commit", 3), Step("restore", 1)]),
    Trial("killed at a random moment", [Step("timer", random.uniform(12, 22))]),
    Trial("continuous, killed mid-epoch after a commit",
          [Step("commit", random.randint(10, 30), new_machine=False)], "continuous"),
]  # fmt: skip
FIXED_NAMES = {t.name for t in FIXED[:2]} | {FIXED[3].name}


@pytest.mark.parametrize(
    "trial", FIXED, ids=["upload", "commit-restore", "random-moment", "continuous-commit"]
)
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
    mode = request.config.getoption("--crash-mode")
    results: list[int] = []
    for number in range(2 * count):  # trials whose kills were all missed do not count
        if len(results) == count:
            break
        trial = random_trial(rng, f"trial {number + 1}", mode)
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


def random_trial(rng: random.Random, name: str, mode: str = "micro-batch") -> Trial:
    """One or two killed runs: the first at a point every run reaches (or a random moment);
    a second, on a new machine, may be killed while it restores, so then the first is killed
    late enough for a snapshot to have been published."""
    second = rng.choice(("restore", "restore", "produce", "commit", "timer", None, None, None))
    first = rng.choice(("produce", "flush", "commit", "upload", "timer", "timer"))
    step = _random_step if mode == "micro-batch" else _random_continuous_step
    steps = [step(rng, first, new_machine=rng.random() < 0.7, late=second == "restore")]
    if second is not None:
        steps.append(step(rng, second, new_machine=True, late=False))
    return Trial(name, steps, mode)


def _random_step(rng: random.Random, point: str, *, new_machine: bool, late: bool) -> Step:
    assert point in (*POINTS, "timer")
    if point == "timer":
        return Step(point, rng.uniform(16 if late else 10, 24), new_machine)
    if point in ("restore", "upload"):
        return Step(point, 2 if late else 1, new_machine)
    return Step(point, rng.randint(3, 6) if late else rng.randint(1, 3), new_machine)


def _random_continuous_step(
    rng: random.Random, point: str, *, new_machine: bool, late: bool
) -> Step:
    """In continuous mode a run produces each click at once and commits every 0.1 s: points
    are reached many times an epoch, so the nth is drawn from a wider range."""
    assert point in (*POINTS, "timer")
    if point == "timer":  # a session starts in about 15 s: some kills land before processing
        return Step(point, rng.uniform(22 if late else 12, 32), new_machine)
    if point in ("restore", "upload"):
        return Step(point, rng.randint(2, 4) if late else 1, new_machine)
    if point == "produce":
        return Step(point, rng.randint(1000, 3000) if late else rng.randint(1, 2000), new_machine)
    return Step(point, rng.randint(20, 60) if late else rng.randint(1, 40), new_machine)
