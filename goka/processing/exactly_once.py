"""A task's commits under ``guarantee="exactly-once"``: each one Kafka transaction of the
partition's transactional producer (:mod:`goka.kafka.transactions`).

What a commit produced (emits, loopbacks, the table's, timers' and window tables' changelog
rows, dead letters) and the group's offsets of its inputs go in one transaction; the store is
written after it commits. A crash before the commit leaves nothing a ``read_committed``
reader sees (the next writer's start aborts it): the store and the group's offsets are where
they were, and the records are processed again. A crash after the commit leaves the store
behind the changelog and the group's offsets: the next task replays the changelog's tail into
the store and begins where the group committed (:meth:`PartitionStores.begin
<goka.processing.stores.PartitionStores.begin>`), so no record is processed twice.

Each key of a changelog is written once per commit, with its last value
(:mod:`goka.processing.output`). Windows' final results are delivered after the commit that
made them due, in transactions of their own, each with its watermarks' rows
(:mod:`goka.processing.finals`): nothing is read back. A crash between a transaction's commit
and the store's write that moved no input offset is found by the next task, which replays the
changelogs' committed tails (:meth:`~goka.processing.recovery.StoreRecovery.catch_up_tail`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import TypeVar

from goka.errors import GokaError, TransactionError
from goka.kafka.producer import Producer
from goka.kafka.transactions import FencedError, transactional_id
from goka.processing.clients import Clients
from goka.processing.config import TaskConfig

__all__ = [
    "RETRY_FOR_SECONDS",
    "RETRY_SECONDS",
    "TRANSACTION_RETRIES",
    "ExactlyOnce",
    "exactly_once",
    "retrying",
    "start_early",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How often an epoch or a micro-batch goes on from its last commit after a transaction failed
#: (:class:`~goka.errors.TransactionError`), the pause before it does (a broker lost: the
#: leaders and coordinators it had move meanwhile), and for how long after the first failure.
TRANSACTION_RETRIES, RETRY_SECONDS, RETRY_FOR_SECONDS = 10, 1.0, 120.0


def retrying(failures: list[float], exc: TransactionError, stop: Callable[[], bool]) -> float:
    """Note one more failure ``exc`` in ``failures`` (monotonic times) and return the pause
    before the work goes on from its last commit; raise ``exc`` once it failed too often or
    for too long (see :data:`TRANSACTION_RETRIES`), or the processor stops."""
    now = time.monotonic()
    failures.append(now)
    if len(failures) > TRANSACTION_RETRIES or now - failures[0] > RETRY_FOR_SECONDS or stop():
        raise exc
    return RETRY_SECONDS


class ExactlyOnce:
    """The transactions of one task of a partition (see the module docstring).

    Args:
        clients: the group's clients in this process.
        partition: the partition.
        inputs: the group's input topics (their offsets go in each commit).
        writer: a file beside the partition's store (guarded by its lease) naming the latest
            transactional producer of the partition started on this machine: the one this
            process keeps is used while it is that one; else a new one starts, fencing the
            others, and the file names it. (A producer fenced from another machine fails the
            task with :class:`FencedError`; its retry starts a new one.)
        start: start a new producer where this process's is not the latest (False: a bridge
            between epochs, which goes on only with the producer it has).

    Raises:
        FencedError: a newer writer started (or, not ``start``, this process has no producer
            that is the latest).
        BrokerError: the producer could not start.
    """

    def __init__(self, clients: Clients, partition: int, inputs: Iterable[str], *,
                 writer: Path, start: bool = True) -> None:  # fmt: skip
        self.clients, self.partition, self.inputs = clients, partition, frozenset(inputs)
        self.writer = writer
        latest = _latest(writer)
        kept = None if start else clients.kept_transactions(partition, latest)
        if not start and kept is None:  # (a bridge never starts a writer: it would fence
            raise FencedError(clients.config.graph.group, partition,  # the next task's)
                              transactional_id(clients.config.graph.group, partition),
                              "a newer writer started since this process's")  # fmt: skip
        self.transactions = kept or clients.transactions(partition, latest)
        if self.transactions.open:  # a task of this process ended without its commit (a
            self._guarded(self.transactions.abort)  # producer that fails it is let go)
        if self.transactions.token != latest:
            writer.parent.mkdir(parents=True, exist_ok=True)
            writing = writer.with_name(writer.name + ".new")
            writing.write_text(self.transactions.token)
            writing.replace(writer)

    @property
    def producer(self) -> Producer:
        """The producer whose records belong to the open transaction."""
        return self.transactions.producer

    def begin(self) -> None:
        """Begin a transaction unless one is open (before anything is produced)."""
        if not self.transactions.open:
            self._guarded(self.transactions.begin)

    def commit(self, positions: Mapping[str, int], acknowledged: Callable[[], T]) -> T:
        """Commit what was produced since :meth:`begin` with the group's ``positions`` of its
        inputs (before the store is written): the offsets are sent, then ``acknowledged()``
        waits for every output (its error is raised as it is; what it returns is returned),
        then the transaction commits.
        (The offsets' two requests to the broker overlap the last outputs' acknowledgements:
        a commit of 100 records took 10.8 ms at the median instead of 13.8 here.)

        Raises:
            FencedError: a newer writer runs the partition: nothing of this commit is seen.
            TransactionAbortedError, BrokerError: the commit failed (nothing is seen, or, if
                the coordinator did not answer, the next writer's start settles it).
        """
        self.begin()  # (a commit with nothing produced still moves the group's offsets)
        offsets = {t: o for t, o in positions.items() if t in self.inputs}
        self._guarded(lambda: self.transactions.send_offsets(offsets))
        result = acknowledged()
        self._guarded(self.transactions.commit)
        return result

    def end(self) -> None:
        """As the task ends: abort what it did not commit (a failure), so that readers are
        not held back until the transaction times out.

        Raises:
            FencedError: a newer writer fenced this one (the producer is let go): whatever
                else the task failed with (an output refused, a flush that failed), this is
                why, and it replaces that error.
        """
        try:
            self._guarded(self.transactions.abort)
        except FencedError:
            raise
        except GokaError as exc:
            log.warning("partition %d: transaction not aborted: %s", self.partition, exc)

    def failed(self) -> None:
        """Its outputs were not delivered: the producer is let go (the next task makes a new
        one), and if a newer writer fenced it, :class:`FencedError` says so."""
        try:
            self.transactions.abort()
        except FencedError:
            self._discard()
            raise
        except GokaError as exc:
            log.info("partition %d: transaction not aborted: %s", self.partition, exc)
        self._discard()

    def _guarded(self, call: Callable[[], object]) -> None:
        """``call()``; a producer that failed or was fenced is let go."""
        try:
            call()
        except GokaError:
            self._discard()
            raise

    def _discard(self) -> None:
        self.clients.discard_transactions(self.partition)
        self.writer.unlink(missing_ok=True)  # (the next task starts a new producer)


def _writer(config: TaskConfig, partition: int) -> Path:
    return config.store_path("partition", partition).with_suffix(".writer")


def _latest(writer: Path) -> str | None:
    try:
        return writer.read_text()
    except FileNotFoundError:
        return None


def start_early(config: TaskConfig, clients: Clients, partitions: Iterable[int]) -> set[int]:
    """Under exactly-once, as a continuous task begins, before it leases its stores: start
    the producers of its ``partitions`` that this process does not have as the latest
    (:meth:`Clients.start_transactions <goka.processing.clients.Clients.start_transactions>`),
    while a bridge that holds the stores processes on (it is fenced at its next commit).
    Return the partitions whose producer started now: their last writer is fenced, and what
    it committed is final; what the task knew of them before is not (see
    :func:`goka.processing.epoch.run_epoch`)."""
    started: set[int] = set()
    if config.guarantee == "exactly-once":
        for partition in partitions:
            if clients.start_transactions(partition, _latest(_writer(config, partition))):
                started.add(partition)
    return started


def exactly_once(config: TaskConfig, clients: Clients, partition: int, stack: ExitStack, *,
                 start: bool = True) -> ExactlyOnce | None:  # fmt: skip
    """A task's transactions of ``partition`` under exactly-once (None: at-least-once), ended
    with ``stack``; made before the store recovers and before anything that decides where
    the task begins is read (the group's offsets, the changelogs' ends): a new producer fences
    the partition's last writer and aborts what it left open, so what is read then is final
    (see :class:`ExactlyOnce`; ``start``: its argument)."""
    if config.guarantee != "exactly-once":
        return None
    writer = _writer(config, partition)
    found = ExactlyOnce(clients, partition, config.graph.input_topics(), writer=writer,
                        start=start)  # fmt: skip
    stack.callback(found.end)
    return found
