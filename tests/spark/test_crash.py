"""Kill the processor with SIGKILL at chosen points, restart it, and check the state is exact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from goka import Int64Codec
from goka.kafka.consumer import read_to_end
from goka.view import View

from .test_processor import clicks

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def run_processor(brokers: str, topic: str, group: str, state: Path, env: dict[str, str]) -> int:
    command = [sys.executable, "-m", "goka.cli", "processor", "run", "tests.spark.crash_graph:graph",
               "--brokers", brokers, "--state-dir", str(state), "--until-caught-up",
               "--max-offsets-per-trigger", "400"]  # fmt: skip
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "GOKA_TEST_GROUP": group,
                "GOKA_TEST_TOPIC": topic, "GOKA_LOG_LEVEL": "WARNING", **env}  # fmt: skip
    # its own session: the crash hook kills the whole process group (driver, JVM, workers)
    process = subprocess.run(command, env=full_env, cwd=ROOT, start_new_session=True,
                             capture_output=True, text=True, timeout=600)  # fmt: skip
    if process.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(
            f"processor exited with {process.returncode}:\n{process.stderr[-3000:]}"
        )
    return process.returncode


@pytest.mark.parametrize("point", ["processing", "after_flush", "after_commit"])
def test_sigkill_then_restart_leaves_exact_state(
    point: str, brokers: str, new_topic: Callable[..., str], tmp_path: Path, record_property: Any
) -> None:
    topic = new_topic(partitions=2)
    group = f"{topic}-g"
    sent = clicks(brokers, topic, 2_000)
    marker = tmp_path / "crashed"
    code = run_processor(brokers, topic, group, tmp_path / "state",
                         {"GOKA_TEST_CRASH_AT": point, "GOKA_TEST_CRASH_FILE": str(marker)})  # fmt: skip
    assert code == -signal.SIGKILL and marker.read_text() == point
    assert run_processor(brokers, topic, group, tmp_path / "state", {}) == 0
    with View(brokers, f"{group}-table", Int64Codec()) as view:
        view.wait_recovered(60)
        assert dict(view.items()) == dict(sent)
    records = sum(1 for _ in read_to_end(brokers, f"{group}-table"))
    duplicates = records - 2_000  # click count writes exactly one table update per click
    record_property("duplicate_table_records", duplicates)
    print(f"\nkilled at {point}: {duplicates} duplicate records in the table topic")
    assert duplicates >= 0
    if point == "after_commit":
        assert duplicates == 0  # the replayed batch was recognised and skipped
