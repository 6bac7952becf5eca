"""Model-based crash sequences: generated runs of a click-count processor that also tells,
for every click, which input record it was (an output per record), each run with its own
random configuration, SIGKILLed (the whole session: driver, JVM, Python workers) at a random
moment or at a named point, then restarted with another configuration, until a last run
catches up. After every sequence the group table topic, the partition stores and a view must
all equal the truth computed from what was emitted.

What a run's configuration draws from:

* mode: ``continuous`` (epochs), ``micro-batch`` (a streaming query), ``available-now``
  (``--until-caught-up``: bounded batches, then exit);
* ``max_offsets_per_trigger``: none, small or large; epoch, trigger and commit interval
  lengths; snapshots off or every fraction of a second to a few seconds;
* the machine: the previous run's state directory, or a new one (stores restored from
  snapshots or rebuilt from the table);
* where it is killed: ``first-epoch`` (in continuous mode, as soon as its stores applied
  records while Spark has not committed the epoch: the defect of the mode-switch issue),
  ``timer`` (a random moment, often before Spark has even started), ``produce``, ``flush``
  (outputs acknowledged, by a flush or a poll's delivery reports, before the state commit), ``commit`` (after a state commit), ``upload``
  (during a snapshot upload), ``restore`` (during a snapshot restore, on a new machine);
  under exactly-once also ``transaction`` (after a transaction committed, before the store's
  write), ``init`` (while a transactional producer starts: the broker aborts what the killed
  writer left open) and ``abort`` (while a commit is aborted instead).

A sequence runs under one guarantee (drawn): under ``exactly-once`` a ``read_committed``
reader of the outputs must find every input record told exactly once; under
``at-least-once`` at least once, and the repeats are reported.

Clicks are either a backlog emitted before the first run, or also a live flow while the killed
runs run. A kill point that a run does not reach within its time is replaced by a kill at
that moment (streaming runs), or the run ends caught up (``available-now``): the outcome says
which kills were reached.

``generate(seed)`` is deterministic: a failing sequence is replayed from the seed it prints.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from goka import Codec, StringCodec
from goka.emitter import Emitter
from goka.partitioner import partition_for
from goka.topic_manager import TopicManager

from ..helpers import produce, wait_for
from .crash import TRANSACTION_POINTS, kill_session
from .timed import topic_rows
from .truth import committed, ends, seen

__all__ = ["KILLS", "Outcome", "Run", "Sequence", "generate", "play"]

ROOT = Path(__file__).resolve().parents[2]
MODES = ("continuous", "micro-batch", "available-now")
#: Where runs are killed (see the module docstring).
KILLS = ("first-epoch", "timer", "produce", "flush", "commit", "upload", "restore")
GUARANTEES = ("at-least-once", "exactly-once")
#: The longest a killed streaming run may take to reach its kill point.
RUN_SECONDS = 45.0


@dataclass(frozen=True)
class Run:
    """One run of the processor: its configuration, and where it is killed (None: the last
    run, which must catch up)."""

    mode: str
    max_offsets: int | None
    epoch: float
    trigger: float
    commit_interval: float
    snapshot_interval: float
    new_machine: bool
    kill: str | None = None
    nth: float = 0.0

    def args(self) -> list[str]:
        """The processor's command-line options (``tests/spark/crash_run.py``)."""
        args = ["--mode", self.mode, "--epoch", f"{self.epoch:g}",
                "--trigger", f"{self.trigger:g}", "--commit-interval", f"{self.commit_interval:g}",
                "--snapshot-interval", f"{self.snapshot_interval:g}"]  # fmt: skip
        if self.max_offsets:
            args += ["--max-offsets", str(self.max_offsets)]
        if self.kill not in (None, "timer", "first-epoch"):
            args += ["--kill", str(self.kill), "--nth", str(int(self.nth))]
        return args

    def describe(self) -> str:
        how = {"continuous": f"continuous epoch {self.epoch:g}s commit {self.commit_interval:g}s",
               "micro-batch": f"micro-batch trigger {self.trigger:g}s",
               "available-now": "until caught up"}[self.mode]  # fmt: skip
        limit = f", limit {self.max_offsets}" if self.max_offsets else ""
        snapshots = f", snapshots {self.snapshot_interval:g}s" if self.snapshot_interval else ""
        machine = ", new machine" if self.new_machine else ""
        kill = "" if self.kill is None else f"; kill {self.kill}#{self.nth:g}"
        return f"{how}{limit}{snapshots}{machine}{kill}"


