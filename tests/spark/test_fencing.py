"""Fencing under ``guarantee="exactly-once"``: a second processor of the group started by
mistake, and a processor paused past its transaction timeout, stop with the error naming the
group, partition and transactional id, without writing their stores; a run after them finds
every input record told exactly once and the table exact. (Apart from
``test_exactly_once.py``: each file's tests run in one worker of ``make test``.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from goka import StringCodec
from goka.emitter import Emitter
from goka.topic_manager import TopicManager

from ..helpers import produce, wait_for
from .crash import signal_session
from .told import CLICKS, PARTITIONS, ROOT, USERS, inputs_of, run_told, told_of
from .truth import committed, committed_by_partition, open_transaction

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]


@pytest.mark.longrun  # (make test-slow, 62 s: make test stays within its 15 minutes)
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
    places, counts = inputs_of(brokers, topic)
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
        run_told(brokers, topic, tmp_path / "second", "exactly-once")
    told, table = told_of(brokers, topic)
    assert set(told) == places
    assert [p for p, n in told.items() if n > 1] == []
    assert table == counts


@pytest.mark.longrun  # (make test-slow: make test stays within its 15 minutes)
def test_a_processor_paused_past_its_transaction_timeout_is_fenced_as_it_resumes(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A processor (every process of it) stopped with SIGSTOP while it has transactions open,
    for longer than their timeout (5 s here), and resumed once the broker aborted them. What
    the paused tasks wrote is never read committed. As it resumes, a paused task is refused at
    its next write: either it stops the processor with the error naming group, partition and
    id (or, its messages' own timeouts fired first, with its transaction failed), its store
    not written; or the next epoch's tasks had started their producers before it wrote again
    (the pause outlasted the epoch), and they go on from the store and the committed
    changelog. Either way a run after it finds every record told exactly once."""
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

    def done() -> list[int]:
        return committed_by_partition(brokers, group, topic, PARTITIONS)

    def beyond(paused_at: list[int]) -> bool:  # every partition committed more since
        return all(now > then + 200 for now, then in zip(done(), paused_at, strict=True))

    flow = threading.Thread(target=clicks, daemon=True)
    flow.start()
    command = [sys.executable, "-m", "tests.spark.crash_run", brokers, topic, group,
               str(tmp_path / "state"), str(tmp_path / "checkpoint"), "--mode", "continuous",
               "--guarantee", "exactly-once", "--tell", f"{topic}-seen",
               "--transaction-timeout-ms", "5000", "--log-level", "INFO"]  # fmt: skip
    with (tmp_path / "paused.err").open("w") as err:
        run = subprocess.Popen(command, cwd=ROOT, text=True, stdout=subprocess.DEVNULL,
                               stderr=err, start_new_session=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    try:
        wait_for(lambda: min(done()) > 100, timeout=120, what="commits of every partition")
        wait_for(lambda: open_transaction(brokers, f"{topic}-seen", PARTITIONS), timeout=30,
                 what="a transaction open")  # fmt: skip
        signal_session(run.pid, signal.SIGSTOP)
        try:  # the broker aborts what is open past its timeout (it checks every 10 s)
            wait_for(lambda: not open_transaction(brokers, f"{topic}-seen", PARTITIONS), timeout=60,
                     what="the broker aborting the paused processor's transactions")  # fmt: skip
            paused_at = done()
        finally:
            signal_session(run.pid, signal.SIGCONT)
        wait_for(lambda: run.poll() is not None or beyond(paused_at), timeout=120,
                 what="the resumed processor stopping, or every partition going on")  # fmt: skip
        went_on = run.poll() is None
        if went_on:
            os.killpg(run.pid, signal.SIGTERM)
            run.wait(timeout=120)
    finally:
        stop_clicks.set()
        flow.join(60)
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=60)
    said = (tmp_path / "paused.err").read_text()
    fenced = re.search(rf"group '{group}' partition \d: fenced by a newer writer of "
                       rf"transactional id '{group}-\d'", said)  # fmt: skip
    failed = re.search(r"DeliveryError: delivery to topic '[^']*' failed .*Erroneous state", said)
    if went_on:
        assert run.returncode == 0, said[-3000:]
    else:
        assert run.returncode != 0 and (fenced or failed), said[-3000:]
    run_told(brokers, topic, tmp_path, "exactly-once")
    places, counts = inputs_of(brokers, topic)
    told, table = told_of(brokers, topic)
    assert set(told) == places
    assert [p for p, n in told.items() if n > 1] == []
    assert table == counts
