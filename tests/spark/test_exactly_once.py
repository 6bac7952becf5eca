"""``guarantee="exactly-once"``: a click count that also emits, for every click, which record
it was, SIGKILLed (the whole processor) inside a transaction (while producing, after its
outputs were acknowledged), after a transaction committed but before the store was written,
and after the store was written; then a run on the same state catches up. A
``read_committed`` reader of the output finds every input record exactly once, and the table
equals the counts of the input. The same kill under at-least-once repeats outputs: what the
check finds there is what exactly-once removes. Fencing: a second processor of the group, and
a processor paused past its transaction timeout, stop with the error naming the group,
partition and transactional id, and a run after them ends exact."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import IsolationLevel
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from goka import Int64Codec, StringCodec
from goka.emitter import Emitter
from goka.kafka.ranges import RangeReader
from goka.topic_manager import TopicManager

from ..helpers import produce, wait_for
from .crash import run_killable
from .timed import topic_rows
from .truth import committed

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS, CLICKS, USERS = 2, 1_200, 30


def _run(brokers: str, topic: str, tmp_path: Path, guarantee: str, *extra: str,
         mode: str = "available-now") -> str:  # fmt: skip
    command = [sys.executable, "-m", "tests.spark.crash_run", brokers, topic, f"{topic}-g",
               str(tmp_path / "state"), str(tmp_path / "checkpoint"), "--mode", mode,
               "--max-offsets", "200", "--snapshot-interval", "0", "--guarantee", guarantee,
               "--tell", f"{topic}-seen", *extra]  # fmt: skip
    code, err = run_killable(command, ROOT, tmp_path / f"run{len(list(tmp_path.glob('run*')))}")
    if not extra:
        assert code == 0, err[-3000:]
    return err


def _killed_then_caught_up(brokers: str, topic: str, tmp_path: Path, guarantee: str,
                           kill: str, mode: str = "available-now",
                           ) -> tuple[Counter[tuple[int, int]], dict[str, int]]:  # fmt: skip
    """Kill a run in ``mode`` at ``kill``, catch up; return :func:`_told`."""
    marker = tmp_path / "killed"
    nth = "3" if mode == "available-now" else "1"  # (an epoch may read the input at once)
    _run(brokers, topic, tmp_path, guarantee, "--kill", kill, "--nth", nth,
         "--marker", str(marker), mode=mode)  # fmt: skip
    assert marker.exists(), f"the run was not killed at {kill}"
    _run(brokers, topic, tmp_path, guarantee)
    return _told(brokers, topic)


def _told(brokers: str, topic: str) -> tuple[Counter[tuple[int, int]], dict[str, int]]:
    """How often each input record was told, and the table's counts (both read committed)."""
    told = Counter(
        tuple(int(x) for x in (row[3] or b"").decode().split())
        for rows in topic_rows(brokers, f"{topic}-seen", PARTITIONS).values() for row in rows
    )  # fmt: skip
    table: dict[str, int] = {}
    for rows in topic_rows(brokers, f"{topic}-g-table", PARTITIONS).values():
        for row in rows:
            table[StringCodec().decode(row[2])] = Int64Codec().decode(row[3])
    return told, table  # type: ignore[return-value]


def _clicks(brokers: str, topic: str) -> tuple[set[tuple[int, int]], dict[str, int]]:
    """Every input record's (partition, offset), and the clicks per user."""
    places, counts = set(), Counter[str]()
    for partition, rows in topic_rows(brokers, topic, PARTITIONS).items():
        for row in rows:
            places.add((partition, row[1]))
            counts[StringCodec().decode(row[2])] += 1
    return places, dict(counts)


