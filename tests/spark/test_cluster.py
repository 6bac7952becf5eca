"""The click-count group submitted to a Spark standalone cluster (a master and two workers on
127.0.0.1, started from the pyspark install) with two executors, each keeping its partition
stores on its own disk, and snapshots in a checkpoint directory they share (as NFS would be):
partitions moving between executors are restored from snapshots, not rebuilt from the table."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import goka.cli
from goka import Int64Codec, JsonCodec, TopicManager
from goka.spark.standalone import StandaloneCluster
from goka.view import View

from ..helpers import produce, wait_for
from .crash import kill_session
from .fixtures import clicks
from .model import Flow, out_of_order, told, told_topic
from .timed import events, reference, timed_graph, timed_wrong
from .truth import committed

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
    published = checkpoint / group / "state" / group  # (--checkpoint-dir: each group's inside)
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


@pytest.mark.longrun  # (make test-slow, 4 minutes: make test keeps the writer changes)
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
    published = checkpoint / graph.group / "state" / graph.group
    wait_for(lambda: all(any((published / f"{p}" / "manifests").glob("*.json")) for p in range(4)),
             60, "a snapshot of every partition")  # fmt: skip
    produce(brokers, topic, JsonCodec(), items[1_200:])
    stores = submit(cluster, brokers, topic, tmp_path, checkpoint, "tests.spark.timed_env:graph")
    assert stores["rebuilt"] == 0 and stores["created"] == 0 and stores["restored"] >= 4, stores
    wrong = timed_wrong(graph, brokers, topic, reference(graph, topic, items, partitions=4))
    assert not wrong, wrong


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A cluster on which two applications hold executors at once."""
    directory = tmp_path_factory.mktemp("roomy")
    with StandaloneCluster(2, applications=2, directory=directory, python_path=ROOT) as started:
        yield started


class _Told:
    """The group that tells every click (``tests.spark.crash_graph:told``) on ``cluster``,
    submitted as exactly-once continuous applications (:meth:`submit`): a topic of 4
    partitions holding 2,000 clicks, and 300 a second flowing. Leaving the ``with`` kills the
    applications still running and stops the flow; then :meth:`told_once` checks."""

    def __init__(self, cluster: StandaloneCluster, brokers: str, new_topic: Callable[..., str],
                 workdir: Path, seed: int) -> None:  # fmt: skip
        self.cluster, self.brokers, self.workdir = cluster, brokers, workdir
        self.topic = new_topic(partitions=4)
        self.group = f"{self.topic}-g"
        TopicManager(brokers).ensure_stream_exists(told_topic(self.topic), 4)
        self.sent = clicks(brokers, self.topic, 2_000)
        self.flow = Flow(brokers, self.topic, 300, 40, seed=seed)
        self.runs: list[subprocess.Popen[str]] = []

    def __enter__(self) -> _Told:
        return self

    def __exit__(self, *exc: object) -> None:
        for run in self.runs:
            if run.poll() is None:
                kill_session(run.pid)
                run.wait(60)
        self.flow.stop()

    def done(self) -> int:
        """The clicks the group committed."""
        return committed(self.brokers, self.group, self.topic, 4)

    def more(self, clicks: int, what: str) -> None:
        """Wait until the group committed ``clicks`` more than now."""
        at = self.done()
        wait_for(lambda: self.done() > at + clicks, 180, what)

    def apps(self) -> set[str]:
        """The applications that ran executors on the cluster."""
        return {p.name for p in self.cluster.directory.glob("worker-*/app-*")}

    def submit(self, name: str, *, epoch: float, graph: str = "told") -> subprocess.Popen[str]:
        """Submit an application (its log: ``<name>.log``) of ``tests.spark.crash_graph``'s
        ``graph`` on the checkpoint ``workdir/checkpoint``, in a session of its own."""
        env = {**self.cluster.env, "PYTHONPATH": str(ROOT), "GOKA_TEST_GROUP": self.group,
               "GOKA_TEST_TOPIC": self.topic, "GOKA_LOG_LEVEL": "WARNING"}  # fmt: skip
        command = self.cluster.spark_submit(
            goka.cli.__file__, "processor", "run", f"tests.spark.crash_graph:{graph}",
            "--brokers", self.brokers, "--state-dir", "goka-state",
            "--checkpoint-dir", str(self.workdir / "checkpoint"), "--mode", "continuous",
            "--epoch", f"{epoch:g}", "--guarantee", "exactly-once", "--snapshot-interval", "2",
            "--http-port", "0", "--create-topics",
        )  # fmt: skip
        with (self.workdir / f"{name}.log").open("w") as log:
            self.runs.append(subprocess.Popen(
                command, env=env, cwd=self.workdir, text=True, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            ))  # fmt: skip
        return self.runs[-1]

    def stop_once_all_committed(self, run: subprocess.Popen[str], name: str) -> None:
        """Stop the flow; once the group committed every click, stop application ``run``
        (SIGTERM to spark-submit's JVM: it exits 143 once its shutdown hook stopped the
        session)."""
        self.sent += self.flow.stop()
        total = sum(self.sent.values())
        wait_for(lambda: self.done() == total, 180, "every click committed")
        run.send_signal(signal.SIGTERM)
        code = run.wait(120)
        assert code in (0, 143), (self.workdir / f"{name}.log").read_text()[-4000:]

    def told_once(self) -> None:
        """Read committed, every click is told once and the group's table equals the clicks
        sent."""
        duplicates, wrong_places = told(self.brokers, self.topic, 4)
        assert (duplicates, wrong_places) == (0, 0)
        assert out_of_order(self.brokers, self.topic, 4) == []
        with View(self.brokers, f"{self.group}-table", Int64Codec()) as view:
            view.wait_recovered(60)
            assert dict(view.items()) == dict(self.sent)


