"""One partition in a continuous epoch (:mod:`goka.processing.epoch`): its stores, where it
is in its inputs, and its commits, which do not stop it.

A commit (every ``commit_interval``) *seals* what the partition processed since the last one:
its state changes, its inputs' offsets, and the outputs it produced meanwhile (a
:class:`~goka.processing.output.Generation`). The partition processes on; the changes are
written to the store with the offsets (and the changelogs' ends) once every one of those
outputs is acknowledged, commits in order (the loop looks at each turn). Until then they are
read from memory: state changes, and a timed group's time rows (timers, windows and their
indexes: :class:`~goka.time.pending_rows.PendingRows` keeps a generation per commit). A commit
waits for its outputs when :data:`MAX_SEALED` commits wait already, and at an epoch's end.

A group without time rows or final results holds its acknowledged commits back from the store
for ``write_interval`` (not in a bridge between epochs) and writes them together, each changed
key once (a LevelDB write costs about a microsecond a key; a busy key changes many times a
second): at once when a commit finds nothing new, :data:`UNWRITTEN_KEYS` keys wait, or the
epoch ends. A crash loses only what is read again: under at-least-once the records since the
store's offsets are processed again; under exactly-once the store catches up from the
committed changelog.
"""

from __future__ import annotations

import heapq
import json
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from goka.errors import FencedError
from goka.group.effects import BatchResult, Message
from goka.group.engine import Engine
from goka.processing.applied import record_before
from goka.processing.output import Generation
from goka.processing.stores import PartitionStores
from goka.processing.summary import PartitionSummary, store_bytes
from goka.processing.timeline import no_lap
from goka.time.pending_rows import let_go

__all__ = [
    "LEAD_COMMITS",
    "MAX_SEALED",
    "UNWRITTEN_KEYS",
    "CommitLead",
    "Epoch",
    "Sealed",
    "commit_all",
]


