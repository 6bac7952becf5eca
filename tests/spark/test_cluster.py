"""The click-count group submitted to a Spark standalone cluster (a master and two workers on
127.0.0.1, started from the pyspark install) with two executors, each keeping its partition
stores on its own disk, and snapshots in a checkpoint directory they share (as NFS would be):
partitions moving between executors are restored from snapshots, not rebuilt from the table."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import goka.cli
from goka import Int64Codec, JsonCodec
from goka.spark.standalone import StandaloneCluster
from goka.view import View

from ..helpers import produce, wait_for
from .fixtures import clicks
from .timed import events, finals_of, read_topic, reference, timed_graph

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    directory = tmp_path_factory.mktemp("cluster")
    with StandaloneCluster(2, directory=directory, python_path=ROOT) as started:
        yield started


def submit(
    cluster: StandaloneCluster, brokers: str, topic: str, workdir: Path, checkpoint: Path,
    graph: str = "tests.spark.crash_graph:graph",
) -> Counter[str]:  # fmt: skip
    """Run the group until caught up as a new application; return how its stores came to be."""
    command = cluster.spark_submit(
        goka.cli.__file__, "processor", "run", graph,
        "--brokers", brokers, "--state-dir", "goka-state",  # relative: each executor's own disk
        "--checkpoint-dir", str(checkpoint), "--until-caught-up",
        "--max-offsets-per-trigger", "600", "--http-port", "0", "--create-topics",
    )  # fmt: skip
    env = {**cluster.env, "PYTHONPATH": str(ROOT), "GOKA_TEST_GROUP": f"{topic}-g",
           "GOKA_TEST_TOPIC": topic, "GOKA_LOG_LEVEL": "WARNING"}  # fmt: skip
    result = subprocess.run(
        command, env=env, cwd=workdir, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]
    summary = re.search(r"caught up: (\d+) messages in (\d+) batches; stores: (.*)", result.stdout)
    assert summary is not None, result.stdout
    print(f"\ncluster run: {summary.group(0)}")
    return Counter({origin: int(n) for n, origin in re.findall(r"(\d+) (\w+)", summary.group(3))})


@pytest.mark.longrun  # (make test-slow, 95 s: the timed group below moves its partitions too)
def test_click_count_on_a_standalone_cluster_restores_moved_partitions(
    cluster: StandaloneCluster, brokers: str, new_topic: Callable[..., str], tmp_path: Path
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


def test_windows_and_timers_of_moved_partitions_are_restored_from_snapshots(
    cluster: StandaloneCluster, brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Timers, windows and stream time move with their partitions: the second application's
    executors restore them from snapshots, and no timer is lost or fires twice, no final
    result is lost or emitted twice."""
    topic = new_topic(partitions=4)
    graph = timed_graph(topic)
    checkpoint = tmp_path / "checkpoint"
    items = events(2_400, keys=20, seed=21)
    produce(brokers, topic, JsonCodec(), items[:1_200])
    submit(cluster, brokers, topic, tmp_path, checkpoint, "tests.spark.timed_env:graph")
    published = checkpoint / "state" / graph.group
    wait_for(lambda: all(any((published / f"{p}" / "manifests").glob("*.json")) for p in range(4)),
             60, "a snapshot of every partition")  # fmt: skip
    produce(brokers, topic, JsonCodec(), items[1_200:])
    stores = submit(cluster, brokers, topic, tmp_path, checkpoint, "tests.spark.timed_env:graph")
    assert stores["rebuilt"] == 0 and stores["created"] == 0 and stores["restored"] >= 4, stores
    expected = reference(graph, topic, items, partitions=4)
    for table in (graph.table, graph.windows["minute"].topic):
        with View(brokers, table, Int64Codec()) as view:
            view.wait_recovered(60)
            assert dict(view.items()) == expected.table(table), table
    want = finals_of([(r.key, r.value, r.headers) for r in expected.messages(f"{topic}-finals")])
    assert finals_of(read_topic(brokers, f"{topic}-finals")) == want
    quiet = Counter(r.value for r in expected.messages("quiet-" + topic))
    assert Counter(v for _, v, _ in read_topic(brokers, "quiet-" + topic)) == quiet
