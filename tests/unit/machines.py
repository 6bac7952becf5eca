"""The unit tests' machinery for partition processors, without Spark or a broker: memory
stores, a recording producer, a reader over lists (``fake_kafka``), snapshots in fsspec's memory
file system. Each :class:`Machine` is an executor: its own state directory and its own worker
process resources. A fixture module (the root conftest's ``pytest_plugins``): tests import its
helpers and get its fixtures, instead of importing each other."""

from __future__ import annotations

import itertools
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import fsspec
import pytest

from goka import (
    Context,
    Int64Codec,
    JsonCodec,
    StringCodec,
    define_group,
    input,
    join,
    lookup,
    persist,
)
from goka.group.graph import GroupGraph
from goka.processing.batch import PartitionProcessor
from goka.processing.builders import Builders
from goka.processing.config import TaskConfig
from goka.processing.epoch import run_epoch
from goka.processing.summary import PartitionSummary
from goka.processing.worker import Worker
from goka.storage import MemoryStorage, WriteBatch

from .fake_kafka import CONTROL, FakeKafka

_urls = itertools.count()


@pytest.fixture
def kafka() -> FakeKafka:
    """An in-memory Kafka of two partitions."""
    return FakeKafka(partitions=2)


@pytest.fixture(autouse=True)
def close_machines() -> Iterator[None]:
    """Close the machines a test made: left to the garbage collector, their workers' sockets
    were reported as unclosed in whichever later test it happened to run."""
    yield
    while Machine.made:
        Machine.made.pop().close()


IN = "clicks"


def count(ctx: Context[int], page: str) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


CLICKS = define_group("counts", input(IN, StringCodec(), count), persist(Int64Codec()))


class RecordingStore(MemoryStorage):
    """Memory storage that notes writes of input offsets (``write clicks 30``) in the events."""

    events: list[str]

    def write(self, batch: WriteBatch) -> None:
        self.events += [f"write {t} {o}" for (t, _), o in batch.offsets.items() if t == IN]
        super().write(batch)


class Machine:
    """An executor: a state directory and a worker process's resources (closed after the test
    by :func:`close_machines`: a worker holds a socket and threads)."""

    made: ClassVar[list[Machine]] = []

    def __init__(self, kafka: FakeKafka, root: Path, graph: GroupGraph = CLICKS, *,
                 snapshots: str | None = None, interval: float = 1e-9, **config: Any) -> None:  # fmt: skip
        self.kafka, self.graph, self.worker = kafka, graph, Worker()
        Machine.made.append(self)

        def storage(path: Path, table: str) -> MemoryStorage:
            store = RecordingStore.at(path, table)
            store.events = kafka.events
            return store

        self.builders = Builders(storage=storage, producer=kafka.producer, reader=kafka.reader)
        self.config = TaskConfig(graph, "fake:9092", state_dir=str(root), snapshot_dir=snapshots,
                                 snapshot_interval=interval, builders=self.builders, **config)  # fmt: skip

    def run(self, partition: int, ranges: dict[str, tuple[int, int]]) -> PartitionSummary:
        summary = PartitionProcessor(self.config, partition, self.worker).process(ranges)
        assert self.worker.uploads.wait(10)
        return summary

    def catch_up(self, partition: int, starts: dict[str, int]) -> PartitionSummary:
        return self.run(partition, self.kafka.ranges(starts, partition))

    def state(self, partition: int) -> dict[str, int]:
        path = Path(self.config.state_dir) / self.graph.group / f"partition-{partition}"
        with self.worker.lease(self.builders.storage, path, self.graph.table) as lease:
            return {k: int(v) for k, v in lease.storage.items()}

    def offsets(self, partition: int) -> dict[tuple[str, int], int]:
        path = Path(self.config.state_dir) / self.graph.group / f"partition-{partition}"
        with self.worker.lease(self.builders.storage, path, self.graph.table) as lease:
            return lease.storage.offsets()

    def close(self) -> None:
        self.worker.close()


@pytest.fixture(params=["memory", pytest.param("s3", marks=pytest.mark.s3)])
def url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Where snapshots go: fsspec's memory file system, or a bucket on the S3 server (reached
    through the standard AWS variables, as a deployed processor is)."""
    if request.param == "s3":
        bucket = request.getfixturevalue("s3")
        for name, value in bucket.env.items():
            monkeypatch.setenv(name, value)
        yield f"{bucket.url}/snapshots"
        return
    location = f"memory://snapshots-{next(_urls)}"
    yield location
    fs = fsspec.filesystem("memory")
    if fs.exists(location):
        fs.rm(location, recursive=True)


def click(kafka: FakeKafka, n: int, *, users: int = 5, start: int = 0) -> Counter[str]:
    """Write ``n`` clicks of ``users`` users into partition 0; return the counts."""
    sent: Counter[str] = Counter()
    for i in range(start, start + n):
        user = f"u{i % users}"
        kafka.append(IN, user, b"/page", partition=0)
        sent[user] += 1
    return sent


def refused_after(kafka: FakeKafka, sent: Counter[str]) -> Script:
    """A script of two polls: 10 clicks, then 10 more whose table updates the broker refuses
    (counted in ``sent``)."""

    def refused() -> None:
        kafka.fail_deliveries_to.add(CLICKS.table)
        sent.update(click(kafka, 10, start=10))

    return Script(kafka, lambda: sent.update(click(kafka, 10)), refused)


def table_of(kafka: FakeKafka, partition: int = 0) -> dict[str, int]:
    """The group table's content, read as a view would (last value wins, tombstones delete)."""
    found: dict[str, int] = {}
    for _, _, key, value, _, headers in kafka.rows(CLICKS.table, partition):
        if headers is CONTROL:  # a transaction's marker
            continue
        assert key is not None
        if value is None:
            found.pop(key.decode(), None)
        else:
            found[key.decode()] = int(value)
    return found