class Epoch:
    """One partition in an epoch (see :func:`run_epoch`): its stores, its position, what it
    has not committed yet."""

    def __init__(
        self, stores: PartitionStores, positions: dict[str, int], summary: PartitionSummary
    ) -> None:
        self.stores, self.positions, self.summary = stores, positions, summary
        self.config, self.graph, self.partition = stores.config, stores.graph, stores.partition
        self.inputs = [t for t in self.graph.input_topics() if t in positions]
        self.joins = {t: stores.leases[f"join-{t}"].storage for t in self.graph.joins}
        self.pending: dict[str, bytes | None] = {}  # state changes not written yet
        self.changes: dict[str, bytes | None] = {}  # those since the last commit sealed
        self.sealed: deque[Sealed] = deque()  # commits waiting for their outputs
        get, pending = stores.store.get, self.pending

        def read(key: str) -> bytes | None:
            return pending[key] if key in pending else get(key)

        self.sections = stores.pending_rows(generations=True)  # time rows not written yet
        self.engine = Engine(
            self.graph, self.partition, store=read,
            tables={**{t: s.get for t, s in self.joins.items()}, **stores.clients.lookups()},
            on_error=self.config.on_error, max_message_bytes=self.config.max_message_bytes,
            fire_budget=self.config.fire_budget, deferred_finals=True,
            window_cache=self.config.window_cache,
            whole_commits=self.config.guarantee == "exactly-once",
            **stores.engine_sections(self.sections),
        )  # fmt: skip
        self.output = stores.output()
        #: records stay in flight across calls (a group with records in flight that keeps no
        #: time and joins no table: a join's record must wait for the records before it)
        self.carrying = self.engine.carries and not self.joins
        self.unreleased: deque[Message] = deque()  # given to the engine, not given back
        self.committed = self.reached = dict(positions)  # written; sealed
        # commits acknowledged, written together every write_interval (a group whose time
        # rows or final results go with each commit writes each, as does a bridge: the next
        # task's producer fences it under exactly-once, and what it held back would be read
        # again from the changelog as that task begins)
        self.interval = self.config.write_interval
        self.held_back = (self.interval > 0 and self.sections is None
                          and stores.finals is None and not stores.bridging)  # fmt: skip
        self.unwritten: Sealed | None = None
        self.written_at = time.monotonic()
        if self.graph.timed:  # what a commit inside a backlog left is due now
            self._process([], after=record_before({t: positions[t] for t in self.inputs}))

    @classmethod
    def begin(cls, stores: PartitionStores, starts: Mapping[str, int]) -> Epoch:
        """Make ``stores`` current for an epoch planned from ``starts`` (inputs and joined
        tables): inputs from where the group committed if that is further, joined tables up
        to their end (current before any input, as Goka recovers them)."""
        summary = PartitionSummary(stores.partition, started_at=time.time())
        inputs = [t for t in stores.graph.input_topics() if t in starts]
        target = stores.begin({t: starts[t] for t in inputs}, summary)
        applied = stores.applied(inputs)
        for topic in inputs:  # an epoch follows its inputs from here: they must still be there
            stores.check(topic, applied.offsets[topic])
        # what it skips: beyond where it begins (the group's commits, where further than
        # Spark's plan: Spark plans an epoch before the previous one and its bridge end)
        stores.skip(applied, applied.behind(target, inputs), summary, check=False)
        positions = dict(applied.offsets)
        for table in stores.graph.joins:
            reflected = stores.applied([table]).offsets[table]
            high = stores.check(table, max(starts[table], reflected))
            positions[table] = stores.recover_join(table, high, summary)
        return cls(stores, positions, summary)

    def finish(self, started: float, *, wait: bool = True) -> PartitionSummary:
        """Commit the group's offsets (``wait``: for the broker, as a processor stops; else
        processing goes on here or elsewhere at once, and commits them on), snapshot the
        stores if due; return the epoch's summary."""
        summary = self.summary
        summary.ends = json.dumps({t: self.positions[t] for t in self.inputs})
        summary.store_bytes = store_bytes(self.stores.store)
        self.stores.group_offsets.commit(self.committed, wait=wait)
        self.stores.snapshot(summary)
        summary.uploads = json.dumps([asdict(r) for r in self.stores.worker.reports()])
        summary.seconds = time.monotonic() - started
        return summary

    def apply(self, rows: list[Message]) -> None:
        by_topic: dict[str, list[Message]] = {}
        for row in rows:
            by_topic.setdefault(row[0], []).append(row)
        if len(by_topic) > 1:  # records of several topics: in time order, each topic in order
            rows = list(heapq.merge(*by_topic.values(), key=lambda m: m[4]))
        if not self.joins:
            self._process(rows)
            return
        run: list[Message] = []
        for row in rows:  # a join sees the table updates that precede an input record in time
            if run and (row[0] in self.joins) != (run[0][0] in self.joins):
                self._join(run) if run[0][0] in self.joins else self._process(run)
                run = []
            run.append(row)
        self._join(run) if run[0][0] in self.joins else self._process(run)

    def _process(self, messages: list[Message], after: Message | None = None) -> None:
        if self.carrying:  # (records in flight across calls: what came back since the last)
            self.unreleased.extend(messages)
            self._carried(self.engine.carry(messages, self.config.in_flight_bytes))
            return
        rest = messages
        while True:
            result, after = self.engine.process(rest, after=after), None
            self._took(result, rest[: result.consumed])
            rest = rest[result.consumed :]
            if not rest and not self.engine.backlog:
                return
            self.commit(wait=True)  # what fired hit the budget: commit, then go on

    def _took(self, result: BatchResult, done: Iterable[Message]) -> None:
        """Pass on what an engine call did, ``done`` its records done."""
        self.stores.take(result, self.output, self.summary, self.sections)
        changes = result.changes()
        self.pending.update(changes)
        self.changes.update(changes)
        positions = self.positions
        for message in done:
            positions[message[0]] = message[1] + 1

    def _carried(self, result: BatchResult) -> None:
        """Pass on what came back of the records in flight: the first ``consumed`` given."""
        if not result.consumed:  # (nothing came back: nothing to send)
            self.summary.flown(result.flight)
            return
        self._took(result, [self.unreleased.popleft() for _ in range(result.consumed)])

    def harvest(self) -> None:
        """Take what the records in flight across calls released since the last call (a
        partition that read nothing new this time)."""
        if self.carrying and self.unreleased:
            self._carried(self.engine.carry([], self.config.in_flight_bytes))

    @property
    def reading(self) -> dict[str, int]:
        """Where reading goes on: past the records given to the engine, not given back yet."""
        reading = dict(self.positions)
        for message in self.unreleased:
            reading[message[0]] = message[1] + 1
        return reading

    def drain(self, seconds: float, first: float = 0.0) -> None:
        """End the records in flight across calls: wait up to ``seconds`` for them to be
        released (``first`` more for the first one); those that are not by then are read
        again from the positions committed (by the next epoch or bridge)."""
        if self.carrying:
            self._carried(self.engine.drain(seconds, first))
            self.unreleased.clear()

    def _join(self, records: list[Message]) -> None:
        self.stores.apply_join(records[0][0], records, records[-1][1] + 1, self.summary)
        self.positions[records[0][0]] = records[-1][1] + 1

    def commit(self, lap: Callable[[str], None] = no_lap, *, wait: bool = False) -> None:
        """Seal what was processed since the last commit: its state changes are written with
        its offsets once its outputs are acknowledged (:meth:`settle`), the loop processing on
        meanwhile (``wait``: now, with every commit held back; and when :data:`MAX_SEALED`
        wait). Under exactly-once the commit is a transaction, committed now (its outputs
        waited for). ``lap``: each step done, for the loop's timeline."""
        new = self.seal()
        acknowledged = wait
        if new and self.stores.exactly is not None:
            self.transact()
            acknowledged = True
        if self.sealed or self.unwritten is not None:
            self.settle(lap, wait=acknowledged or len(self.sealed) > MAX_SEALED,
                        write=wait or not new)  # fmt: skip

    def seal(self) -> bool:
        """The first step of :meth:`commit`: seal what was processed since the last one, and
        return whether there was something (else the group's offsets catch up, if due)."""
        sections = self.sections
        fresh = None if sections is None else sections.fresh
        if self.positions != self.reached or self.changes or (fresh and any(fresh.values())):
            inputs = {t: self.positions[t] for t in self.inputs}
            rows = None if sections is None else sections.seal()
            reached, done = dict(self.positions), self.summary.processed
            self.sealed.append(Sealed(self.output.seal(), self.changes, inputs, reached, rows,
                                      done))  # fmt: skip
            self.changes, self.reached = {}, dict(self.positions)
            return True
        if not self.sealed:
            self.stores.group_offsets.catch_up(due=True)
        return False

    def transact(self) -> None:
        """Under exactly-once, the second step of :meth:`commit`: the transaction of the
        commit just sealed commits with its inputs' offsets, once its outputs are
        acknowledged. (It waits for the broker only: the transactions of several partitions
        may commit at once, :func:`commit_all`.)"""
        exactly = self.stores.exactly
        assert exactly is not None
        exactly.commit(self.sealed[-1].inputs, self.output.wait)

    def settle(self, lap: Callable[[str], None] = no_lap, *, wait: bool = False,
               write: bool = False) -> None:  # fmt: skip
        """Write the sealed commits whose outputs are all acknowledged, in order (``wait``:
        all of them, waiting for their outputs). Where the group writes its state every
        ``write_interval`` (:attr:`held_back`), they are held back and written together when
        the interval has passed, :data:`UNWRITTEN_KEYS` keys wait, or ``write``."""
        self.output.wait() if wait else self.output.poll()
        lap("flush")
        while self.sealed:
            head = self.sealed[0]
            ends = self.output.settle(head.generation, waited=wait)
            if ends is None:
                break
            if self.stores.finals is not None:  # final results delivered after an earlier
                # commit wrote their changelog rows (watermarks, expiries) into the store, after
                # this commit's rows in the changelog: the store is past this commit's ends
                stored = self.stores.store.offsets()
                ends = {t: max(o, stored.get((t, self.partition), o)) for t, o in ends.items()}
            self.sealed.popleft()
            if self.held_back:
                self._hold(head, ends)
            else:
                self._write(head, ends, lap)
        held = self.unwritten
        if held is not None and (
            write
            or len(held.changes) >= UNWRITTEN_KEYS
            or time.monotonic() - self.written_at >= self.interval
        ):
            self.unwritten = None
            self._write(held, held.ends, lap)

    def _hold(self, head: Sealed, ends: dict[str, int]) -> None:
        """Add ``head`` (acknowledged, with its changelogs' ``ends``) to what is unwritten."""
        held = self.unwritten
        if held is None:
            head.ends = ends
            self.unwritten = head
            return
        held.changes.update(head.changes)
        held.ends.update(ends)
        held.inputs, held.reached, held.processed = head.inputs, head.reached, head.processed

    def _write(self, head: Sealed, ends: Mapping[str, int], lap: Callable[[str], None]) -> None:
        """Write ``head``'s changes with its offsets and the changelogs' ``ends`` (its outputs
        acknowledged): what is read from memory until then is let go."""
        self.stores.write(head.changes, head.inputs, ends, self.summary,
                          sections=head.sections, lap=lap, defer=True)  # fmt: skip
        self.written_at = time.monotonic()
        let_go(self.pending, head.changes, [self.changes, *(s.changes for s in self.sealed)])
        if self.sections is not None and head.sections is not None:
            self.sections.written(head.sections, [s.sections or {} for s in self.sealed])
            self.engine.committed()  # (the time state reads what is due afresh)
        self.committed = head.reached
        if self.stores.board is not None:  # what the monitor counts before the epoch ends
            self.stores.board.progress(self.partition, head.processed,
                                       bridge=self.stores.bridging)  # fmt: skip
        self.stores.snapshot(self.summary, quick=True)  # if due: a long epoch too
        lap("snapshot")

    def deliver(self, lap: Callable[[str], None] = no_lap, *, wait: bool = False) -> None:
        """Go on producing the final results a commit made due (:data:`FINALS_PER_TURN` of
        them; ``wait``: all, and those of windows closed meanwhile, waiting for them)."""
        stores, ended = self.stores, False
        while stores.delivery is not None:
            ended = stores.deliver_some(self.summary, None if wait else FINALS_PER_TURN) or ended
            if not wait:
                break
        lap("finals")
        if ended and self.sections is not None:  # windows whose results went out may expire
            self.sections.forget_reads()
            self.engine.committed()