@dataclass(frozen=True)
class Sequence:
    """Runs of one processor group on one topic; the last is not killed."""

    seed: int
    partitions: int
    backlog: int
    users: int
    live: int  # clicks per second while the killed runs run (0: none)
    runs: tuple[Run, ...]
    guarantee: str = "at-least-once"
    concurrency: int = 1  # records of a partition in flight (above 1: the count awaits)

    def describe(self) -> str:
        flow = f", {self.live}/s live" if self.live else ""
        many = f", concurrency {self.concurrency}" if self.concurrency > 1 else ""
        return (f"seed {self.seed}: {self.guarantee}{many}, {self.partitions} partitions, "
                f"{self.backlog} clicks of {self.users} users{flow}")  # fmt: skip


def generate(seed: int, first_kills: tuple[str, ...] = (), *, most_kills: int = 3,
             guarantee: str | None = None, concurrency: int = 1) -> Sequence:  # fmt: skip
    """A random sequence (see the module docstring) of one to ``most_kills`` killed runs, and
    one more before a kill during a restore; ``first_kills`` fix where its first runs are
    killed and ``guarantee`` its guarantee (a short series covers the kill points this way);
    ``concurrency`` is the group's."""
    rng = random.Random(seed)
    partitions, backlog = rng.choice((2, 3)), rng.randint(800, 3000)
    users, live = rng.randint(50, 300), rng.choice((0, 0, 150, 300))
    guarantee = guarantee or rng.choice(GUARANTEES)
    points = KILLS + (TRANSACTION_POINTS if guarantee == "exactly-once" else ())
    kills = list(first_kills) or [rng.choice(points)]
    kills += [rng.choice(points) for _ in range(rng.randint(len(kills), most_kills) - len(kills))]
    if "restore" in kills:  # a worker with two partitions: one's snapshot before the upload kill
        partitions = 3
    runs: list[Run] = []
    for kill in kills:
        if kill == "restore" and (not runs or runs[-1].kill != "upload"):
            upload = _run(rng, "upload", runs[-1] if runs else None, backlog, live)
            # killed after one partition's snapshot is complete (3 files), so that a restore
            # has something to fetch
            runs.append(replace(upload, nth=rng.randint(4, 6)))
        runs.append(_run(rng, kill, runs[-1] if runs else None, backlog, live))
    runs.append(_run(rng, None, runs[-1], backlog, live))
    return Sequence(seed, partitions, backlog, users, live, tuple(runs), guarantee, concurrency)


def _run(rng: random.Random, kill: str | None, previous: Run | None, backlog: int,
         live: int) -> Run:  # fmt: skip
    """A run killed at ``kill`` with a configuration unlike ``previous``'s."""
    while True:
        mode = "continuous" if kill == "first-epoch" else rng.choice(MODES)
        run = Run(
            mode=mode,
            max_offsets=rng.choice((None, rng.randint(40, 200), rng.randint(1000, 5000))),
            epoch=rng.choice((2.0, 4.0, 8.0, 30.0)),
            trigger=rng.choice((0.0, 0.5, 2.0)),
            commit_interval=rng.choice((0.05, 0.1, 0.5)),
            snapshot_interval=rng.choice((0.0, 0.3, 1.0, 5.0)),
            new_machine=kill == "restore" or rng.random() < 0.3,
            kill=kill,
        )
        if kill in ("upload", "restore"):  # snapshots are taken and restored only if on
            run = replace(run, snapshot_interval=rng.choice((0.2, 0.5)))
        run = replace(run, nth=_nth(rng, run, backlog, live))
        if previous is None or (run.mode, run.max_offsets) != (previous.mode, previous.max_offsets):
            return run