# -- joins, lookups, errors --------------------------------------------------------------------
def _enrich(ctx: Context[Any], page: str) -> None:
    profile = ctx.join("profiles") or {}
    ctx.set_value({"page": page, "country": profile.get("country"),
                   "device": ctx.lookup("devices", "d1")})  # fmt: skip


ENRICH = define_group("enrich", input(IN, StringCodec(), _enrich), join("profiles", JsonCodec()),
                      lookup("devices", StringCodec()), persist(JsonCodec()))  # fmt: skip


class Devices:
    def get_raw(self, key: str) -> bytes | None:
        return {"d1": b"phone"}.get(key)

    def wait_recovered(self, timeout: float | None = None) -> None:
        pass

    def close(self) -> None:
        pass


def devices(brokers: str, table: str, settings: Any) -> Devices:
    assert table == "devices"
    return Devices()


HOUR = 3600.0


class Script:
    """Runs ``steps[i]`` before poll ``i``; stops the epoch after the last step."""

    def __init__(self, kafka: FakeKafka, *steps: Callable[[], object]) -> None:
        self.steps, self.polls = list(steps), 0
        kafka.on_poll.append(self._next)

    def _next(self) -> None:
        if self.polls < len(self.steps):
            self.steps[self.polls]()
        self.polls += 1

    def done(self) -> bool:
        return self.polls > len(self.steps)


def epoch(
    machine: Machine, starts: dict[str, int], stop: Callable[[], bool], seconds: float = HOUR
) -> PartitionSummary:
    (summary,) = run_epoch(machine.config, machine.worker, {0: starts}, seconds, stop)
    return summary


class FakeTransactions:
    """A transactional producer of the fake Kafka: what it isolates is not shown here (the
    Apache Kafka tests do that); a commit writes the group's offsets and a marker (an offset)
    in each partition it wrote to, as Kafka does."""

    def __init__(self, kafka: FakeKafka, config: Mapping[str, Any], group: str,
                 partition: int, timeout: float) -> None:  # fmt: skip
        self.producer = kafka.producer(dict(config))
        self.kafka, self.group, self.partition = kafka, group, partition
        self.token, self.open, self.commits = uuid.uuid4().hex, False, 0
        self._ends: dict[tuple[str, int], int] = {}
        self._offsets: dict[str, int] = {}

    def _now(self) -> dict[tuple[str, int], int]:
        return {(t, p): len(rows) for t, parts in self.kafka.topics.items()
                for p, rows in enumerate(parts)}  # fmt: skip

    def begin(self) -> None:
        self.open, self._ends, self._offsets = True, self._now(), {}

    def send_offsets(self, offsets: Mapping[str, int]) -> None:
        assert self.open, "offsets without begin"
        self._offsets = dict(offsets)  # (committed with the transaction)

    def commit(self, offsets: Mapping[str, int] | None = None) -> None:
        assert self.open and not len(self.producer), "committed with outputs not delivered"
        for topic, offset in (offsets or self._offsets).items():
            self.kafka.committed[(self.group, topic, self.partition)] = (offset, "")
        for (topic, partition), end in self._now().items():
            if end > self._ends.get((topic, partition), 0):
                self.kafka.mark(topic, partition)
        self.open, self.commits = False, self.commits + 1

    def abort(self) -> None:
        self.open = False

    def close(self) -> None:
        self.abort()


def exactly_once(machine: Machine) -> Machine:
    """``machine`` under ``guarantee="exactly-once"``, with :class:`FakeTransactions`."""
    kafka = machine.kafka
    machine.config = TaskConfig(**{**machine.config.__dict__, "guarantee": "exactly-once"})
    return with_builders(machine, transactions=lambda *args: FakeTransactions(kafka, *args))


def with_builders(machine: Machine, **builders: object) -> Machine:
    machine.builders = Builders(**{**machine.builders.__dict__, **builders})
    machine.config = TaskConfig(**{**machine.config.__dict__, "builders": machine.builders})
    return machine