#: How many commits may wait for their outputs before the next one waits for them all.
MAX_SEALED = 4

#: How many changed keys held back from the store (``write_interval``) are written at once.
UNWRITTEN_KEYS = 100_000


def commit_all(epochs: Sequence[Epoch], lap: Callable[[str], None] = no_lap,
               pool: ThreadPoolExecutor | None = None) -> None:  # fmt: skip
    """:meth:`Epoch.commit` each of ``epochs`` (the partitions of one task). Under
    exactly-once with a ``pool``, their transactions commit at once (each partition has its
    own producer, and the waits for the broker overlap: a commit of the task takes the longest
    of them, not their sum); then each is settled in turn. A transaction that fails leaves
    the others committed and settled, then its error is raised (the next task replays a
    committed changelog tail that a store missed)."""
    if pool is None or len(epochs) < 2 or epochs[0].stores.exactly is None:
        for epoch in epochs:
            epoch.commit(lap)
        return
    sealed = [epoch.seal() for epoch in epochs]
    running = [
        (epoch, pool.submit(epoch.transact))
        for epoch, new in zip(epochs, sealed, strict=True)
        if new
    ]
    errors = [error for _, future in running if (error := future.exception()) is not None]
    for epoch, future in running:
        if future.exception() is None:
            epoch.settle(lap, wait=True)
    if errors:  # a fenced partition says why, whatever else failed (nothing is retried then)
        raise next((e for e in errors if isinstance(e, FencedError)), errors[0])