@pytest.mark.parametrize(("mode", "kill"), [
    *(("available-now", kill) for kill in ("produce", "flush", "transaction", "commit")),
    ("continuous", "flush"), ("continuous", "transaction"),
])  # fmt: skip
def test_killed_runs_tell_each_record_once(mode: str, kill: str, brokers: str,
                                           new_topic: Callable[..., str],
                                           tmp_path: Path) -> None:  # fmt: skip
    topic = new_topic(partitions=PARTITIONS)
    TopicManager(brokers).ensure_stream_exists(f"{topic}-seen", PARTITIONS)
    produce(brokers, topic, StringCodec(), [(f"user-{i % USERS}", "/") for i in range(CLICKS)])
    places, counts = _clicks(brokers, topic)
    told, table = _killed_then_caught_up(brokers, topic, tmp_path, "exactly-once", kill, mode)
    assert set(told) == places
    assert [p for p, n in told.items() if n > 1] == []
    assert table == counts
    if kill == "flush":  # what the killed run wrote is there, and was never read committed
        assert _uncommitted(brokers, f"{topic}-seen") > len(places)


def _uncommitted(brokers: str, topic: str) -> int:
    """How many records a ``read_uncommitted`` reader reads in ``topic``."""
    reader = RangeReader(brokers, {"isolation.level": "read_uncommitted"})
    try:
        return sum(len(chunk) for p in range(PARTITIONS)
                   for chunk in reader.read(p, {topic: reader.watermarks(topic, p)}, 30, 10_000))  # fmt: skip
    finally:
        reader.close()


def test_the_same_kill_under_at_least_once_tells_records_again(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=PARTITIONS)
    TopicManager(brokers).ensure_stream_exists(f"{topic}-seen", PARTITIONS)
    produce(brokers, topic, StringCodec(), [(f"user-{i % USERS}", "/") for i in range(CLICKS)])
    places, counts = _clicks(brokers, topic)
    told, table = _killed_then_caught_up(brokers, topic, tmp_path, "at-least-once", "flush")
    assert set(told) == places
    assert any(n > 1 for n in told.values())  # repeated after the kill...
    assert table == counts  # ...while the state stays exact


def test_a_second_processor_of_the_group_is_fenced_or_fences(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Two processors of one group on two state directories (a mistake). Whoever starts a
    partition's producer last owns it, and each task of a partition may start one (a task
    runs in whichever Python worker Spark picks): one or both stop with the error naming the
    group, partition and transactional id, their open transactions aborted. A survivor goes
    on; at the end the outputs and the table are exact."""
    topic, clicks = new_topic(partitions=PARTITIONS), 4 * CLICKS
    TopicManager(brokers).ensure_stream_exists(f"{topic}-seen", PARTITIONS)
    produce(brokers, topic, StringCodec(), [(f"user-{i % USERS}", "/") for i in range(clicks)])
    places, counts = _clicks(brokers, topic)
    group = f"{topic}-g"

    def start(name: str) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "tests.spark.crash_run", brokers, topic, group,
                   str(tmp_path / name / "state"), str(tmp_path / name / "checkpoint"),
                   "--mode", "micro-batch", "--trigger", "0.3", "--max-offsets", "20",
                   "--guarantee", "exactly-once", "--tell", f"{topic}-seen"]  # fmt: skip
        with (tmp_path / f"{name}.err").open("w") as err:  # (Spark's children keep pipes open)
            return subprocess.Popen(command, cwd=ROOT, text=True, stdout=subprocess.DEVNULL,
                                    stderr=err, start_new_session=True,
                                    env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip

    def done() -> int:
        return committed(brokers, group, topic, PARTITIONS)

    runs = {"first": start("first")}
    try:
        wait_for(lambda: done() > 0, timeout=120, what="the first processor's commits")
        assert done() < clicks / 2  # it has most of the input ahead of it
        runs["second"] = start("second")
        wait_for(lambda: any(r.poll() is not None for r in runs.values()) or done() == clicks,
                 timeout=240, what="a processor fenced, or the input done")  # fmt: skip
        stopped = [name for name, run in runs.items() if run.poll() is not None]
        assert stopped, "neither processor was fenced"
        for name in stopped:
            said = (tmp_path / f"{name}.err").read_text()
            fenced = re.search(rf"group '{group}' partition (\d): fenced by a newer writer "
                               rf"of transactional id '{group}-(\d)'", said)  # fmt: skip
            assert runs[name].returncode != 0 and fenced, said[-3000:]
            assert fenced.group(1) == fenced.group(2)
        survivors = [run for run in runs.values() if run.poll() is None]
        if survivors:
            wait_for(lambda: done() == clicks or survivors[0].poll() is not None,
                     timeout=240, what="the survivor catching up")  # fmt: skip
    finally:
        for run in runs.values():
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGTERM)
                run.wait(timeout=60)
    if done() < clicks:  # both stopped (or the survivor too, later): one more run ends it
        _run(brokers, topic, tmp_path / "second", "exactly-once")
    told, table = _told(brokers, topic)
    assert set(told) == places
    assert [p for p, n in told.items() if n > 1] == []
    assert table == counts


def _signal_session(sid: int, signum: int) -> None:
    """Send ``signum`` to every process of session ``sid`` (the processor: driver, JVM,
    Python workers)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry.name), signum)