def _nth(rng: random.Random, run: Run, backlog: int, live: int) -> float:
    """When a run is killed: after seconds (``timer``), or at the nth time a worker process
    (one of two) reaches the point, drawn from what a run can reach: a continuous run
    commits (and flushes and snapshots) only while records arrive."""
    many = run.mode != "continuous" or live > 0
    if run.kill == "timer":
        return round(rng.uniform(3, 25), 1)
    if run.kill == "restore":  # a worker restores each of its partitions once
        return 1
    if run.kill == "init":  # a worker starts a producer for each partition it runs at least
        return rng.randint(1, 2)
    if run.kill == "upload":
        return rng.randint(1, 2 if many else 1)
    if run.kill == "produce":  # a worker produces for about half of the records
        return rng.randint(1, max(1, backlog // 3))
    if run.kill in ("flush", "commit", "transaction", "abort"):
        if run.mode == "continuous":  # without live records a worker's backlog may go in one
            return rng.randint(1, 30) if live else 1  # commit: a second one is a race
        return rng.randint(1, 4 if run.max_offsets and run.max_offsets < 1000 else 2)
    return 0


@dataclass
class Outcome:
    """What a played sequence did: per killed run whether its kill was reached, the
    outputs beyond one per click (read committed), and the table records per click (under
    exactly-once fewer than one: a key's rows are written once per commit)."""

    log: list[str] = field(default_factory=list)
    kills: int = 0
    duplicates: int = 0
    table_records: float = 0.0

    def line(self, sequence: Sequence) -> str:
        return (f"{sequence.describe()}: {' -> '.join(self.log)}; {self.kills} kills, "
                f"{self.duplicates} duplicate outputs, {self.table_records:.2f} table records "
                f"per click")  # fmt: skip


class Flow:
    """Clicks emitted at ``rate`` per second on a thread until :meth:`stop` (or what ``item``
    gives, a ``(key, value)`` a call, encoded with ``codec``)."""

    def __init__(self, brokers: str, topic: str, rate: int, users: int, seed: int,
                 item: Callable[[], tuple[str, Any]] | None = None,
                 codec: Codec[Any] | None = None) -> None:  # fmt: skip
        self.brokers, self.topic, self.rate, self.users = brokers, topic, rate, users
        self.sent: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._item, self._codec = item or self._click, codec or StringCodec()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        began, count = time.monotonic(), 0
        with Emitter(self.brokers, self.topic, self._codec) as emitter:
            while not self._stop.is_set():
                key, value = self._item()
                emitter.emit(key, value)
                self.sent[key] += 1
                count += 1
                self._stop.wait(max(0.0, began + count / self.rate - time.monotonic()))
            assert emitter.flush(60) == 0

    def _click(self) -> tuple[str, str]:
        return f"user-{self._rng.randrange(self.users)}", "/page"

    def stop(self) -> Counter[str]:
        """Stop emitting; return what was sent (every click acknowledged)."""
        self._stop.set()
        self._thread.join(90)
        assert not self._thread.is_alive(), "the flow did not stop"
        return self.sent


class Player:
    """Plays one sequence on ``topic`` against the broker, in ``work`` (state directories of
    the machines, one Spark checkpoint shared by all runs as on a cluster)."""

    def __init__(self, sequence: Sequence, brokers: str, topic: str, work: Path,
                 snapshot_dir: str = "") -> None:  # fmt: skip
        self.sequence, self.brokers, self.topic, self.work = sequence, brokers, topic, work
        self.snapshot_dir = snapshot_dir
        self.group = f"{topic}-g"
        self.outcome = Outcome()
        self.machine = 0

    def state(self) -> Path:
        return self.work / f"machine-{self.machine}"

    def command(self, run: Run, marker: Path) -> list[str]:
        return [sys.executable, "-m", "tests.spark.crash_run", self.brokers, self.topic,
                self.group, str(self.state()), str(self.work / "checkpoint"), "--marker",
                str(marker), "--guarantee", self.sequence.guarantee, "--tell",
                told_topic(self.topic), "--concurrency", str(self.sequence.concurrency),
                "--graph", getattr(self.sequence, "graph", "count"),
                *(["--snapshot-dir", self.snapshot_dir] if self.snapshot_dir else []),
                *run.args()]  # fmt: skip

    def start(self, run: Run, number: int) -> tuple[subprocess.Popen[str], Path]:
        self.machine += run.new_machine
        marker = self.work / f"killed-{number}"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        process = subprocess.Popen(self.command(run, marker), env=env, cwd=ROOT, text=True,
                                   start_new_session=True, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)  # fmt: skip
        return process, marker

    def killed_run(self, run: Run, number: int) -> None:
        """Run until killed where ``run`` says (or caught up, or killed at its time limit)."""
        began = time.monotonic()
        process, marker = self.start(run, number)
        with process:
            if run.kill == "first-epoch":
                reached = self._kill_in_first_epoch(process)
            else:
                limit = run.nth if run.kill == "timer" else RUN_SECONDS
                if run.mode == "available-now" and run.kill != "timer":
                    limit = 300.0  # it ends caught up if the point is not reached
                try:
                    process.wait(timeout=limit)
                except subprocess.TimeoutExpired:
                    kill_session(process.pid)  # a random moment, or a point not reached
                reached = run.kill == "timer" or marker.exists()
            _, err = process.communicate()
        if process.returncode not in (0, -signal.SIGKILL):
            raise AssertionError(f"run {number} ({run.describe()}) exited with "
                                 f"{process.returncode}:\n{err[-4000:]}")  # fmt: skip
        killed = process.returncode == -signal.SIGKILL
        took = time.monotonic() - began
        how = ("caught up" if not killed else "killed" if reached else
               f"not reached, killed at {took:.0f}s")  # fmt: skip
        self.outcome.kills += killed
        self.outcome.log.append(f"[{run.describe()}: {how}]")

    def _kill_in_first_epoch(self, process: subprocess.Popen[str]) -> bool:
        """Kill as soon as this run's stores applied records (the group's commits moved) while
        the epoch planned last has no commit in Spark's checkpoint."""
        before = committed(self.brokers, self.group, self.topic, self.sequence.partitions)
        checkpoint = self.work / "checkpoint"

        def in_first_epoch() -> bool:
            moved = committed(self.brokers, self.group, self.topic,
                              self.sequence.partitions) > before  # fmt: skip
            return moved and not _epoch_committed(checkpoint)

        try:
            wait_for(lambda: process.poll() is not None or in_first_epoch(), RUN_SECONDS,
                     "records applied in an epoch")  # fmt: skip
            reached = process.poll() is None
        except AssertionError:
            reached = False
        kill_session(process.pid)
        return reached

    def final_run(self, run: Run, number: int, flow: Flow | None, sent: Counter[str]) -> None:
        """Run until caught up: exit by itself (available-now), or stopped with SIGTERM once
        the group committed every click. Clicks on every partition are emitted for it (before
        it starts, or once its query runs), so that it works on every partition's store."""
        if flow is not None:
            sent.update(flow.stop())
        if run.mode == "available-now":
            sent.update(self.last_clicks())
        process, _ = self.start(run, number)
        out = err = ""
        with process:
            try:
                if run.mode != "available-now":
                    assert process.stdout is not None
                    assert process.stdout.readline().strip() == "running", "the run ended"
                    sent.update(self.last_clicks())
                    total = sum(sent.values())
                    wait_for(lambda: process.poll() is not None or committed(
                        self.brokers, self.group, self.topic, self.sequence.partitions
                    ) == total, 300, "the last run to commit every click")  # fmt: skip
                    assert process.poll() is None, "the last run exited"
                    process.send_signal(signal.SIGTERM)
                out, err = process.communicate(timeout=300)
            except BaseException:
                kill_session(process.pid)
                out, err = process.communicate()
                raise AssertionError(f"{' -> '.join(self.outcome.log)}\nthe last run's log "
                                     f"ends:\n{err[-4000:]}") from None  # fmt: skip
        assert process.returncode == 0, f"exit {process.returncode}: {out[-2000:]}\n{err[-4000:]}"
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        self.outcome.log.append(f"[{run.describe()}: processed {result['processed']}, "
                                f"skipped {result['skipped_applied']}, stores "
                                f"{result['stores']}]")  # fmt: skip

    def last_clicks(self) -> Counter[str]:
        """Emit one click on each partition; return them."""
        clicks: Counter[str] = Counter()
        for p in range(self.sequence.partitions):
            user = next(u for u in (f"last-{i}" for i in range(10_000))
                        if partition_for(u.encode(), self.sequence.partitions) == p)  # fmt: skip
            clicks[user] += 1
        produce(self.brokers, self.topic, StringCodec(), [(u, "/page") for u in clicks])
        return clicks


def _epoch_committed(checkpoint: Path) -> bool:
    """Whether Spark committed the newest batch (epoch) it planned."""
    planned = [int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*")]
    return not planned or (checkpoint / "commits" / str(max(planned))).exists()


def told_topic(topic: str) -> str:
    """Where the processor tells which input record each click was."""
    return f"{topic}-told"


def told(brokers: str, topic: str, partitions: int) -> tuple[int, int]:
    """How many outputs a ``read_committed`` reader of :func:`told_topic` finds beyond one
    per input record, and how many input records it finds none for."""
    found = Counter(_place(row[3])
                    for rows in topic_rows(brokers, told_topic(topic), partitions).values()
                    for row in rows)  # fmt: skip
    inputs = {b"%d %d" % (p, row[1])
              for p, rows in topic_rows(brokers, topic, partitions).items() for row in rows}  # fmt: skip
    return sum(found.values()) - len(found), len(inputs - set(found)) + len(set(found) - inputs)


def untold(brokers: str, topic: str, partitions: int) -> str:
    """Which input records a ``read_committed`` reader of :func:`told_topic` finds no output
    for, as offset ranges by partition (``"0: 1200-1799"``)."""
    found = {_place(row[3]) for rows in topic_rows(brokers, told_topic(topic), partitions).values()
             for row in rows}  # fmt: skip
    ranges: list[str] = []
    for p, rows in sorted(topic_rows(brokers, topic, partitions).items()):
        missing = [row[1] for row in rows if b"%d %d" % (p, row[1]) not in found]
        for first, last in _runs(missing):
            ranges.append(f"{p}: {first}-{last}")
    return ", ".join(ranges)


def _place(told: bytes) -> bytes:
    """``b"<partition> <offset>"`` of a told value (a concurrent count adds its nth click)."""
    return b" ".join(told.split()[:2])


def out_of_order(brokers: str, topic: str, partitions: int) -> list[str]:
    """The keys whose outputs on :func:`told_topic`, read committed, tell their input records
    out of offset order (each the first time it is told: an at-least-once replay tells some
    again, after them), or, where an output says which of its key's clicks it was (a count
    with ``concurrency``), a wrong nth: a record that ran beside an earlier one of its key,
    or saw a state its key's earlier records did not leave."""
    nth: dict[tuple[int, int], int] = {}
    for partition, rows in topic_rows(brokers, topic, partitions).items():
        seen: Counter[bytes] = Counter()
        for row in rows:
            seen[row[2]] += 1
            nth[(partition, row[1])] = seen[row[2]]
    wrong: list[str] = []
    for rows in topic_rows(brokers, told_topic(topic), partitions).values():
        told_by_key: dict[bytes, list[tuple[int, int]]] = {}
        for row in rows:
            fields = [int(f) for f in row[3].split()]
            place = (fields[0], fields[1])
            if len(fields) > 2 and fields[2] != nth.get(place):
                wrong.append(f"{row[2].decode()}: {place} told as click {fields[2]}, is click "
                             f"{nth.get(place)}")  # fmt: skip
            places = told_by_key.setdefault(row[2], [])
            if place not in places:
                places.append(place)
        for key, places in told_by_key.items():
            if places != sorted(places) or len({p for p, _ in places}) > 1:
                wrong.append(f"{key.decode()}: told {places[:12]}")
    return wrong


def unordered(brokers: str, topic: str, partitions: int) -> list[str]:
    """What :func:`out_of_order` finds, as a line of a play's verdict (none if nothing)."""
    keys = out_of_order(brokers, topic, partitions)
    return [f"{len(keys)} keys told out of their input order: {keys[:3]}"] if keys else []


def _runs(offsets: list[int]) -> list[tuple[int, int]]:
    """``offsets`` (ascending) as runs of consecutive ones: ``(first, last)``."""
    found: list[tuple[int, int]] = []
    for offset in offsets:
        if found and found[-1][1] == offset - 1:
            found[-1] = (found[-1][0], offset)
        else:
            found.append((offset, offset))
    return found


def play(sequence: Sequence, brokers: str, new_topic: Callable[..., str], work: Path,
         snapshot_dir: str = "") -> Outcome:  # fmt: skip
    """Play ``sequence`` (its snapshots in ``snapshot_dir``, default beside the checkpoint);
    fail unless the table topic, the partition stores and a view all
    equal the truth afterwards, and a ``read_committed`` reader finds every click told (once,
    under exactly-once)."""
    topic = new_topic(f"model-{sequence.seed}", partitions=sequence.partitions)
    TopicManager(brokers).ensure_stream_exists(told_topic(topic), sequence.partitions)
    rng = random.Random(sequence.seed)
    sent: Counter[str] = Counter()
    items = [(f"user-{rng.randrange(sequence.users)}", "/page") for _ in range(sequence.backlog)]
    sent.update(user for user, _ in items)
    produce(brokers, topic, StringCodec(), items)
    flow = (Flow(brokers, topic, sequence.live, sequence.users, sequence.seed)
            if sequence.live else None)  # fmt: skip
    player = Player(sequence, brokers, topic, work, snapshot_dir)
    try:
        for number, run in enumerate(sequence.runs[:-1]):
            player.killed_run(run, number)
    except BaseException:
        if flow is not None:
            flow.stop()
        raise
    player.final_run(sequence.runs[-1], len(sequence.runs) - 1, flow, sent)
    assert ends(brokers, topic, sequence.partitions) == sum(sent.values())
    state = seen(brokers, f"{player.group}-table", player.state(), player.group, sent)
    outcome = player.outcome
    outcome.table_records = 1 + state.duplicates / sum(sent.values())
    outcome.duplicates, wrong_places = told(brokers, topic, sequence.partitions)
    wrong = state.wrong(sent)
    if wrong_places:
        wrong.append(f"{wrong_places} input records told never, or not input records")
    wrong += unordered(brokers, topic, sequence.partitions)
    if sequence.guarantee == "exactly-once" and outcome.duplicates:
        wrong.append(f"{outcome.duplicates} outputs repeated under exactly-once")
    assert not wrong, f"{outcome.line(sequence)}\n" + "\n".join(wrong)
    return outcome
