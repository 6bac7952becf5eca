"""Generated writer changes under exactly-once: processors of one group whose runs overlap,
so that a partition changes writers while the old writer still lives, as a second processor
started by mistake, a rolling deploy or a restart on another machine do.

A sequence has two to three *writers*, each a processor of the click count that tells, for
every click, which input record it was (``tests/spark/crash_run.py --tell``), with its own
configuration (mode, rate limit, epoch and commit interval, snapshots) and its own
*deployment*: a state directory and a Spark checkpoint (``a`` or ``b``: a second
deployment of the group, or the first one's again, with its stores and checkpoint as they
were left). Each writer starts while the one before it runs: once that one committed
records, then (drawn) at once, as soon as one of its transactions is open, or a few seconds
later. Each writer ends one way (drawn): SIGKILLed (the whole session) or stopped with
SIGTERM a few seconds after the next one's first transactional producer started (which fenced
it: it runs on as a zombie meanwhile; the last writer, after its own first producer), or
left to end by itself (an ``available-now`` run ends caught up; a writer that loses its
partitions to a newer one stops with :class:`~goka.errors.FencedError`; a streaming one is
stopped after :data:`ITSELF_SECONDS`). At most two writers run at once; clicks flow
meanwhile (a backlog, and drawn, a live flow of up to 1,000 a second). The suite's short
sequences (``generate(seed, modes)``) are writers in the modes given (a pair, or a chain of
them), each killed or stopped (or, available-now, left to end) within 5 s of the fence.

A last run then catches up alone. Afterwards a ``read_committed`` reader must find every
input record told exactly once, the table topic, the last run's stores and a view must equal
the truth computed from what was emitted, and every writer that stopped by itself with an
error must have stopped with :class:`~goka.errors.FencedError` (a loser names its group,
partition and transactional id; nothing else is acceptable).

``generate(seed)`` is deterministic: a failing sequence is replayed from the seed it prints.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from goka import Codec, JsonCodec, StringCodec
from goka.partitioner import partition_for
from goka.topic_manager import TopicManager

from ..helpers import produce, wait_for
from .crash import kill_session
from .model import ROOT, Flow, Player, Run, told, told_topic, unordered, untold
from .timed import TimedInput, read_back_reference, timed_graph, timed_wrong
from .truth import committed, ends, open_transaction, seen

__all__ = ["WriterSequence", "generate", "play"]

#: How a writer starts relative to the one before it (see the module docstring).
STARTS = ("at-once", "in-transaction", "later")
#: How a writer ends: SIGKILL, SIGTERM, or by itself.
ENDS = ("kill", "stop", "itself")
#: The longest a writer that ends by itself may run before it is killed.
ITSELF_SECONDS = 30.0


@dataclass(frozen=True)
class Writer:
    """One processor of the sequence: its run's configuration, its deployment, how it
    starts (relative to the writer before it) and how it ends (``after`` seconds after the
    next writer started, or after it started if it is the last one)."""

    run: Run
    deployment: str
    start: str
    end: str
    after: float

    def describe(self) -> str:
        return (f"{self.deployment}: {self.run.describe()}, starts {self.start}, ends "
                f"{self.end}" + ("" if self.end == "itself" else f" after {self.after:g}s"))  # fmt: skip


@dataclass(frozen=True)
class WriterSequence:
    """Overlapping writers of one group on one topic, then a last run on ``last``'s
    deployment."""

    seed: int
    partitions: int
    backlog: int
    users: int
    live: int
    writers: tuple[Writer, ...]
    last: Writer
    guarantee: str = "exactly-once"
    concurrency: int = 1  # records of a partition in flight (above 1: the count awaits)
    graph: str = "count"  # or "timed": tests/spark/timed.py's group, on events of its own

    def describe(self) -> str:
        flow = f", {self.live}/s live" if self.live else ""
        many = f", concurrency {self.concurrency}" if self.concurrency > 1 else ""
        what = "clicks" if self.graph == "count" else "events (the timed group)"
        return (f"seed {self.seed}: {self.partitions} partitions, {self.backlog} {what} of "
                f"{self.users} keys{flow}{many}")  # fmt: skip


def generate(seed: int, modes: tuple[str, ...] = (), concurrency: int = 1,
             graph: str = "count") -> WriterSequence:  # fmt: skip
    """A random sequence of writer changes (see the module docstring); ``modes``: its writers'
    modes (the suite's short sequences: a pair or a chain of them, each ending a few seconds
    after the next one's first producer started); ``concurrency``: the group's; ``graph``:
    the click count, or ``"timed"``: the windows, timers and TTL of ``tests/spark/timed.py``
    on its events (the same draws otherwise)."""
    rng = random.Random(seed)
    partitions, backlog = rng.choice((2, 3)), rng.randint(1500, 6000)
    users, live = rng.randint(50, 300), rng.choice((0, 300, 1000))
    if modes:  # (short: a flow the last run catches up with in seconds)
        backlog, live = rng.randint(1000, 2500), 300
    writers: list[Writer] = []
    deployment = "a"
    for number in range(len(modes) or rng.choice((2, 2, 3))):
        run = _run(rng, writers[-1].run if writers else None, modes[number] if modes else None)
        if number:  # the other deployment (a second one, or the first one's again)
            deployment = "b" if deployment == "a" else "a"
        end = rng.choice(ENDS[:2] if modes else ENDS)  # (the suite's are short)
        if end == "stop" and run.mode == "available-now":  # (it ends, or is killed)
            end = rng.choice(("kill", "itself"))
        after = round(rng.uniform(1.0, 5.0 if modes else 15.0), 1)
        writers.append(Writer(run, deployment, rng.choice(STARTS), end, after))
    last = Writer(_run(rng, writers[-1].run, "available-now" if modes else None),
                  rng.choice(("a", "b")), "later", "itself", 0.0)  # fmt: skip
    if modes:  # (one batch)
        last = replace(last, run=replace(last.run, max_offsets=None))
    elif graph == "timed" and (last.run.max_offsets or 1000) < 1000:  # (a live flow can leave
        # 80,000 events: 700 batches of 111, over the last run's 300 s)
        last = replace(last, run=replace(last.run, max_offsets=last.run.max_offsets * 10))
    return WriterSequence(seed, partitions, backlog, users, live, tuple(writers), last,
                          concurrency=concurrency, graph=graph)  # fmt: skip


def _run(rng: random.Random, previous: Run | None, mode: str | None = None) -> Run:
    """A run's configuration (in ``mode`` if given), in another mode or rate limit than
    ``previous``."""
    while True:
        run = Run(
            mode=mode or rng.choice(("continuous", "micro-batch", "available-now")),
            max_offsets=rng.choice((None, rng.randint(40, 200), rng.randint(1000, 5000))),
            epoch=rng.choice((2.0, 4.0, 8.0, 30.0)),
            trigger=rng.choice((0.0, 0.5, 2.0)),
            commit_interval=rng.choice((0.05, 0.1, 0.5)),
            snapshot_interval=rng.choice((0.0, 0.3, 1.0, 5.0)),
            new_machine=False,
        )
        if mode or previous is None or (run.mode, run.max_offsets) != (previous.mode,
                                                                         previous.max_offsets):  # fmt: skip
            return run


@dataclass
class Outcome:
    """What a played sequence did: how each writer ended, the outputs beyond one per click
    (read committed), the writers fenced."""

    log: list[str] = field(default_factory=list)
    fenced: int = 0
    killed: int = 0
    duplicates: int = 0

    def line(self, sequence: WriterSequence) -> str:
        return (f"{sequence.describe()}: {' | '.join(self.log)}; {self.fenced} fenced, "
                f"{self.killed} killed, {self.duplicates} duplicate outputs")  # fmt: skip


#: What a writer that lost its partitions must say (the error names all three).
FENCED = re.compile(r"group '[^']+' partition (\d+): fenced by a newer writer of "
                    r"transactional id '[^']+-(\d+)'")  # fmt: skip


class _Deployments(Player):
    """Starts writers on their deployments' state directories and checkpoints."""

    def __init__(self, sequence: WriterSequence, brokers: str, topic: str, work: Path) -> None:
        super().__init__(_as_model(sequence), brokers, topic, work)
        self.deployment = "a"
        self.timed = None  # (100 ms a record from 6 h ago: 200,000 records stay in the past)
        if sequence.graph == "timed":
            self.timed = TimedInput(sequence.users, sequence.seed, step=100, hours=6)

    def input(self, count: int, users: int, rng: random.Random) -> Counter[str]:
        """Emit ``count`` records of the sequence's input (clicks of ``users`` drawn from
        ``rng``, or the timed group's events); return their keys."""
        if self.timed is None:
            items: list[tuple[str, Any]] = [(f"user-{rng.randrange(users)}", "/page")
                                            for _ in range(count)]  # fmt: skip
        else:
            items = [self.timed() for _ in range(count)]
        produce(self.brokers, self.topic, self.codec(), items)
        return Counter(key for key, _ in items)

    def codec(self) -> Codec[Any]:
        return StringCodec() if self.timed is None else JsonCodec()

    def last_clicks(self) -> Counter[str]:
        if self.timed is None:
            return super().last_clicks()
        keys = [next(k for k in (f"last-{i}" for i in range(10_000))
                     if partition_for(k.encode(), self.sequence.partitions) == p)
                for p in range(self.sequence.partitions)]  # fmt: skip
        produce(self.brokers, self.topic, JsonCodec(), [self.timed(key) for key in keys])
        return Counter(keys)

    def watched(self) -> str:
        """A topic every processed record writes to (transactions open on it)."""
        return told_topic(self.topic) if self.timed is None else f"{self.group}-table"

    def state(self) -> Path:
        return self.work / self.deployment / "state"

    def command(self, run: Run, marker: Path) -> list[str]:
        command = super().command(run, marker)
        checkpoint = command.index(str(self.work / "checkpoint"))
        command[checkpoint] = str(self.work / self.deployment / "checkpoint")
        return command


def _as_model(sequence: WriterSequence) -> object:
    """What :class:`~tests.spark.model.Player` reads of a sequence."""

    @dataclass(frozen=True)
    class _Model:
        partitions: int
        guarantee: str
        concurrency: int
        graph: str

    return _Model(sequence.partitions, sequence.guarantee, sequence.concurrency, sequence.graph)


class _Running:
    """A writer's process, its stderr kept in a file (Spark's children keep pipes open)."""

    def __init__(self, writer: Writer, number: int, deployments: _Deployments) -> None:
        self.writer, self.number = writer, number
        deployments.deployment = writer.deployment
        self.log = deployments.work / f"writer-{number}.err"
        command = deployments.command(writer.run, deployments.work / f"unused-{number}")
        with self.log.open("w") as err:
            self.process = subprocess.Popen(
                command, cwd=ROOT, text=True, stdout=subprocess.DEVNULL, stderr=err,
                start_new_session=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
            )  # fmt: skip
        self.started, self.wall_started = time.monotonic(), time.time()
        self.state = deployments.state()
        self.signalled: str | None = None
        self.hung = False
        self.ender: threading.Thread | None = None

    def alive(self) -> bool:
        return self.process.poll() is None

    def writing(self) -> bool:
        """Has one of its tasks started a transactional producer (the file naming the latest,
        beside a store, written since it started)?"""
        for path in self.state.glob("*/partition-*.writer"):
            with contextlib.suppress(FileNotFoundError):  # (replaced meanwhile)
                if path.stat().st_mtime >= self.wall_started:
                    return True
        return False

    def end(self, how: str) -> None:
        """SIGKILL (``kill``) or SIGTERM (``stop``) it, if it still runs."""
        if not self.alive():
            return
        self.signalled = how
        if how == "kill":
            kill_session(self.process.pid)
        else:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, seconds: float) -> None:
        """Wait until it exited; one still running after ``seconds`` is killed, and, if it was
        stopped (SIGTERM) rather than left to end, called hung (:meth:`verdict` fails)."""
        try:
            self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.hung = self.signalled == "stop"
            self.signalled = "kill"
            kill_session(self.process.pid)
            self.process.wait(timeout=60)

    def verdict(self) -> tuple[str, bool]:
        """How it ended, and whether it was fenced; fail if it stopped by itself with any
        other error (the last error it printed must be the FencedError), or hung."""
        code, said = self.process.returncode, self.log.read_text()
        if self.hung:
            raise AssertionError(f"writer {self.number} ({self.writer.describe()}) did not stop "
                                 f"within 120 s of SIGTERM:\n{said[-5000:]}")  # fmt: skip
        errors = re.findall(r"^\S*(?:Error|Failed): (\w+Error): (.*)$", said, re.MULTILINE)
        fenced = FENCED.search(errors[-1][1]) if errors and errors[-1][0] == "FencedError" else None
        if fenced and fenced.group(1) != fenced.group(2):
            raise AssertionError(f"writer {self.number}: fenced error names two partitions: "
                                 f"{fenced.group(0)}")  # fmt: skip
        if code == -signal.SIGKILL and self.signalled == "kill":
            return "killed", False
        if code == 0:
            return ("stopped" if self.signalled else "ended"), False
        if fenced:
            return "fenced", True
        raise AssertionError(f"writer {self.number} ({self.writer.describe()}) exited with "
                             f"{code}, not fenced:\n{said[-5000:]}")  # fmt: skip


