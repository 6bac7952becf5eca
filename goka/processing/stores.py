"""One partition's stores for one task, and the one owner of what is applied and of commits.

A micro-batch (:mod:`goka.processing.batch`) and an epoch (:mod:`goka.processing.epoch`) go
through :class:`PartitionStores`: it leases the group's and joined tables' stores from the
worker, makes them current for where the task begins (at least where the group committed),
says what of a planned range they applied (:mod:`goka.processing.applied`), and commits: every
output acknowledged (exactly-once: in a committed transaction, :mod:`.exactly_once`), then
the state changes, input offsets and changelogs' ends in one write (offsets only forward),
then the group's offsets; at most every ``snapshot_interval``, a snapshot is staged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from goka.group.effects import TIMER, BatchResult, Message
from goka.keys import key_str
from goka.processing.applied import Applied, commit
from goka.processing.clients import Clients
from goka.processing.config import TaskConfig
from goka.processing.exactly_once import exactly_once
from goka.processing.finals import Delivery, Finals, Written
from goka.processing.group_offsets import GroupOffsets
from goka.processing.layout import move_nested
from goka.processing.leases import Lease
from goka.processing.output import Output
from goka.processing.recovery import StoreRecovery, checked_watermarks
from goka.processing.signals import PartitionBoard
from goka.processing.summary import PartitionSummary
from goka.processing.timeline import no_lap
from goka.processing.uploads import stage_due
from goka.processing.worker import Worker, frozen
from goka.storage import Storage, WriteBatch
from goka.storage.snapshots import Manifest
from goka.time.pending_rows import PendingRows, section_graces

__all__ = ["PartitionStores"]

log = logging.getLogger(__name__)


class PartitionStores:
    """The stores of ``partition`` for one task, leased until ``stack`` closes (see the module
    docstring). Not thread-safe.

    Args:
        config: the group's task configuration.
        partition: the partition number.
        worker: the process's shared resources.
        stack: releases the leases when the task ends.
        ask: ask another process that holds a store to release it (False: a bridge, which
            never waits for others).

    Raises:
        StorageLockedError: a store is held elsewhere (for ``store_timeout``, or at once when
            not ``ask``).
        StorageError: a store cannot be opened.
    """

    def __init__(
        self, config: TaskConfig, partition: int, worker: Worker, stack: ExitStack, *,
        ask: bool = True,
    ) -> None:  # fmt: skip
        self.config, self.graph, self.partition, self.worker = (
            config, config.graph, partition, worker,
        )  # fmt: skip
        self.clients = Clients(config, worker)
        self.root = Path(config.state_dir) / self.graph.group
        move_nested(config.state_dir, self.graph.group)  # (the layout of before: once)
        self._inputs = frozenset(self.graph.input_topics())
        self._manifests: list[Manifest] | None = None
        url = config.board_url
        self.bridging = not ask  # (a bridge between epochs)
        options = config.storage_options
        self.board: PartitionBoard | None = None if url is None else worker.client(
            ("board", url, frozen(options)),
            lambda: PartitionBoard(url, storage_options=options), PartitionBoard.settle,
        )  # fmt: skip
        self.delivery: Delivery | None = None  # final results being produced (``defer``)
        self._written: Mapping[str, int] = {}  # the inputs' positions last written
        self.leases: dict[str, Lease] = {
            "partition": stack.enter_context(self._lease("partition", self.graph.table, ask))
        }
        for table in self.graph.joins:
            self.leases[f"join-{table}"] = stack.enter_context(
                self._lease(f"join-{table}", table, ask)
            )
        self.exactly = exactly_once(config, self.clients, partition, stack, start=ask)
        #: the group's offsets in Kafka (under exactly-once, in each commit's transaction)
        self.group_offsets = GroupOffsets(
            self.clients.reader, self.graph.group, partition, self._inputs,
            transactional=self.exactly is not None,
        )  # fmt: skip
        exactly = self.exactly
        self.finals = (  # (exactly-once: deliveries in transactions)
            Finals(self.graph, partition, self.clients.producer() if exactly is None else
                   exactly.producer, self.clients.reader(), flush_timeout=config.flush_timeout,
                   read_timeout=config.broker_timeout, transaction=exactly)
            if any(e.emit == "final" for e in self.graph.windows.values()) else None
        )  # fmt: skip

    @property
    def store(self) -> Storage:
        """The group store (a restore replaces it: read it anew each time)."""
        return self.leases["partition"].storage

    @property
    def fresh(self) -> bool:
        """Was the group store opened for this task (False: open in this process since an
        earlier one)?"""
        return self.leases["partition"].fresh

    @property
    def leased(self) -> list[Lease]:
        """Every lease of this task's stores."""
        return list(self.leases.values())

    # -- beginning -------------------------------------------------------------------------------
    def begin(self, starts: Mapping[str, int], summary: PartitionSummary) -> dict[str, int]:
        """Make the group store current for processing the inputs from ``starts`` as Spark
        planned them, or from where the group committed if that is further (as Go Goka
        resumes a group: the group commits after the state, so the table holds the outputs
        of every record below its commits; Spark plans behind them after a crash, after a
        continuous run, on a new checkpoint). Never processing those again also keeps the
        table free of a run's outputs behind those of a run that got further, which no
        replay of the table could order.

        Returns:
            Where processing begins (the target the store was made current for).
        """
        committed = self.clients.reader().committed(self.graph.group, self.partition, list(starts))
        target = {t: max(s, committed[t][0]) if t in committed else s for t, s in starts.items()}
        recovery = self._recovery("partition", self.graph.table if self.graph.persist else None)
        if self.board is not None:
            board, partition = self.board, self.partition
            recovery.report = lambda state, records, of: board.report(partition, state,
                                                                      records, of)  # fmt: skip
        done = recovery.recover(target, unfinished=True)
        if self.exactly is not None and done.origin in ("reused", "opened"):
            done.records += recovery.catch_up_tail(list(starts))  # (see its docstring)
        if self.board is not None:
            self.board.report(self.partition, "running")
        applied = {t: o for t, o in self.applied(list(starts)).offsets.items() if o >= 0}
        if self.finals is not None and self.exactly is None:
            self.finals.prepare(self.store)
        self._deliver(applied, summary, check=True)  # a stopped task may have left some
        summary.count(done, self.leases["partition"])
        summary.store = done.origin
        return target

    def recover_join(self, table: str, to: int, summary: PartitionSummary) -> int:
        """Make a joined table's store reflect its table up to ``to`` at least; return the
        offset it reflects."""
        lease = self.leases[f"join-{table}"]
        summary.count(self._recovery(f"join-{table}", table).recover({table: to}, end=to), lease)
        return self.applied([table]).offsets[table]

    def applied(self, topics: list[str]) -> Applied:
        """What the stores have applied of ``topics``: the group store's offsets of inputs and
        loop, a joined store's offset of its table (-1: none)."""
        offsets = self.store.offsets()
        found = {t: offsets.get((t, self.partition), -1) for t in topics if t in self._inputs}
        for table in (t for t in topics if t in self.graph.joins):
            stored = self.leases[f"join-{table}"].storage.offsets()
            found[table] = stored.get((table, self.partition), -1)
        return Applied(self.partition, found)

    def check(self, topic: str, position: int) -> int:
        """Fail unless ``topic`` still holds ``position`` of this partition; return its high
        watermark.

        Raises:
            TopicRewoundError: the topic ends before ``position`` or starts after it.
        """
        who = f"group {self.graph.group!r} (partition store)"
        return checked_watermarks(self.clients.reader(), topic, self.partition, position, who)[1]

    def skip(self, applied: Applied, ranges: Mapping[str, tuple[int, int]],
             summary: PartitionSummary, *, check: bool = True) -> None:  # fmt: skip
        """Count (and log) the records of ``ranges`` the stores have applied already, after
        checking (unless not ``check``) that each topic still reaches the store's offset where
        it skips to it."""
        for topic, (start, _) in ranges.items():
            if check and applied.offsets[topic] > start:
                self.check(topic, applied.offsets[topic])
        skipped = applied.skipped({t: r for t, r in ranges.items() if t in self._inputs})
        if skipped:
            log.info("group %s partition %d: %d records already applied, skipped (stores at %s, "
                     "ranges %s)", self.graph.group, self.partition, skipped,
                     dict(applied.offsets), dict(ranges))  # fmt: skip
        summary.skipped_applied += skipped

    # -- applying and committing -----------------------------------------------------------------
    def pending_rows(self, *, generations: bool = False) -> PendingRows | None:
        """The time sections of the group store (a timed group; else None), to read and
        change between commits (read it after :meth:`begin`: a restore replaces the store;
        ``generations``: see :class:`~goka.time.pending_rows.PendingRows`)."""
        if not self.graph.timed:
            return None
        graces = section_graces(self.graph)
        return PendingRows({t: self.store.section(t) for t in graces}, graces,
                           generations=generations)  # fmt: skip

    def take(self, result: BatchResult, output: Output, summary: PartitionSummary,
             pending: PendingRows | None) -> None:  # fmt: skip
        """Pass on what an engine call did: the effects go to ``output``, the time changelog
        rows to ``pending`` (a timed group's). (Windows' final results are produced after
        the commit, from the store: :mod:`goka.processing.finals`.)"""
        if self.exactly is not None:
            self.exactly.begin()
        output.send(result, summary)
        summary.flown(result.flight)
        if pending is not None:  # the time changelog rows
            for kind, topic, key, value, _, _ in result.effects:
                if kind == TIMER:
                    pending.apply(topic, key, value)
            pending.apply_windows(result.windows)  # (the batch's last value of each row)

    def engine_sections(self, pending: PendingRows | None) -> dict[str, Any]:
        """The engine's keyword arguments for the time sections of ``pending``."""
        if pending is None:
            return {}
        windows = {n: pending.view(e.topic) for n, e in self.graph.windows.items()}
        return {"timers": pending.view(self.graph.group.timers), "windows": windows}

    def output(self) -> Output:
        """An output for this task's effects, on the worker's producer (exactly-once: the
        partition's transactional one, a changelog row per changed key and commit)."""
        exactly, clients = self.exactly, self.clients
        producer, failed = ((exactly.producer, exactly.failed) if exactly is not None else
                            (clients.producer(), clients.discard_producer))  # fmt: skip
        return Output(producer, self.partition, self.config, self.store, failed,
                      coalesce=exactly is not None)  # fmt: skip

    def apply_join(self, table: str, rows: list[Message], end: int,
                   summary: PartitionSummary) -> None:  # fmt: skip
        """Apply a joined table's records (not applied yet) to its store, up to ``end``."""
        batch = WriteBatch(values={key_str(r[2]): r[3] for r in rows if r[2] is not None})
        batch.set_offset(table, self.partition, end)
        commit(self.leases[f"join-{table}"].storage, batch, who=self._who(f"join-{table}"))
        summary.table_records += len(rows)

    def commit(
        self, output: Output, changes: Mapping[str, bytes | None], positions: Mapping[str, int],
        summary: PartitionSummary, *, wait: bool = False,
        sections: Mapping[str, dict[str, bytes | None]] | None = None,
        lap: Callable[[str], None] = no_lap,
    ) -> None:  # fmt: skip
        """Wait for every output so far, then :meth:`write` (``lap`` is told each step done:
        :class:`~goka.processing.timeline.Timeline`).

        Raises:
            DeliveryError: an output was not acknowledged (nothing is written).
            TopicRewoundError: the group table went back (nothing is written).
            OffsetRegressionError: an offset would go back (a bug; nothing is written).
            StorageError: the write failed.
        """
        exactly = self.exactly  # (the group's offsets go while the outputs are acknowledged)
        ends = output.flush() if exactly is None else exactly.commit(positions, output.flush)
        lap("flush")
        self.write(changes, positions, ends, summary, wait=wait, sections=sections, lap=lap)

    def write(
        self, changes: Mapping[str, bytes | None], positions: Mapping[str, int],
        ends: Mapping[str, int], summary: PartitionSummary, *, wait: bool = False,
        sections: Mapping[str, dict[str, bytes | None]] | None = None,
        lap: Callable[[str], None] = no_lap, defer: bool = False,
    ) -> None:  # fmt: skip
        """Write ``changes`` (and the rows of the time ``sections``) with the input
        ``positions`` and the changelogs' ``ends`` (their outputs acknowledged) in one write,
        then tell Kafka the group's offsets (if ``wait``, until the broker answered). Final
        results the write makes due are produced, or with ``defer`` begin to be
        (:attr:`delivery`, :meth:`deliver_some`), if none are being produced.

        Raises:
            OffsetRegressionError: an offset would go back (a bug; nothing is written).
            StorageError: the write failed.
        """
        rows = {t: r for t, r in (sections or {}).items() if r}  # (written at once)
        batch = WriteBatch(values=dict(changes), sections=rows)
        for topic, offset in {**positions, **ends}.items():
            batch.set_offset(topic, self.partition, offset)
        commit(self.store, batch, who=self._who("partition"))
        summary.commits += 1
        self._written = positions
        lap("write")
        delivered = self._deliver(positions, summary, check=False, written=rows,
                                  defer=defer and self.exactly is None)  # fmt: skip
        lap("finals")
        if not delivered and self.group_offsets.written(positions, wait=wait):  # (delivered:
            lap("group_commit")  # the offsets went first)

    def _deliver(self, positions: Mapping[str, int], summary: PartitionSummary, *,
                 check: bool, defer: bool = False,
                 written: Written | None = None) -> bool:  # fmt: skip
        """Produce the committed final results (:mod:`goka.processing.finals`) once the group
        has committed ``positions``, the store's: a store rebuilt elsewhere begins there, so
        it never processes again a batch whose final results went out (``defer``: begin to,
        :attr:`delivery`). Return whether the group's offsets were committed (False: nothing
        to deliver, some being delivered, or the commit failed: the results wait for the
        next commit or task)."""
        if self.finals is None or self.delivery is not None or not self.finals.pending(self.store):
            return False
        if self.exactly is None and not self.group_offsets.commit(positions, wait=True):
            return False  # (exactly-once: the offsets are committed, and go with the results)
        delivery = self.finals.begin(self.store, check=check, written=written, at=positions)
        if delivery is not None and defer:
            self.delivery = delivery
        elif delivery is not None:
            summary.emits += delivery.finish()
        return True

    def deliver_some(self, summary: PartitionSummary, budget: int | None) -> bool:
        """Go on producing the final results of :attr:`delivery`: up to ``budget`` more (None:
        all, waiting for them). Once all are acknowledged, move the watermarks, and begin
        the results of windows closed meanwhile, if any. Return whether a delivery ended
        (the store changed: windows may have expired)."""
        delivery = self.delivery
        if delivery is None:
            return False
        if budget is not None:
            if not delivery.step(budget):
                return False
            if not delivery.acknowledged:  # (a quiet partition's loop takes no reports)
                delivery.finals.producer.poll(0)
                if not delivery.acknowledged:
                    return False
        self.delivery = None
        summary.emits += delivery.finish()
        self._deliver(self._written, summary, check=False, defer=True)
        return True

    def snapshot(self, summary: PartitionSummary, *, quick: bool = False) -> None:
        """Stage a snapshot of the stores for the worker to upload, if one is due (at most
        every ``snapshot_interval``; ``quick``: a loop's, only once the stores are ready for a
        quick one, see :func:`~goka.processing.uploads.stage_due`)."""
        if self.graph.persist or self.graph.joins:
            summary.snapshot_seconds += stage_due(
                self.clients.snapshots(), self.graph.group, self.partition, self.leases,
                self.root, self.config.snapshot_interval, self.worker.upload,
                quick=quick)  # fmt: skip

    # -- helpers ---------------------------------------------------------------------------------
    def _lease(self, name: str, table: str, ask: bool) -> Any:
        return self.worker.lease(
            self.config.builders.storage, self.config.store_path(name, self.partition), table,
            timeout=self.config.store_timeout, discard_corrupt=True, ask=ask,
        )  # fmt: skip

    def _recovery(self, name: str, topic: str | None) -> StoreRecovery:
        timed = name == "partition" and self.graph.timed
        return StoreRecovery(
            self.leases[name], name, group=self.graph.group, partition=self.partition,
            topic=topic, reader=self.clients.reader(), manifests=self._list_manifests,
            snapshots=self.clients.snapshots(), scratch=self.root / ".restore",
            read_timeout=self.config.broker_timeout,
            sections=section_graces(self.graph) if timed else None,
        )  # fmt: skip

    def _list_manifests(self) -> list[Manifest]:
        if self._manifests is None:
            store = self.clients.snapshots()
            self._manifests = (
                [] if store is None else store.manifests(self.graph.group, self.partition)
            )
        return self._manifests

    def _who(self, name: str) -> str:
        return f"group {self.graph.group!r} partition {self.partition} (store {name})"
