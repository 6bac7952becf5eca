"""``goka processor run`` as people run it: its errors, Ctrl-C, several groups, its HTTP port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyspark
import pytest

from goka import Int64Codec, StringCodec
from goka.view import View

from ..helpers import http_status, produce, wait_for

pytestmark = [pytest.mark.cost(70), pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _command(brokers: str, tmp_path: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "goka", "processor", "run", *args, "--brokers", brokers,
            "--state-dir", str(tmp_path / "state"), "--http-port", "0"]  # fmt: skip


def _env(topic: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "GOKA_TEST_TOPIC": topic}


def test_a_failing_record_prints_its_cause_once_with_the_hint(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    produce(brokers, topic, StringCodec(), [("u1", "/"), ("u2", "/boom"), ("u3", "/")])
    result = subprocess.run(
        _command(brokers, tmp_path, "tests.spark.cli_graphs:failing", "--until-caught-up"),
        env=_env(topic), cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    lines = result.stderr.splitlines()
    assert result.returncode == 1, result.stderr[-3000:]
    assert sum("cannot count page /boom" in line for line in lines) == 1, result.stderr
    errors = [line for line in lines if line.startswith("goka: error:")]
    assert len(errors) == 1 and "key 'u2'" in errors[0] and topic in errors[0], errors
    assert "--on-error skip" in lines[-1], lines[-1]
    assert "Traceback" not in result.stderr
    assert len(lines) <= 12, result.stderr


def test_ctrl_c_stops_like_sigterm(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Ctrl-C in a terminal signals the whole foreground process group: the JVM and the Python
    workers too. The processor ends its epoch, exits 0, and prints no traceback."""
    topic = new_topic(partitions=2)
    produce(brokers, topic, StringCodec(), [(f"u{i % 3}", "/") for i in range(30)])
    command = _command(brokers, tmp_path, "tests.spark.cli_graphs:first", "--epoch", "60")
    with subprocess.Popen(command, env=_env(topic), cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as process:  # fmt: skip
        assert process.stdout is not None and process.stderr is not None
        url = process.stdout.readline().split()[1]  # "http http://127.0.0.1:PORT (...)"
        assert http_status(f"{url}/healthz") == 200
        with View(brokers, f"{topic}-first-table", Int64Codec()) as view:
            view.wait_recovered(60)
            wait_for(lambda: dict(view.items()) == {"u0": 10, "u1": 10, "u2": 10},
                     timeout=180, what="the clicks counted")  # fmt: skip
        assert http_status(f"{url}/readyz") == 200
        interrupted = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        code = process.wait(timeout=60)
        took = time.monotonic() - interrupted
        stderr = process.stderr.read()
    assert code == 0, stderr[-3000:]
    assert took < 30, took
    assert "Traceback" not in stderr and "Py4J" not in stderr, stderr[-3000:]
    assert "stopping" in stderr


def test_several_groups_run_in_one_application(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    produce(brokers, topic, StringCodec(), [(f"u{i % 4}", "/") for i in range(40)])
    result = subprocess.run(
        _command(brokers, tmp_path, "tests.spark.cli_graphs:first", "tests.spark.cli_graphs:second",
                 "--mode", "available-now"),  # (as --until-caught-up)
        env=_env(topic), cwd=tmp_path, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("caught up: 40 messages") == 2, result.stdout
    assert result.stderr.count("starting Spark") == 1, result.stderr  # one session for both
    for group in ("first", "second"):
        with View(brokers, f"{topic}-{group}-table", Int64Codec()) as view:
            view.wait_recovered(60)
            assert dict(view.items()) == {f"u{i}": 10 for i in range(4)}
    for group in (f"{topic}-first", f"{topic}-second"):  # where one group alone keeps them
        assert (tmp_path / "state" / group / "partition-0" / "CURRENT").is_file(), group
        assert (tmp_path / "state" / group / "checkpoint" / "metadata").is_file(), group


def test_the_first_tasks_run_in_the_workers_warmed_up_with_the_interpreter_s_pyspark(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A processor that builds its session warms Python workers up while its query is
    planned, and its first tasks run in them; Spark's Python processes import this
    interpreter's pyspark, not the zip that Spark puts first on their path (they compiled it
    anew each, ~0.6 s per process). The workers do not load pandas (pyarrow imports it when
    it converts a list: ~55 MB each), and Spark does not start Python processes to search
    the installed packages for data sources."""
    topic = new_topic(partitions=2)
    produce(brokers, topic, StringCodec(), [(f"u{i}", "/") for i in range(8)])
    result = subprocess.run(
        _command(brokers, tmp_path, "tests.spark.cli_graphs:workers", "--until-caught-up"),
        env=_env(topic), cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    warm = [line for line in result.stderr.splitlines() if "ready for the first tasks" in line]
    assert len(warm) == 1, result.stderr[-3000:]
    warm_pids = set(warm[0].split("Python workers ")[1].split(" ready")[0].split(", "))
    assert len(warm_pids) == 2, warm
    with View(brokers, f"{topic}-workers-table", StringCodec()) as view:
        view.wait_recovered(60)
        values = dict(view.items())
    assert len(values) == 8, values
    pids = {value.split()[0] for value in values.values()}
    assert pids <= warm_pids, (pids, warm_pids)
    assert {value.split()[1] for value in values.values()} == {pyspark.__file__}, values
    assert {value.split()[2] for value in values.values()} == {"pandas=False"}, values
    modules = set(",".join(value.split()[3] for value in values.values()).split(","))
    assert "pyspark.worker" in modules and "pyspark.sql.worker.lookup_data_sources" not in modules