def _started(previous: _Running, how: str, deployments: _Deployments, partitions: int,
             rng: random.Random) -> None:  # fmt: skip
    """Wait until the next writer may start after ``previous`` (see the module docstring)."""
    brokers, group, topic = deployments.brokers, deployments.group, deployments.topic
    before = committed(brokers, group, topic, partitions)
    try:
        wait_for(lambda: not previous.alive() or committed(brokers, group, topic, partitions)
                 > before, 90, "the writer's first commits")  # fmt: skip
    except AssertionError:
        return  # (it never committed: the next one starts anyway)
    if how == "in-transaction":
        seen_open = deployments.watched()
        with contextlib.suppress(AssertionError):  # (none opened: it starts anyway)
            wait_for(lambda: not previous.alive() or open_transaction(brokers, seen_open,
                                                                      partitions), 10,
                     "a transaction open")  # fmt: skip
    elif how == "later":
        time.sleep(rng.uniform(1.0, 4.0))  # (a moment of the run, not a condition)


def play(sequence: WriterSequence, brokers: str, new_topic: Callable[..., str],
         work: Path) -> Outcome:  # fmt: skip
    """Play ``sequence``; fail unless every loser was fenced and the outputs, the table, the
    last run's stores and a view are exact afterwards."""
    topic = new_topic(f"writers-{sequence.seed}", partitions=sequence.partitions)
    TopicManager(brokers).ensure_stream_exists(told_topic(topic), sequence.partitions)
    rng = random.Random(sequence.seed)
    deployments = _Deployments(sequence, brokers, topic, work)
    sent = deployments.input(sequence.backlog, sequence.users, rng)
    group, outcome = deployments.group, Outcome()
    flow = (Flow(brokers, topic, sequence.live, sequence.users, sequence.seed,
                 deployments.timed, deployments.codec()) if sequence.live else None)  # fmt: skip
    running: list[_Running] = []
    try:
        for number, writer in enumerate(sequence.writers):
            if running:
                _started(running[-1], writer.start, deployments, sequence.partitions, rng)
            if len(running) > 1:  # at most two at once: the one before the last ends now
                _end(running[-2])
            running.append(_Running(writer, number, deployments))
            if len(running) > 1:  # the one before ends as drawn, while this one writes
                _end_later(running[-2], running[-1])
        _end_later(running[-1])
        for writer in running:
            _end(writer)
    except BaseException:
        if flow is not None:
            flow.stop()
        raise
    finally:
        for writer in running:
            if writer.alive():
                kill_session(writer.process.pid)
                writer.process.wait(timeout=60)
    for writer in running:
        how, fenced = writer.verdict()
        outcome.fenced += fenced
        outcome.killed += how == "killed"
        outcome.log.append(f"[{writer.writer.describe()}: {how}]")
    deployments.deployment = sequence.last.deployment
    deployments.outcome.log = []
    deployments.final_run(sequence.last.run, len(running), flow, sent)
    outcome.log += deployments.outcome.log
    assert ends(brokers, topic, sequence.partitions) == sum(sent.values())
    if sequence.graph == "timed":
        graph = timed_graph(topic)
        expected = read_back_reference(graph, brokers, topic, sequence.partitions)
        wrong = timed_wrong(graph, brokers, topic, expected, partitions=sequence.partitions)
        assert not wrong, f"{outcome.line(sequence)}\n" + "\n".join(wrong)
        return outcome
    state = seen(brokers, f"{group}-table", deployments.state(), group, sent)
    outcome.duplicates, wrong_places = told(brokers, topic, sequence.partitions)
    wrong = state.wrong(sent)
    if wrong_places:
        wrong.append(
            f"{wrong_places} input records told never, or not input records; "
            f"never told: {untold(brokers, topic, sequence.partitions)[:2000]}"
        )
    wrong += unordered(brokers, topic, sequence.partitions)
    if outcome.duplicates:
        wrong.append(f"{outcome.duplicates} outputs repeated under exactly-once")
    assert not wrong, f"{outcome.line(sequence)}\n" + "\n".join(wrong)
    return outcome