class CommitLead:
    """How much earlier than ``interval`` after the last commit's start the next one begins.
    Under exactly-once a record is visible when the transaction holding it has committed: one
    processed just after a commit began waits the interval, then the next commit's wait for
    the broker (6-40 ms here, more now and then). Beginning each commit that much early, the
    longest of the last :data:`LEAD_COMMITS` (at most half the interval), a record is visible
    about ``interval`` after it was processed. Under at-least-once outputs go out at once:
    none."""

    __slots__ = ("_half", "_recent", "whole")

    def __init__(self, interval: float, whole: bool) -> None:
        self.whole, self._half = whole, interval / 2
        self._recent: deque[float] = deque(maxlen=LEAD_COMMITS)

    def took(self, began: float) -> float:
        """A commit that began at ``began`` (monotonic) ended now; return the lead."""
        if not self.whole:
            return 0.0
        self._recent.append(time.monotonic() - began)
        return min(self._half, max(self._recent))


#: How many recent commits' durations :class:`CommitLead` takes the longest of.
LEAD_COMMITS = 20


#: How many final results a turn of the loop produces (10-20 ms here), the rest waiting for
#: the next turns: a window boundary closes a window per key, and the loop must not stop for
#: them all.
FINALS_PER_TURN = 1_000


@dataclass
class Sealed:
    """A commit waiting for its outputs (:meth:`Epoch.commit`): the state changes to write,
    the inputs' offsets to write with them, the offsets of all it follows, the time rows."""

    generation: Generation
    changes: dict[str, bytes | None]
    inputs: dict[str, int]
    reached: dict[str, int]
    sections: dict[str, dict[str, bytes | None]] | None
    processed: int = 0
    ends: dict[str, int] = field(default_factory=dict)  # once acknowledged (held back)
