"""The invariant the partition runtime rests on, searched by generated sequences instead of
hand-picked ones: **a partition store's applied offsets never go backwards, and every record
below them is skipped**, whatever range Spark plans (a micro-batch run again, a range behind
the store, a bounded run after epochs, any rate limit), whatever epoch start, across failed
deliveries, failures between the flush and the commit, restarts and moves to new machines.

Hypothesis drives a click count through arbitrary micro-batch ranges and epoch starts on
real LevelDB stores, and checks after every step that the store's state is exactly the
counts of the records below its offset; at the end, a catch-up must leave the store and the
group table equal to the truth. No Spark, no broker: the fakes of ``fake_kafka``.
``pytest tests/unit/test_applied_ranges.py --hypothesis-profile search`` searches longer.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from goka.errors import DeliveryError, OffsetRegressionError
from goka.processing.applied import Applied, commit
from goka.processing.batch import PartitionProcessor
from goka.processing.builders import Builders, leveldb_store
from goka.processing.config import TaskConfig
from goka.processing.epoch import run_epoch
from goka.processing.worker import Worker
from goka.storage import MemoryStorage, Storage, WriteBatch

from .fake_kafka import FakeKafka
from .machines import CLICKS, IN, table_of

USERS = 4


class Crash(Exception):
    """The process died between the flush and the commit."""


class CrashingStores:
    """LevelDB stores whose next commit of input offsets fails while :attr:`armed`."""

    def __init__(self) -> None:
        self.armed = False

    def __call__(self, path: Path, table: str) -> Storage:
        return _CrashingStore(leveldb_store(path, table), self)  # type: ignore[return-value]


class _CrashingStore:
    def __init__(self, inner: Storage, stores: CrashingStores) -> None:
        self.inner, self.stores = inner, stores

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def write(self, batch: WriteBatch) -> None:
        if self.stores.armed and any(t == IN for t, _ in batch.offsets):
            self.stores.armed = False
            raise Crash
        self.inner.write(batch)


class AppliedRanges(RuleBasedStateMachine):
    """One partition of a click count run by generated steps (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.kafka = FakeKafka(partitions=1)
        self.clicks: list[str] = []
        self.stores = CrashingStores()
        self.machines = 0  # how many machines the partition ran on
        self.machine = 0  # the one it runs on
        self.worker: Worker | None = None
        self.applied = -1  # the store's offset after the last step
        self.high = 0  # the furthest any store got
        self.root = Path()
        self.snapshots = True

    @initialize(snapshots=st.booleans())
    def begin(self, snapshots: bool) -> None:
        """Snapshots on (a moved partition restores one) or off (its older store is caught up,
        or it is rebuilt)."""
        self.snapshots = snapshots
        self.start()

    def start(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="goka-applied-"))
        self.new_machine()

    def config(self, **overrides: Any) -> TaskConfig:
        builders = Builders(storage=self.stores, producer=self.kafka.producer,
                            reader=self.kafka.reader)  # fmt: skip
        url = f"memory://{self.root.name}" if self.snapshots else None
        return TaskConfig(CLICKS, "fake:9092", state_dir=str(self.root / f"machine-{self.machine}"),
                          snapshot_dir=url, snapshot_interval=1e-9,
                          builders=builders, commit_interval=0, **overrides)  # fmt: skip

    def end(self) -> int:
        return self.kafka.end(IN, 0)

    # -- steps -----------------------------------------------------------------------------------
    @rule(n=st.integers(1, 25))
    def click(self, n: int) -> None:
        for _ in range(n):
            user = f"u{len(self.clicks) * 7 % USERS}"
            self.kafka.append(IN, user, b"/page", partition=0)
            self.clicks.append(user)

    @rule(start=st.floats(0, 1), length=st.floats(0, 1), fail=st.sampled_from(
        ("", "", "delivery", "commit")))  # fmt: skip
    def batch(self, start: float, length: float, fail: str) -> None:
        """A micro-batch of any range Spark could plan: ``[s, e)`` within the topic, starting
        at most where the group committed."""
        s = int(start * self.committed())
        self.run_batch(s, s + int(length * (self.end() - s)), fail)

    @rule(start=st.floats(0, 1), polls=st.integers(1, 3), fail=st.sampled_from(
        ("", "", "delivery", "commit")), arrive=st.integers(0, 10))  # fmt: skip
    def epoch(self, start: float, polls: int, fail: str, arrive: int) -> None:
        """An epoch from any start Spark could plan, while ``arrive`` clicks come in."""
        s = int(start * self.committed())
        seen = [0]

        def poll() -> None:
            seen[0] += 1
            if seen[0] == 1:
                self.click(arrive) if arrive else None

        self.kafka.on_poll.append(poll)
        try:
            self._fail(fail, lambda: run_epoch(self.config(epoch=3600), self.live(), {0: {IN: s}},
                                               3600, lambda: seen[0] >= polls))  # fmt: skip
        finally:
            self.kafka.on_poll.remove(poll)

    @rule()
    def restart(self) -> None:
        """The process dies (its stores keep what was committed)."""
        self.crash()

    @rule()
    def new_machine(self) -> None:
        """The partition moves to a new machine (a new state directory; snapshots remain)."""
        self.machines += 1
        self.use_machine(self.machines)

    @rule(data=st.data())
    def back_to_an_old_machine(self, data: st.DataObject) -> None:
        """The partition comes back to a machine it ran on (whose store is older)."""
        self.use_machine(data.draw(st.integers(1, self.machines)))

    # -- helpers ---------------------------------------------------------------------------------
    def run_batch(self, start: int, end: int, fail: str = "") -> None:
        self._fail(fail, lambda: PartitionProcessor(self.config(), 0, self.live()).process(
            {IN: (start, end)}))  # fmt: skip

    def committed(self) -> int:
        """Where the group committed: Spark plans no start beyond it (its plans follow the
        tasks' commits, which follow the group's)."""
        return self.kafka.committed.get((CLICKS.group, IN, 0), (0, ""))[0]

    def use_machine(self, number: int) -> None:
        """The partition moves to machine ``number`` (whose store may be older)."""
        self.crash()
        self.machine = number
        self.applied = -1

    def live(self) -> Worker:
        if self.worker is None:
            self.worker = Worker(inbox=False)
        return self.worker

    def crash(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def _fail(self, how: str, step: Any) -> None:
        if how == "delivery":
            self.kafka.fail_deliveries_to.add(CLICKS.table)
        self.stores.armed = how == "commit"
        try:
            step()
        except DeliveryError:
            assert how == "delivery"
        except Crash:
            assert how == "commit"
            self.crash()  # the process died between the flush and the commit
        finally:
            self.kafka.fail_deliveries_to.clear()
            self.stores.armed = False

    def offsets_and_state(self) -> tuple[int, Counter[str]]:
        path = Path(self.config().state_dir) / CLICKS.group / "partition-0"
        with self.live().lease(self.stores, path, CLICKS.table) as lease:
            offset = lease.storage.offsets().get((IN, 0), -1)
            state = Counter({k: int(v) for k, v in lease.storage.items()})
        return offset, state

    # -- what must hold --------------------------------------------------------------------------
    @invariant()
    def the_store_never_goes_back_and_holds_exactly_what_it_applied(self) -> None:
        """A store that records offsets holds exactly the state of the records below them,
        and its offsets never go back; one interrupted while recovering records none (-1):
        it claims nothing, and is rebuilt before it is used."""
        offset, state = self.offsets_and_state()
        if offset < 0:
            self.applied = -1
            return
        assert offset >= self.applied, f"the store went back from {self.applied} to {offset}"
        self.applied, self.high = offset, max(self.high, offset)
        assert state == Counter(self.clicks[:offset]), (offset, state)

    def teardown(self) -> None:
        if self.root == Path():
            return
        try:
            PartitionProcessor(self.config(), 0, self.live()).process(
                {IN: (max(self.applied, 0), self.end())}
            )
            offset, state = self.offsets_and_state()
            assert (offset, state) == (self.end(), Counter(self.clicks))
            assert table_of(self.kafka) == dict(Counter(self.clicks))
        finally:
            self.crash()
            shutil.rmtree(self.root, ignore_errors=True)


TestAppliedRanges = AppliedRanges.TestCase
TestAppliedRanges.settings = settings(  # examples: the profile's (100; 1,000 with "search")
    stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)  # fmt: skip


def test_a_catch_up_cut_short_is_not_taken_as_current_by_a_batch_planned_below_it() -> None:
    """A partition that comes back to a machine catches its older store up from the table in
    chunks; killed before the offsets were written, the store must not look current to a
    batch planned below its old offsets (after a mode switch, Spark plans behind), or the
    records it replayed are counted again."""
    machine = AppliedRanges()
    machine.snapshots = False  # the machine's own older store is the base of its catch-up
    machine.start()
    try:
        machine.click(10)
        machine.run_batch(0, 10)  # machine 1: its store at 10
        machine.new_machine()
        machine.click(10)
        machine.run_batch(10, 20)  # machine 2 rebuilds to 10, goes to 20
        machine.use_machine(1)
        machine.run_batch(20, 20, fail="commit")  # catches 10..19 up, dies before its offsets
        machine.run_batch(5, 20)  # planned below the old offsets
        offset, state = machine.offsets_and_state()
        assert (offset, state) == (20, Counter(machine.clicks))
    finally:
        machine.teardown()


# -- the rule's two halves, alone ------------------------------------------------------------------
def test_what_is_applied_of_a_range_behind_inside_and_beyond_the_store() -> None:
    applied = Applied(0, {IN: 30})
    ranges = {"behind": (0, 20), "inside": (20, 50), "beyond": (40, 60)}
    assert {n: applied.skipped({IN: r}) for n, r in ranges.items()} == {
        "behind": 20, "inside": 10, "beyond": 0}  # fmt: skip
    assert {n: applied.todo({IN: r})[IN] for n, r in ranges.items()} == {
        "behind": (30, 20), "inside": (30, 50), "beyond": (40, 60)}  # fmt: skip
    assert {n: applied.ends({IN: r})[IN] for n, r in ranges.items()} == {
        "behind": 30, "inside": 50, "beyond": 60}  # fmt: skip


def test_a_commit_below_the_stored_offsets_is_refused_and_writes_nothing() -> None:
    store = MemoryStorage(CLICKS.table)
    store.write(WriteBatch(values={"u0": b"3"}, offsets={(IN, 0): 30, (CLICKS.table, 0): 3}))
    behind = WriteBatch(values={"u0": b"4"}, offsets={(IN, 0): 20, (CLICKS.table, 0): 4})
    with pytest.raises(OffsetRegressionError, match=r"'clicks' partition 0: stored 30, commit 20"):
        commit(store, behind, who="group 'counts' partition 0 (store partition)")
    assert store.get("u0") == b"3" and store.offsets()[(IN, 0)] == 30
    commit(store, WriteBatch(values={"u0": b"4"}, offsets={(IN, 0): 30}), who="same offset")
    assert store.get("u0") == b"4"
