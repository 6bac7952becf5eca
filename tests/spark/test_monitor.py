"""The processor monitor in headless Chromium: a running processor's partitions, and a lag that
goes down as it catches up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from goka import StringCodec

from ..browser import chromium, rows, texts
from ..helpers import produce, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_monitor_shows_partitions_and_the_lag_going_down(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=2)
    produce(brokers, topic, StringCodec(), [(f"u{i % 50}", "/") for i in range(20_000)])
    command = [sys.executable, "-m", "goka", "processor", "run", "tests.spark.cli_graphs:slow",
               "--brokers", brokers, "--state-dir", str(tmp_path / "state"), "--http-port", "0",
               "--epoch", "8", "--commit-interval", "0.2"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GOKA_TEST_TOPIC": topic}
    errors = (tmp_path / "processor.err").open("w")  # its logs, for a failure to show
    with errors, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True,
                                  env=env, cwd=tmp_path, start_new_session=True) as process:  # fmt: skip
        try:
            assert process.stdout is not None
            url = process.stdout.readline().split()[1]
            with chromium() as driver:
                driver.get(f"{url}/")  # its script fills the page in from /api/monitor
                named = f"{topic}-slow"
                try:
                    wait_for(lambda: named in driver.page_source, what="the group's name")
                except AssertionError as late:
                    said = (tmp_path / "processor.err").read_text()[-4000:]
                    raise AssertionError(f"{late}\npage at {url}:\n{driver.page_source[:2000]}"
                                         f"\nthe processor's log:\n{said}") from None  # fmt: skip
                assert f"input {topic} (string) -> count_slowly" in texts(driver, "td")
                seen: list[dict[str, Any]] = []

                def counting() -> bool:
                    with urllib.request.urlopen(f"{url}/api/monitor", timeout=5) as answer:
                        seen.append(json.loads(answer.read())["groups"][0])
                    return seen[-1]["processed"] > 0

                wait_for(counting, timeout=120, what="records counted on the monitor")
                assert seen[-1]["batches"] == 0, seen[-1]  # before its first epoch ended (8 s)
                assert seen[-1]["unit"] == ["epoch", "epochs"]
                wait_for(lambda: " epochs, " in texts(driver, "#summary-0")[0],
                         what="the summary counting epochs")  # fmt: skip
                lags: list[int] = []

                def caught_up() -> bool:
                    found = rows(driver, "partitions-0")
                    if len(found) == 2 and all(r[3].isdigit() for r in found):
                        lags.append(sum(int(r[3]) for r in found))
                        if lags[-1] > 0 and len(lags) == 3:
                            driver.save_screenshot(str(tmp_path / "processor-monitor.png"))
                    return bool(lags) and lags[-1] == 0

                wait_for(caught_up, timeout=240, what="the lag going down to 0 on the page")
                states = [r[4] for r in rows(driver, "partitions-0")]
                assert states == ["running", "running"]
                wait_for(lambda: all(r[7].endswith(" MB") for r in rows(driver, "partitions-0")),
                         timeout=60, what="store sizes, once an epoch ended")  # fmt: skip
                if not (tmp_path / "processor-monitor.png").exists():
                    driver.save_screenshot(str(tmp_path / "processor-monitor.png"))
            positive = [lag for lag in lags if lag > 0]
            assert positive, lags  # seen while catching up...
            assert positive == sorted(positive, reverse=True), lags  # ...going down
            with urllib.request.urlopen(f"{url}/api/monitor", timeout=5) as answer:
                history = json.loads(answer.read())["history"]
            assert max(point["records_per_s"] for point in history) > 0
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)