def _open_transactions(brokers: str, topic: str) -> bool:
    """Does ``topic`` end later for a read_uncommitted reader than for a read_committed one
    (a transaction is open)?"""
    admin = AdminClient({"bootstrap.servers": brokers})
    parts = [ConfluentPartition(topic, p) for p in range(PARTITIONS)]

    def ends(level: IsolationLevel) -> list[int]:
        found = admin.list_offsets({tp: OffsetSpec.latest() for tp in parts},
                                   isolation_level=level)  # fmt: skip
        return [found[tp].result().offset for tp in parts]

    return ends(IsolationLevel.READ_UNCOMMITTED) != ends(IsolationLevel.READ_COMMITTED)


def test_a_processor_paused_past_its_transaction_timeout_is_fenced_as_it_resumes(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A processor (every process of it) stopped with SIGSTOP while it has transactions open,
    for longer than their timeout (5 s here), and resumed once the broker aborted them: it is
    fenced at its next write and stops with the error naming group, partition and id, its
    store not written; a run after it finds every record told exactly once."""
    topic = new_topic(partitions=PARTITIONS)
    TopicManager(brokers).ensure_stream_exists(f"{topic}-seen", PARTITIONS)
    group, stop_clicks = f"{topic}-g", threading.Event()

    def clicks() -> None:  # a flow, so that the processor's transactions are open most of
        with Emitter(brokers, topic, StringCodec()) as emitter:  # the time
            i = 0
            while not stop_clicks.wait(0.005):
                emitter.emit(f"user-{i % USERS}", "/")
                i += 1
            assert emitter.flush(60) == 0

    flow = threading.Thread(target=clicks, daemon=True)
    flow.start()
    command = [sys.executable, "-m", "tests.spark.crash_run", brokers, topic, group,
               str(tmp_path / "state"), str(tmp_path / "checkpoint"), "--mode", "continuous",
               "--guarantee", "exactly-once", "--tell", f"{topic}-seen",
               "--transaction-timeout-ms", "5000"]  # fmt: skip
    with (tmp_path / "paused.err").open("w") as err:
        run = subprocess.Popen(command, cwd=ROOT, text=True, stdout=subprocess.DEVNULL,
                               stderr=err, start_new_session=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    try:
        wait_for(lambda: committed(brokers, group, topic, PARTITIONS) > 200, timeout=120,
                 what="the processor's commits")  # fmt: skip
        wait_for(lambda: _open_transactions(brokers, f"{topic}-seen"), timeout=30,
                 what="a transaction open")  # fmt: skip
        _signal_session(run.pid, signal.SIGSTOP)
        try:  # the broker aborts what is open past its timeout (it checks every 10 s)
            wait_for(lambda: not _open_transactions(brokers, f"{topic}-seen"), timeout=60,
                     what="the broker aborting the paused processor's transactions")  # fmt: skip
        finally:
            _signal_session(run.pid, signal.SIGCONT)
        run.wait(timeout=120)
    finally:
        stop_clicks.set()
        flow.join(60)
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=60)
    said = (tmp_path / "paused.err").read_text()
    assert run.returncode != 0 and re.search(
        rf"group '{group}' partition \d: fenced by a newer writer of transactional id "
        rf"'{group}-\d'", said), said[-3000:]  # fmt: skip
    _run(brokers, topic, tmp_path, "exactly-once")
    places, counts = _clicks(brokers, topic)
    told, table = _told(brokers, topic)
    assert set(told) == places
    assert [p for p, n in told.items() if n > 1] == []
    assert table == counts