def _end_later(writer: _Running, following: _Running | None = None) -> None:
    """Let ``writer`` end as drawn, on a thread, ``after`` seconds after the ``following``
    writer's first producer started (it fenced this one's partitions then; the last writer:
    after its own first producer started)."""
    following = following or writer

    def later() -> None:
        if writer.writer.end == "itself":
            return
        with contextlib.suppress(AssertionError):  # (it never started one: ends anyway)
            wait_for(lambda: not writer.alive() or not following.alive()
                     or following.writing(), 90, "a writer's first producer")  # fmt: skip
        deadline = time.monotonic() + writer.writer.after
        while writer.alive() and time.monotonic() < deadline:
            time.sleep(0.05)  # (a moment of the run, drawn: not a condition)
        writer.end(writer.writer.end)

    writer.ender = threading.Thread(target=later, daemon=True)
    writer.ender.start()


def _end(writer: _Running) -> None:
    """Wait until ``writer`` ended (as drawn; one that ends by itself at most
    :data:`ITSELF_SECONDS`, a streaming one is then stopped)."""
    if writer.ender is not None:
        writer.ender.join(120)
    if writer.writer.end == "itself" and writer.writer.run.mode != "available-now":
        deadline = writer.started + ITSELF_SECONDS
        while writer.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        writer.end("stop")
    writer.wait(120)
