"""Runs killed in one mode and resumed in another, both ways.

A continuous run SIGKILLed inside its first epoch: the partition stores have applied every
click while Spark's checkpoint holds the epoch's offsets and no commit, so the resumed run is
planned behind the stores. It must skip what they applied (and say so), whatever range Spark
plans and whatever the rate limit. This is how the defect was found, with ``goka processor
run`` as a user runs it: resumed with ``--until-caught-up --max-offsets-per-trigger 5000``, the
counts nearly doubled and it exited 0.

A bounded run killed inside a micro-batch, resumed continuously on a new machine: Spark replays
the batch as an epoch, whose end nothing processed; an epoch that began there lost the batch's
records (found by the model-based crash series, seed 11).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from ..helpers import wait_for
from .crash import kill_session
from .fixtures import clicks
from .model import Run, Sequence, play
from .truth import committed, seen, view_of

pytestmark = [pytest.mark.cost(115), pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS, BACKLOG, LATER = 4, 20_000, 2_000


def _command(brokers: str, state: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "goka", "processor", "run", "tests.spark.crash_graph:graph",
            "--brokers", brokers, "--state-dir", str(state), "--http-port", "0",
            "--max-offsets-per-trigger", "5000", *args]  # fmt: skip


# until-caught-up: how the defect was found; continuous: make test-slow (50 s), make test's
# first crash sequence (test_crash.py) resumes a continuous run killed in its first epoch too
@pytest.mark.parametrize(
    "resume", ["until-caught-up", pytest.param("continuous", marks=pytest.mark.longrun)]
)
def test_a_continuous_run_killed_in_its_first_epoch_resumes_exactly_in_another_mode(
    resume: str, brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    group, state = f"{topic}-g", tmp_path / "state"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GOKA_TEST_TOPIC": topic,
           "GOKA_TEST_GROUP": group}  # fmt: skip
    sent = clicks(brokers, topic, BACKLOG, users=1_000)
    with subprocess.Popen(_command(brokers, state, "--epoch", "60"), env=env, cwd=tmp_path,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as first:  # fmt: skip
        try:
            wait_for(lambda: first.poll() is not None
                     or committed(brokers, group, topic, PARTITIONS) == BACKLOG,
                     240, "the first epoch to apply every click")  # fmt: skip
            assert first.poll() is None, "the first run exited"
        finally:
            kill_session(first.pid)
            _, err = first.communicate()
    checkpoint = state / group / "checkpoint"
    assert (checkpoint / "offsets" / "0").exists(), err[-3000:]
    assert not (checkpoint / "commits" / "0").exists(), "the kill came after the epoch's commit"
    sent += clicks(brokers, topic, LATER, users=1_000, seed=2)

    if resume == "until-caught-up":
        result = subprocess.run(_command(brokers, state, "--until-caught-up"), env=env,
                                cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
    else:
        _resume_continuously(brokers, state, env, tmp_path, group, topic, sent)
    assert seen(brokers, f"{group}-table", state, group, sent).wrong(sent) == []
    if resume == "until-caught-up":  # what it found applied already, it says it skipped
        line = result.stdout.strip().splitlines()[-1]
        found = re.match(r"caught up: (\d+) messages .*\((\d+) already applied, skipped\)", line)
        assert found is not None, line
        assert (int(found[1]), int(found[2])) == (LATER, BACKLOG), line


def _resume_continuously(brokers: str, state: Path, env: dict[str, str], cwd: Path, group: str,
                         topic: str, sent: Counter[str]) -> None:  # fmt: skip
    """Resume in continuous mode until every click is committed and the view is exact, then
    stop with SIGTERM."""
    with subprocess.Popen(_command(brokers, state), env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as process:  # fmt: skip
        try:
            wait_for(lambda: process.poll() is not None
                     or committed(brokers, group, topic, PARTITIONS) == BACKLOG + LATER,
                     240, "the resumed run to commit every click")  # fmt: skip
            assert process.poll() is None, "the resumed run exited"
            assert view_of(brokers, f"{group}-table") == dict(sent)
        except BaseException:
            kill_session(process.pid)
            raise
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err[-3000:]


def test_a_bounded_run_killed_inside_a_batch_resumes_exactly_as_epochs_on_a_new_machine(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    bounded = Run(mode="available-now", max_offsets=300, epoch=30.0, trigger=0.0,
                  commit_interval=0.1, snapshot_interval=0.0, new_machine=True)  # fmt: skip
    sequence = Sequence(
        seed=9011, partitions=4, backlog=4_000, users=300, live=0,
        runs=(replace(bounded, kill="commit", nth=3), replace(bounded, mode="continuous")),
    )  # fmt: skip
    outcome = play(sequence, brokers, new_topic, tmp_path)
    print(f"\n{outcome.line(sequence)}")
    assert outcome.kills == 1, outcome.line(sequence)
