"""Continuous epochs: partition processors that follow their inputs for ``epoch`` seconds,
produce at once and commit every ``commit_interval``.

Each partition begins as a micro-batch does (its stores leased and made current by
:class:`~goka.processing.stores.PartitionStores`; its joined tables current up to their end
before any input, as Goka recovers them), then follows its inputs and joined tables from the
stores' offsets: it runs the engine on each group of records as they arrive (joined tables'
records are applied in time order between them), produces at once, and every
``commit_interval`` commits what it processed since, through the same owner of commits as a
micro-batch, without waiting for its outputs (:mod:`goka.processing.epoch_partition`).

Between two epochs Spark ends the query's batch, writes its checkpoint and plans the next one:
about a second in which no task runs. So that records arriving then are not held back, a task
whose epoch reached its deadline leaves its worker a *bridge*: the worker goes on processing
the same partitions, the same way (commits of state with offsets, group commits), until the
next task of that process begins, another process asks for the stores, the run is stopped, or
:data:`BRIDGE_SECONDS` pass. The next epoch starts where the stores are, and the next task of
the group in that process reports what the bridge did in its summary.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Set
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

from goka.errors import (
    FencedError,
    StorageCorruptError,
    StorageLockedError,
    TransactionError,
)
from goka.kafka.reader import RecordReader
from goka.processing.clients import Clients
from goka.processing.config import TaskConfig
from goka.processing.epoch_partition import CommitLead, Epoch, commit_all
from goka.processing.exactly_once import retrying, start_early
from goka.processing.parked import adopt_parked, cancel_parked, park
from goka.processing.recovery import CHUNK
from goka.processing.starts import (
    Asking,
    followed,
    forget_followed,
    leave_note,
    take_followed,
    take_notes,
    tell,
)
from goka.processing.stores import PartitionStores
from goka.processing.summary import PartitionSummary
from goka.processing.timeline import Timeline
from goka.processing.worker import Worker

__all__ = ["BRIDGE_SECONDS", "DRAIN_SECONDS", "FIRST_SECONDS", "Epoch", "run_epoch"]

log = logging.getLogger(__name__)

#: How long an epoch waits for records before it checks the clock and the stop signal; a
#: bridge checks more often whether another process asks for its stores (it waits meanwhile).
_POLL_SECONDS, _BRIDGE_POLL_SECONDS = 0.05, 0.01
#: The fewest records an epoch asks a poll for (it asks for more while they are quick).
_MIN_CHUNK = 100
#: The longest a worker goes on processing after an epoch, waiting for the next one's task.
BRIDGE_SECONDS = 10.0
#: The longest an epoch waits, as it ends, for its records in flight across reads (a group
#: with records in flight that keeps no time) to be done, unless it leaves them to a bridge
#: or the next task of its process: those still in flight then are read again by what comes
#: next (their callbacks run again); and how much longer for the first one not done, unless
#: the processor stops (so that a record longer than an epoch is not cut at every one).
DRAIN_SECONDS, FIRST_SECONDS = 5.0, 60.0
#: ``{partition: {topic: offset}}``.
Starts = Mapping[int, Mapping[str, int]]


def run_epoch(
    config: TaskConfig,
    worker: Worker,
    starts: Starts,
    seconds: float,
    stop: Callable[[], bool] = lambda: False,
    *,
    bridge: bool = False,
) -> list[PartitionSummary]:
    """Process partitions continuously (see :func:`_run_epoch`); a store found damaged in use
    was moved aside by its lease, and the epoch goes on for the time left on rebuilt stores
    (from what was committed); a transaction that failed (a broker lost: :class:`~goka.errors.
    TransactionError`) leaves the partitions' stores at their last commit, and the epoch goes
    on from there with new producers (:func:`~goka.processing.exactly_once.retrying`).

    Args:
        bridge: if the epoch reaches its deadline, the worker goes on until its next task
            (see the module docstring).
    """
    worker.end_bridge(hold=bridge)  # stores stay open for a bridge (or the next epoch here)
    until = time.monotonic() + seconds
    corrupt, failures = 0, list[float]()
    while True:
        left = max(0.0, until - time.monotonic())
        try:
            summaries, ends = _run_epoch(config, worker, starts, left, stop, handover=bridge)
            break
        except StorageCorruptError as exc:
            if corrupt:
                raise
            corrupt += 1
            log.warning("group %s: epoch goes on with a rebuilt store: %s", config.graph.group,
                        exc)  # fmt: skip
        except TransactionError as exc:
            pause = retrying(failures, exc, stop)
            log.warning("group %s: epoch goes on from its last commit: %s", config.graph.group,
                        exc)  # fmt: skip
            time.sleep(min(pause, left))  # (what failed may take a moment to settle)
    summaries[0].corrupt_stores += corrupt
    by_partition = {s.partition: s for s in summaries}
    for carried in worker.take_carried(config.graph.group):
        by_partition.get(carried.partition, summaries[0]).absorb(carried)
    if bridge and ends is not None and not stop():
        worker.bridge(functools.partial(_bridge, config, worker, ends, stop))
    else:
        worker.hold(False)
    return summaries


def _bridge(
    config: TaskConfig,
    worker: Worker,
    starts: Starts,
    stop: Callable[[], bool],
    ended: Callable[[], bool],
) -> None:
    """Process on between two epochs (see the module docstring); what it did is carried to
    the next task. A failure is left to the next epoch, which meets it again and reports it."""
    group = config.graph.group
    log.debug("group %s: processing on between epochs: partitions %s", group, sorted(starts))
    try:
        summaries, _ = _run_epoch(config, worker, starts, min(BRIDGE_SECONDS, config.epoch),
                                  stop, bridging=True, ended=ended)  # fmt: skip
    except (StorageLockedError, FencedError) as exc:  # the next epoch took the stores (or,
        log.debug("group %s: no processing between epochs: %s", group, exc)  # exactly-once:
        return  # started their producers) meanwhile: all is well
    except Exception as exc:
        log.warning("group %s: processing between epochs ended early: %s", group, exc)
        return
    finally:
        if not ended():  # else the next task of this process takes the stores over
            worker.hold(False)
            forget_followed(worker, group)  # (only that task may take them as they are)
            cancel_parked(worker, group)  # (records left in flight: read again elsewhere)
    log.debug("group %s: between epochs: %s records in %.2f s", group,
              sum(s.processed for s in summaries), max(s.seconds for s in summaries))  # fmt: skip
    worker.carry(group, summaries)


def _run_epoch(
    config: TaskConfig,
    worker: Worker,
    starts: Starts,
    seconds: float,
    stop: Callable[[], bool] = lambda: False,
    *,
    bridging: bool = False,
    handover: bool = False,
    ended: Callable[[], bool] = lambda: False,
) -> tuple[list[PartitionSummary], dict[int, dict[str, int]] | None]:
    """Process partitions continuously for ``seconds`` (an epoch; see the module docstring),
    each from ``starts[partition]`` ``{topic: offset}`` of its inputs and joined tables, or from
    where its stores are if they are ahead; end early once ``stop()`` is true. Return the
    summaries, and where each partition ended if the epoch reached its deadline (else None).
    A bridge (``bridging``) takes only stores no other process holds, and ends early when
    another process asks for one, or ``ended()`` (this process's next task begins).

    One task may run several partitions (a Spark job with fewer task slots than partitions):
    one consumer follows them all, one producer serves them, and every ``commit_interval``
    each commits (:mod:`goka.processing.epoch_partition`).

    Raises:
        ProcessingError: a message failed under the ``fail`` policy.
        DeliveryError: an output was refused or not acknowledged (what was committed before
            stays; the rest is processed again by the next epoch).
        StorageError, BrokerError: a store or the broker failed (likewise).
    """
    clients = Clients(config, worker)
    reader, group = clients.reader(), config.graph.group
    # what each partition's start asks the broker (watermarks, the group's offsets), asked at
    # once while the stores are leased and the producer warms up (goka.processing.starts):
    # the answers may predate what a bridge commits before it lets go of the stores, so a
    # rewound-topic check they fail is asked again (recovery.checked_watermarks), and offsets
    # the group committed since are behind the stores, which the start skips to anyway (the
    # table's end matters only to a store opened afresh); partitions followed here until just
    # now are not asked about: what their last reads answered is known; nor are those whose
    # stores another process here holds: it leaves what it knew as it lets go of them
    known = take_followed(worker, group, starts)
    cancel_parked(worker, group, keep=starts)  # (records left in flight of other partitions)
    held = worker.stores.holder
    noted = {p for p in starts if p not in known and not bridging
             and held(config.store_path("partition", p)) == "elsewhere"}  # fmt: skip
    # under exactly-once, a writer fences the partition's last one before it reads anything
    # that decides where it begins: what it asks is asked after its producers started, and
    # what it knew of a partition whose producer started now is forgotten (the writer it
    # fenced, here or on another machine, may have committed since; what a producer kept
    # here knew stands: a writer that started since has fenced it, and its first commit fails)
    fence_first = config.guarantee == "exactly-once" and not bridging
    asking = None if fence_first else _ask(reader, starts, {*known, *noted}, config)
    try:
        if not bridging:  # a bridge elsewhere processes on until this task's producers are ready
            clients.warm_up(stop)
            fenced = start_early(config, clients, sorted(starts))
            if fence_first:
                known = {p: k for p, k in known.items() if p not in fenced}
                noted -= fenced
                asking = _ask(reader, starts, {*known, *noted}, config)
        assert asking is not None
        started = time.monotonic()
        until = started + seconds
        timeline = Timeline(f"group {config.graph.group} partitions {sorted(starts)}"
                            + (" (between epochs)" if bridging else ""))  # fmt: skip
        with ExitStack() as stack:
            leased = _lease(config, worker, sorted(starts), stack, ask=not bridging)
            timeline.lap("lease")
            asking.wait()
            tell(reader, group, leased, {**known, **take_notes(leased, noted)}, noted)
            timeline.lap("ask")  # (what the answers took beyond the leases)
            epochs = {p: Epoch.begin(leased[p], starts[p]) for p in sorted(starts)}
            adopt_parked(worker, group, epochs)  # (records in flight the last one here left)
            for epoch in epochs.values():  # (records in flight across reads end with it, unless
                stack.callback(epoch.engine.abandon)  # parked for what follows here)
            reader.prefetch([])  # what the starts did not ask for is not kept (it would age)
            timeline.lap("begin")  # stores made current
            return _follow(
                config,
                worker,
                epochs,
                timeline,
                started,
                until,
                stop,
                bridging=bridging,
                handover=handover or bridging,
                ended=ended,
            )
    except BaseException:
        if asking is not None:
            asking.wait(quiet=True)  # (the reader is no longer shared with its thread)
        reader.prefetch([])
        raise


def _ask(reader: RecordReader, starts: Starts, known: Set[int], config: TaskConfig) -> Asking:
    """Ask, in a thread, what the starts of the partitions not ``known`` check: the
    watermarks of their inputs and table, the offsets the group committed."""
    table = [config.graph.table] if config.graph.persist else []
    return Asking(reader, sorted({(t, p) for p, offsets in starts.items() if p not in known
                                  for t in [*offsets, *table]}), config.graph.group)  # fmt: skip


def _lease(config: TaskConfig, worker: Worker, partitions: list[int], stack: ExitStack, *,
           ask: bool) -> dict[int, PartitionStores]:  # fmt: skip
    """The stores of ``partitions``, leased at once: each is released by a bridge (another
    process's, asked) and opened in a thread of its own (LevelDB replays its log and syncs
    its files as it opens, without the GIL: 8-14 ms a store at an epoch's start in
    ``bench.latency``, while the partitions' first records wait). Released with ``stack``;
    if one cannot be leased, the others are released and its error raised."""
    if len(partitions) < 2:
        return {p: PartitionStores(config, p, worker, stack, ask=ask) for p in partitions}
    stacks = {p: ExitStack() for p in partitions}
    with ThreadPoolExecutor(len(partitions), thread_name_prefix="goka-lease") as pool:
        leasing = {p: pool.submit(PartitionStores, config, p, worker, stacks[p], ask=ask)
                   for p in partitions}  # fmt: skip
    for partition in partitions:  # (what a failed lease entered is released with the rest)
        stack.enter_context(stacks[partition])
    for future in leasing.values():
        error = future.exception()
        if error is not None:
            raise error
    return {p: future.result() for p, future in leasing.items()}


def _follow(
    config: TaskConfig,
    worker: Worker,
    epochs: dict[int, Epoch],
    timeline: Timeline,
    started: float,
    until: float,
    stop: Callable[[], bool],
    *,
    bridging: bool,
    handover: bool,
    ended: Callable[[], bool],
) -> tuple[list[PartitionSummary], dict[int, dict[str, int]] | None]:
    """Follow the inputs of ``epochs`` from where they begin until ``until``, ``stop()`` or
    ``ended()`` (see :func:`_run_epoch`); if ``handover`` (a bridge, or an epoch a bridge may
    follow), leave where they ended to what begins next here
    (:func:`goka.processing.starts.followed`). The group's offsets are committed as it ends,
    waited for only if nothing goes on from there: a stop, or a bridge no task came for (a
    task here or elsewhere goes on at once otherwise; waiting held its first records back
    2-10 ms a partition, 60 ms at times, in ``bench.latency``)."""
    interval, longest = config.commit_interval, _BRIDGE_POLL_SECONDS if bridging else _POLL_SECONDS
    tail = Clients(config, worker).reader().tail({p: e.reading for p, e in epochs.items()})
    for epoch in epochs.values():
        epoch.summary.ready_seconds = time.monotonic() - started
    leases = [lease for e in epochs.values() for lease in e.stores.leased] if bridging else []
    next_commit = time.monotonic() + interval
    size = _MIN_CHUNK  # records per poll: as many as half a commit interval processes
    deadline = stopped = False
    # under exactly-once, records are seen when their commit is: an epoch's task (not a bridge)
    # commits at once as it has caught up with the records that waited across the boundary
    eager = config.guarantee == "exactly-once" and not bridging
    timeline.lap("assign")  # the consumer assigned
    timeline.end()
    together = list(epochs.values())  # under exactly-once, their transactions commit at once
    pool = (ThreadPoolExecutor(len(together), thread_name_prefix="goka-commit")
            if len(together) > 1 and config.guarantee == "exactly-once" else None)  # fmt: skip
    lead = CommitLead(interval, config.guarantee == "exactly-once")
    try:
        while True:
            timeline.start()
            now = time.monotonic()
            deadline = now >= until
            stopped = stop()
            if deadline or stopped or ended() or any(lease.asked for lease in leases):
                break
            wait = max(0.0, min(longest, until - now, next_commit - now))
            polled, asked = tail.poll(size, wait), size
            timeline.lap("poll", idle=wait)
            began, count = time.monotonic(), 0
            for partition, rows in polled.items():
                epochs[partition].apply(rows)
                count += len(rows)
            for partition, epoch in epochs.items():  # (records in flight across reads)
                if partition not in polled:
                    epoch.harvest()
            if count:  # a slow callback must not hold a commit back for a whole chunk
                timeline.lap("process")
                per_record = max(1e-7, (time.monotonic() - began) / count)
                size = int(min(CHUNK, max(_MIN_CHUNK, interval / 2 / per_record)))
            committing = time.monotonic()
            if eager and 0 < count < asked:  # (caught up)
                next_commit, eager = committing, False
            if committing >= next_commit:  # (the interval counts from the commit's start: one
                commit_all(together, timeline.lap, pool)  # that waits, exactly-once's, keeps
                next_commit = committing + interval - lead.took(committing)  # the cadence)
            else:
                for epoch in epochs.values():
                    if epoch.sealed:  # a commit whose outputs may be acknowledged by now
                        epoch.settle(timeline.lap)
            for epoch in epochs.values():
                if epoch.stores.delivery is not None:  # final results being produced
                    epoch.deliver(timeline.lap)
            timeline.end()
    finally:
        marks = tail.watermarks()
        tail.close()
        if pool is not None:
            pool.shutdown()
    # records in flight across reads go on in what follows here (a bridge after an epoch, the
    # next task after a bridge), else they end: up to DRAIN_SECONDS, the rest read again
    parking = not stopped and (ended() if bridging else deadline and handover)
    drained = time.monotonic() + DRAIN_SECONDS  # (the partitions' records run on meanwhile)
    first = 0.0 if stopped else FIRST_SECONDS
    for epoch in epochs.values():
        if parking:
            park(epoch, worker)
        else:
            epoch.drain(max(0.0, drained - time.monotonic()), first)
        epoch.commit(wait=True)
        epoch.deliver(wait=True)
        epoch.stores.group_offsets.catch_up()  # the group's offsets as far as the store's
    if handover and (deadline or bridging):
        followed(worker, config.graph.group, {p: e.positions for p, e in epochs.items()}, marks)
    ends = {p: dict(epoch.positions) for p, epoch in epochs.items()} if deadline else None
    going_on = not stopped and (ended() or any(lease.asked for lease in leases)
                                if bridging else deadline and handover)  # fmt: skip
    summaries = [epoch.finish(started, wait=not going_on) for epoch in epochs.values()]
    summaries[0].timeline = timeline.report()
    if bridging:  # for another process here that takes the stores next (asked for them, or
        for partition, epoch in epochs.items():  # from the holder after this one's next task)
            leave_note(epoch.stores, epoch.positions,
                       {tp: m for tp, m in marks.items() if tp[1] == partition})  # fmt: skip
    return summaries, ends
