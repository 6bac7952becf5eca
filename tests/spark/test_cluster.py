"""The click-count group submitted to a Spark standalone cluster (a master and two workers on
127.0.0.1, started from the pyspark install) with two executors, each keeping its partition
stores on its own disk, and snapshots in a checkpoint directory they share (as NFS would be):
partitions moving between executors are restored from snapshots, not rebuilt from the table."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pyspark
import pytest

import goka.cli
from goka import Int64Codec
from goka.view import View

from ..helpers import free_port, wait_for
from .test_processor import clicks

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent  # the pip install carries the Spark distribution
SPARK_BIN = SPARK_HOME / "bin"
ENV = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
       "PYSPARK_PYTHON": sys.executable,
       "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as answer:
            return int(json.load(answer).get("aliveworkers", 0))
    except (OSError, ValueError):  # not up yet, or the UI answered before it was ready
        return 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("cluster")
    port, ui = free_port(), free_port()
    env = ENV
    spark_class = str(SPARK_BIN / "spark-class")
    master = f"spark://127.0.0.1:{port}"
    commands = {
        "master": ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                   "--port", str(port), "--webui-port", str(ui)],
        **{f"worker-{n}": ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                           "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()),
                           "--work-dir", str(base / f"worker-{n}"), master] for n in (1, 2)},
    }  # fmt: skip
    processes = []
    for name, args in commands.items():
        with (base / f"{name}.log").open("w") as log:
            processes.append(subprocess.Popen([spark_class, *args], env=env, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True))  # fmt: skip
    try:
        wait_for(lambda: _alive_workers(ui) == 2, timeout=120, what="two registered workers")
        yield master
    finally:
        for process in processes:
            os.killpg(process.pid, 9)
            process.wait()


def submit(cluster: str, brokers: str, topic: str, workdir: Path, checkpoint: Path) -> Counter[str]:
    """Run the group until caught up as a new application; return how its stores came to be."""
    command = [
        str(SPARK_BIN / "spark-submit"), "--master", cluster,
        "--total-executor-cores", "2", "--executor-cores", "1", "--executor-memory", "1g",
        "--conf", f"spark.pyspark.python={sys.executable}",
        "--conf", f"spark.pyspark.driver.python={sys.executable}",
        "--conf", f"spark.executorEnv.PYTHONPATH={ROOT}",
        "--conf", "spark.ui.enabled=false",
        goka.cli.__file__, "processor", "run", "tests.spark.crash_graph:graph",
        "--brokers", brokers, "--state-dir", "goka-state",  # relative: each executor's own disk
        "--checkpoint-dir", str(checkpoint), "--until-caught-up",
        "--max-offsets-per-trigger", "600",
    ]  # fmt: skip
    env = {**ENV, "PYTHONPATH": str(ROOT), "GOKA_TEST_GROUP": f"{topic}-g",
           "GOKA_TEST_TOPIC": topic, "GOKA_LOG_LEVEL": "WARNING"}  # fmt: skip
    result = subprocess.run(
        command, env=env, cwd=workdir, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]
    summary = re.search(r"caught up: (\d+) messages in (\d+) batches; stores: (.*)", result.stdout)
    assert summary is not None, result.stdout
    print(f"\ncluster run: {summary.group(0)}")
    return Counter({origin: int(n) for n, origin in re.findall(r"(\d+) (\w+)", summary.group(3))})


def test_click_count_on_a_standalone_cluster_restores_moved_partitions(
    cluster: str, brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=4)
    group = f"{topic}-g"
    checkpoint = tmp_path / "checkpoint"
    sent = clicks(brokers, topic, 3_000)
    submit(cluster, brokers, topic, tmp_path, checkpoint)
    published = checkpoint / "state" / group
    wait_for(lambda: all(any((published / f"{p}" / "manifests").glob("*.json")) for p in range(4)),
             60, "a snapshot of every partition")  # fmt: skip
    sent += clicks(brokers, topic, 1_200, seed=2)
    # a new application: new executors whose disks hold no store; every partition moves
    stores = submit(cluster, brokers, topic, tmp_path, checkpoint)
    assert stores["rebuilt"] == 0 and stores["created"] == 0, stores
    assert stores["restored"] >= 4, stores
    with View(brokers, f"{group}-table", Int64Codec()) as view:
        view.wait_recovered(60)
        assert dict(view.items()) == dict(sent)