@pytest.mark.longrun  # (make test-slow, about 3 minutes)
def test_a_paused_drivers_executors_writing_on_are_fenced_by_a_new_application(
    roomy: StandaloneCluster, brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A driver paused (SIGSTOP: a long GC pause, a host cut off) leaves its executors
    running their tasks: an exactly-once continuous application of 10-minute epochs goes on
    processing and committing as a zombie. A new application of the group is submitted on the
    same checkpoint meanwhile, on the same workers (other disks): its tasks' producers fence
    the old ones, whose tasks stop with FencedError at their next commit. Then the paused
    driver is killed. Read committed, every click is told once and the table equals the
    clicks sent."""
    with _Told(roomy, brokers, new_topic, tmp_path, seed=6) as group:
        paused = group.submit("paused", epoch=600)
        wait_for(lambda: group.done() > 1_000, 180, "the first application's commits")
        (old,) = group.apps()
        os.killpg(paused.pid, signal.SIGSTOP)  # spark-submit's JVM and the Python driver
        at_pause = group.done()
        group.more(300, "the paused driver's executors committing")
        print(f"committed at the pause {at_pause}, by the zombies before the second "
              f"application {group.done() - at_pause}")  # fmt: skip
        second = group.submit("second", epoch=5)
        logs = list(roomy.directory.glob(f"worker-*/{old}/*/stderr"))
        assert logs, f"no executor log of {old}"
        wait_for(lambda: sum("FencedError" in p.read_text() for p in logs) >= 2, 180,
                 "the old executors' tasks fenced")  # fmt: skip
        kill_session(paused.pid)  # (SIGKILL reaches stopped processes)
        paused.wait(60)
        group.stop_once_all_committed(second, "second")
    group.told_once()


def _executors(app: str) -> list[int]:
    """The process ids of application ``app``'s executor JVMs."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                line = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"CoarseGrainedExecutorBackend" in b" ".join(line) and app.encode() in line:
                found.append(int(entry.name))
    return found


@pytest.mark.longrun  # (make test-slow, about 2 minutes each)
@pytest.mark.parametrize("graph", ["told", "told_later"], ids=["one-at-a-time", "concurrency-64"])
def test_a_driver_killed_and_a_new_application_at_once_stay_exactly_once(
    graph: str, cluster: StandaloneCluster, brokers: str, new_topic: Callable[..., str],
    tmp_path: Path,
) -> None:  # fmt: skip
    """An exactly-once continuous application's driver is SIGKILLed while clicks flow, and a
    new application of the group is submitted at once on the same checkpoint: its executors
    (new disks: stores rebuilt or restored) take the partitions over while the old executors
    may still run their tasks; then one of the new executors is SIGKILLed (its worker starts
    another, its tasks run again). Read committed, every click is told once and in its key's
    order, and the table equals the clicks sent; also with 64 records of a partition in
    flight, finishing out of order (``told_later``)."""
    with _Told(cluster, brokers, new_topic, tmp_path, seed=5) as group:
        first = group.submit("first", epoch=5, graph=graph)
        wait_for(lambda: group.done() > 1_000, 180, "the first application's commits")
        kill_session(first.pid)  # the driver (spark-submit's JVM and Python); not executors
        first.wait(60)
        before = group.apps()
        second = group.submit("second", epoch=5, graph=graph)
        group.more(1_000, "the second application's commits")
        (app,) = group.apps() - before
        executors = _executors(app)
        assert executors, f"no executor of {app} found"
        os.kill(executors[0], signal.SIGKILL)  # its worker starts another
        group.more(1_000, "commits after an executor was lost")
        group.stop_once_all_committed(second, "second")
    group.told_once()


@pytest.mark.longrun  # (make test-slow, about 2 minutes)
def test_a_worker_lost_and_back_stays_exactly_once(
    cluster: StandaloneCluster, brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A worker is SIGKILLed with its executor (its machine lost) while an exactly-once
    continuous application runs and clicks flow: the lost executor's tasks run again on the
    other worker's, alone. The worker comes back (a new daemon, its disk as it was left) and
    the master starts a new executor of the application on it. Read committed, every click is
    told once and the table equals the clicks sent."""
    with _Told(cluster, brokers, new_topic, tmp_path, seed=7) as group:
        before = group.apps()
        run = group.submit("app", epoch=5)
        wait_for(lambda: group.done() > 1_000, 180, "the application's commits")
        (app,) = group.apps() - before

        def executors_on_first() -> int:
            return len(list((cluster.directory / "worker-1").glob(f"{app}/*/stderr")))

        assert executors_on_first() == 1
        cluster.kill_worker(1)
        group.more(1_000, "commits on the other worker alone")
        cluster.start_worker(1)
        wait_for(lambda: executors_on_first() == 2, 120, "an executor on the worker back")
        group.more(1_000, "commits with the worker back")
        group.stop_once_all_committed(run, "app")
    group.told_once()
