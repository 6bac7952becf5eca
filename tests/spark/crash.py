"""Fault injection for crash tests, through the processor's builders (nothing in goka reads a
test hook): a producer, a store and a snapshot store that SIGKILL the whole processor (every
process of its session: driver, JVM, Python daemon and workers) at a named point.

``tests/spark/crash_run.py`` is the processor under test that uses them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from goka import Context
from goka.kafka.producer import Producer, kafka_producer
from goka.kafka.transactions import Transactions
from goka.processing.builders import Builders, leveldb_store
from goka.storage import Storage, WriteBatch
from goka.storage.snapshots import SnapshotStore

#: Where a processor can be killed: mid-produce, after the flush, after the state commit,
#: after a snapshot file's upload, after a snapshot file's download (restore), and under
#: exactly-once after a transaction committed (before the store's write), while a
#: transactional producer starts (``init_transactions``: the broker aborts what the
#: partition's last writer left open and fences it), and while a commit is aborted instead.
POINTS = ("produce", "flush", "commit", "upload", "restore", "transaction", "init", "abort")
#: The points reached only under exactly-once.
TRANSACTION_POINTS = ("transaction", "init", "abort")
_reached: Counter[str] = Counter()


def count_and_tell(seen: str, ctx: Context[int], page: Any) -> None:
    """Count the click, and say which record it was on ``seen`` (an output per record: what
    a crash repeats, or, under exactly-once, does not)."""
    ctx.set_value((ctx.value() or 0) + 1)
    ctx.emit(seen, ctx.key, f"{ctx.partition} {ctx.offset}")


async def count_and_tell_later(seen: str, ctx: Context[int], page: Any) -> None:
    """:func:`count_and_tell` for a group with ``concurrency``: it reads the key's count,
    awaits a random few milliseconds (records finish out of offset order, and a count read
    before another record of the key finished would be written back short), then counts,
    and tells which of the key's clicks it was too."""
    count = ctx.value() or 0
    await asyncio.sleep(random.random() * 0.004)
    ctx.set_value(count + 1)
    ctx.emit(seen, ctx.key, f"{ctx.partition} {ctx.offset} {count + 1}")  # (its nth click)


def signal_session(sid: int, signum: int) -> None:
    """Send ``signum`` to every process of session ``sid`` (this one last, if it is in it)."""
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # after the name: state, ppid, pgrp, session
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signum)
    if os.getsid(0) == sid:
        os.kill(me, signum)


def kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` (this one last, if it is in it)."""
    signal_session(sid, signal.SIGKILL)


@dataclass(frozen=True)
class Kill:
    """Kill the processor the ``nth`` time a process reaches ``point``, once per ``marker``."""

    point: str
    nth: int
    marker: str

    def reached(self, point: str, *, within: float = 0.0) -> bool:
        """Kill now if this is the ``nth`` time ``point`` is reached (``within``: from a
        thread, at a random moment of the next ``within`` seconds, while the caller goes on
        into what the point names; return True: the caller waits for it)."""
        if point != self.point:
            return False
        _reached[point] += 1
        if _reached[point] < self.nth:
            return False
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False  # killed once already
        Path(self.marker).write_text(point)
        if not within:
            kill_session(os.getsid(0))
        delay = random.uniform(0, within)
        threading.Thread(target=lambda: (time.sleep(delay), kill_session(os.getsid(0))),
                         daemon=True).start()  # fmt: skip
        return True


def add_kill_arguments(parser: argparse.ArgumentParser, points: tuple[str, ...]) -> None:
    """``--kill POINT --nth N --marker FILE`` of a program under test."""
    parser.add_argument("--kill", choices=points)
    parser.add_argument("--nth", type=int, default=1)
    parser.add_argument("--marker", default="")


def kill_of(args: argparse.Namespace) -> Kill | None:
    """The :class:`Kill` the arguments of :func:`add_kill_arguments` ask for, if any."""
    return Kill(args.kill, args.nth, args.marker) if args.kill else None


def crash_storage(request: Any, name: str) -> str:
    """Where a crash series keeps ``name`` (snapshots, an archive) when ``--crash-storage s3``
    says so: a prefix in a new bucket on the session's S3 server, the AWS variables pointing
    this process and the runs it starts there; else "" (the series' own place on files)."""
    if request.config.getoption("--crash-storage") != "s3":
        return ""
    bucket = request.getfixturevalue("s3")
    patch = request.getfixturevalue("monkeypatch")
    for variable, value in bucket.env.items():
        patch.setenv(variable, value)
    return f"{bucket.url}/{name}"


def crash_seeds(request: Any, suite: tuple[int, ...] = (1,)) -> list[int]:
    """The seeds of a crash test: ``--crash-sequences N`` from ``--crash-seed`` on, else the
    suite's own."""
    count = request.config.getoption("--crash-sequences")
    first = request.config.getoption("--crash-seed")
    return list(range(first, first + count)) if count else list(suite)


def run_killable(command: list[str], cwd: Path, log: Path, *,
                 meanwhile: Callable[[int], object] = lambda pid: None) -> tuple[int, str]:  # fmt: skip
    """Run ``command`` in a session of its own (``meanwhile(pid)`` runs while it does: it may
    kill it), at most 400 s; keep its stderr in ``log``; return its exit code and stderr."""
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    with subprocess.Popen(command, env=env, cwd=cwd, text=True, start_new_session=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:  # fmt: skip
        try:
            meanwhile(process.pid)
            _, err = process.communicate(timeout=400)
        except subprocess.TimeoutExpired:
            kill_session(process.pid)
            _, err = process.communicate()
    log.write_text(err)  # kept with the stores if the trial fails
    return process.returncode, err


def killer(rng: random.Random, low: float, high: float) -> Callable[[int], None]:
    """``meanwhile`` for :func:`killed_run`: SIGKILL the run at random ``low``-``high`` s in."""

    def kill(pid: int) -> None:
        time.sleep(rng.uniform(low, high))
        kill_session(pid)

    return kill


def killed_run(command: list[str], cwd: Path, log: Path, *, last: bool, what: str,
               meanwhile: Callable[[int], object] | None = None) -> bool:  # fmt: skip
    """Run ``command`` as :func:`run_killable` does (``meanwhile``: see there); return whether
    it was killed (SIGKILL).

    Raises:
        AssertionError: it failed otherwise, or it was ``last`` (a run that must catch up)
            and was killed; ``what`` names it.
    """
    code, err = run_killable(command, cwd, log, meanwhile=meanwhile or (lambda pid: None))
    killed = code == -signal.SIGKILL
    if code not in (0, -signal.SIGKILL) or (last and killed):
        raise AssertionError(f"{what} exited with {code}:\n{err[-4000:]}")
    return killed


class _Producer:
    def __init__(self, inner: Producer, kill: Kill) -> None:
        self.inner, self.kill = inner, kill
        self.purge, self.partition_count = inner.purge, inner.partition_count

    def poll(self, timeout: float) -> int:
        served = self.inner.poll(timeout)
        if served:  # delivery reports: a continuous commit may be written next
            self.kill.reached("flush")
        return served

    def produce(self, *args: Any, **kwargs: Any) -> None:
        self.kill.reached("produce")
        self.inner.produce(*args, **kwargs)

    def flush(self, timeout: float) -> int:
        remaining = self.inner.flush(timeout)
        self.kill.reached("flush")
        return remaining

    def __len__(self) -> int:
        return len(self.inner)


@dataclass(frozen=True)
class KillingProducer:
    kill: Kill

    def __call__(self, config: dict[str, Any]) -> Producer:
        return _Producer(kafka_producer(config), self.kill)


class _Store:
    def __init__(self, inner: Storage, kill: Kill) -> None:
        self.inner, self.kill = inner, kill

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def write(self, batch: WriteBatch) -> None:
        self.inner.write(batch)
        if batch.values and batch.offsets:  # a commit (recoveries write values, then offsets)
            self.kill.reached("commit")


@dataclass(frozen=True)
class KillingStore:
    kill: Kill

    def __call__(self, path: Path, table: str) -> Storage:
        return _Store(leveldb_store(path, table), self.kill)  # type: ignore[return-value]


class _Snapshots(SnapshotStore):
    kill: Kill

    def _upload(self, local: Path, remote: str) -> int:
        crc = super()._upload(local, remote)
        self.kill.reached("upload")
        return crc

    def _download(self, remote: str, local: Path) -> None:
        super()._download(remote, local)
        self.kill.reached("restore")


@dataclass(frozen=True)
class KillingSnapshots:
    kill: Kill

    def __call__(self, url: str, **options: Any) -> SnapshotStore:
        store = _Snapshots(url, **options)
        store.kill = self.kill
        return store


#: The longest a kill ``within`` a transactional call waits (``init_transactions`` after a
#: crash takes 10-100 ms here, an abort 5-20 ms).
_WITHIN = 0.05


class _Transactions(Transactions):
    kill: Kill

    def commit(self, offsets: Mapping[str, int] | None = None) -> None:
        if self.kill.reached("abort", within=_WITHIN):  # a commit that turned into an abort
            self.abort()
            time.sleep(60)  # (killed before)
        super().commit(offsets)
        self.kill.reached("transaction")


@dataclass(frozen=True)
class KillingTransactions:
    kill: Kill

    def __call__(self, config: Mapping[str, Any], group: str, partition: int,
                 timeout: float) -> Transactions:  # fmt: skip
        self.kill.reached("init", within=_WITHIN)  # killed while it starts, or just after
        found = _Transactions(config, group, partition, timeout)
        found.kill = self.kill
        found.producer = _Producer(found.producer, self.kill)
        return found


@dataclass(frozen=True)
class ShortTransactions:
    """Transactional producers whose transactions time out after ``timeout_ms``."""

    timeout_ms: int

    def __call__(self, config: Mapping[str, Any], group: str, partition: int,
                 timeout: float) -> Transactions:  # fmt: skip
        settings = {**config, "message.timeout.ms": self.timeout_ms}  # (librdkafka: at most)
        return Transactions(settings, group, partition, timeout,
                            transaction_timeout_ms=self.timeout_ms)  # fmt: skip


def builders(kill: Kill | None, *, transaction_timeout_ms: int | None = None) -> Builders:
    """Builders that kill at ``kill``'s point (the defaults if None), with transactions that
    time out after ``transaction_timeout_ms`` if given."""
    if transaction_timeout_ms is not None:
        return Builders(transactions=ShortTransactions(transaction_timeout_ms))
    if kill is None:
        return Builders()
    return Builders(storage=KillingStore(kill), producer=KillingProducer(kill),
                    snapshots=KillingSnapshots(kill),
                    transactions=KillingTransactions(kill))  # fmt: skip
