"""Exactly once when a partition changes writers, on the model level: the fake Kafka's
transactional producers have epochs (``fake_transactions``), so a zombie writer, its fencing
and the order in which a new writer fences and reads can be played step by step, without
Spark or a broker. Each test states the rule it holds and, where it guards a defect, how the
defect made it fail."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from goka import Context, Int64Codec, StringCodec, define_group, input, output, persist
from goka.errors import BrokerError, FencedError, TransactionAbortedError, TransactionError
from goka.group.effects import EMIT, BatchResult
from goka.kafka.transactions import Transactions
from goka.processing import batch
from goka.processing.applied import SRC_OFFSET, SRC_TOPIC
from goka.processing.clients import Clients
from goka.processing.exactly_once import ExactlyOnce
from goka.processing.output import Output
from goka.processing.summary import PartitionSummary
from goka.storage import MemoryStorage

from .fake_kafka import FakeKafka, ListReader
from .fake_transactions import EpochTransactions, epoch_transactions
from .machines import IN, Machine, Script, click, epoch, with_builders


def tell(ctx: Context[int], page: str) -> None:
    """Count the click and say which input record it was (an output per record)."""
    ctx.set_value((ctx.value() or 0) + 1)
    ctx.emit("seen", ctx.key, f"{ctx.partition} {ctx.offset}")


TELLS = define_group("tells", input(IN, StringCodec(), tell), persist(Int64Codec()),
                     output("seen", StringCodec()))  # fmt: skip


def fencing(machine: Machine, **kwargs: Any) -> Machine:
    """``machine`` under exactly-once with producers that have epochs."""
    machine.config = type(machine.config)(**{**machine.config.__dict__,
                                             "guarantee": "exactly-once"})  # fmt: skip
    return with_builders(machine, transactions=epoch_transactions(machine.kafka, **kwargs))


def kept(machine: Machine, token: str) -> Any:
    """The transactional producer of partition 0 named ``token`` that the machine's worker
    keeps (None: it keeps none by that name)."""
    return Clients(machine.config, machine.worker).kept_transactions(0, token)


def told(kafka: FakeKafka) -> Counter[str]:
    """How often a read_committed reader finds each input record told."""
    return Counter((row[3] or b"").decode() for p, rows in enumerate(kafka.topic("seen"))
                   for row in rows if kafka.visible(row, p))  # fmt: skip


def counts(kafka: FakeKafka) -> dict[str, int]:
    """The table as a read_committed view has it."""
    found: dict[str, int] = {}
    for row in kafka.rows(TELLS.table, 0):
        if kafka.visible(row, 0) and row[2] is not None:
            found[row[2].decode()] = int(row[3] or b"0")
    return found


def test_a_new_writer_fences_the_last_one_before_it_asks_where_to_begin(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    """A zombie that commits just before the new writer's fence (the fence's own start is
    where it can happen last) is where the new writer begins: every record told once. The
    epoch's start asked the group's offsets in a thread begun before its producers started,
    and began behind the zombie's last commit: its records were told twice."""
    sent = click(kafka, 30)
    zombie = fencing(Machine(kafka, tmp_path / "a", TELLS))
    zombie.run(0, {IN: (0, 10)})
    asked = threading.Event()

    class Asked(ListReader):
        def prefetch(self, partitions: Any, group: str | None = None) -> None:
            super().prefetch(partitions, group)
            if group is not None:
                asked.set()

    def zombie_commits(partition: int) -> None:  # (the new writer's start, before its fence)
        if not zombie_commits.done:  # type: ignore[attr-defined]
            zombie_commits.done = True  # type: ignore[attr-defined]
            asked.wait(0.3)  # the defect asked before the fence: let it, then commit
            zombie.run(0, {IN: (10, 20)})

    zombie_commits.done = False  # type: ignore[attr-defined]
    new = fencing(Machine(kafka, tmp_path / "b", TELLS, commit_interval=0),
                  on_init=zombie_commits)  # fmt: skip
    with_builders(new, reader=lambda brokers, settings: Asked(kafka))
    script = Script(kafka, lambda: None, lambda: None)
    summary = epoch(new, {IN: 0}, script.done)
    assert zombie_commits.done  # type: ignore[attr-defined]
    assert summary.processed == 10  # 20..30: the zombie did 10..20 before the fence
    assert [place for place, n in told(kafka).items() if n != 1] == []
    assert sum(told(kafka).values()) == 30
    assert counts(kafka) == dict(sent)


def test_no_offsets_are_committed_outside_transactions_under_exactly_once(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    """Under exactly-once the group's offsets go in each commit's transaction only (a plain
    commit carries no producer epoch: a fenced writer's would move them back); at-least-once
    commits them plainly. An epoch's end committed them plainly under exactly-once too."""
    click(kafka, 20)
    machine = fencing(Machine(kafka, tmp_path / "a", TELLS, commit_interval=0))
    machine.run(0, {IN: (0, 10)})
    epoch(machine, {IN: 10}, Script(kafka, lambda: None).done)
    assert kafka.committed[("tells", IN, 0)][0] == 20
    assert kafka.plain_commits == []
    click(kafka, 5, start=20)
    plain = Machine(kafka, tmp_path / "b", TELLS)
    plain.run(0, {IN: (0, 25)})
    assert kafka.plain_commits  # (the contrast: at-least-once tells the group plainly)


def test_a_writer_fenced_while_it_runs_stops_with_fenced_error_and_writes_nothing(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    """A newer writer starts while an epoch runs: the epoch's next commit is refused, it
    stops with FencedError (not a delivery error), its store is not written after the fence,
    and its producer and the file naming it are let go."""
    machine = fencing(Machine(kafka, tmp_path / "a", TELLS, commit_interval=0,
                              write_interval=0))  # fmt: skip

    def newer_writer() -> None:
        EpochTransactions(kafka, {}, "tells", 0, 1.0)  # (another processor's start)
        click(kafka, 10, start=10)

    script = Script(kafka, lambda: click(kafka, 10), lambda: None, newer_writer, lambda: None)
    writer = machine.config.store_path("partition", 0).with_suffix(".writer")
    tokens: list[str] = []
    kafka.on_poll.append(lambda: tokens.append(writer.read_text()) if writer.exists() else None)
    with pytest.raises(FencedError, match="partition 0: fenced by a newer writer"):
        epoch(machine, {IN: 0}, script.done)
    fenced_at = kafka.events.index("init tells-0 epoch 2")
    assert "write clicks 10" in kafka.events[:fenced_at]  # committed before
    assert [e for e in kafka.events[fenced_at:] if e.startswith("write")] == []  # none after
    assert not writer.exists()
    assert tokens and kept(machine, tokens[-1]) is None  # the fenced producer was let go
    assert sum(told(kafka).values()) == 10  # the fenced commit's outputs are never seen


def test_a_producer_refusing_every_message_after_it_was_fenced_raises_fenced_error(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    """librdkafka refuses a fenced producer's messages with ``_FATAL``, which it does not flag
    as fatal: the output asks the transaction, which says fenced. (This reached users as
    ``DeliveryError: ... refused by the producer: KafkaError{code=_FATAL}``.)"""
    machine = fencing(Machine(kafka, tmp_path / "a", TELLS))
    clients = Clients(machine.config, machine.worker)
    exactly = ExactlyOnce(clients, 0, [IN], writer=tmp_path / "partition-0.writer")
    exactly.begin()
    EpochTransactions(kafka, {}, "tells", 0, 1.0)  # fences it
    producer = exactly.producer
    producer.fatal = True  # type: ignore[attr-defined]  # (a delivery found it fenced)
    out = Output(producer, 0, machine.config, MemoryStorage(TELLS.table), exactly.failed)
    made_by = (IN, 3, b"u1", b"/page", 0, None)
    result = BatchResult(effects=[(EMIT, "seen", "u1", b"0 3", None, made_by)])
    token = exactly.transactions.token
    assert kept(machine, token) is exactly.transactions
    with pytest.raises(FencedError):
        out.send(result, PartitionSummary(0))
    assert kept(machine, token) is None  # the fenced producer was let go


def test_a_bridge_never_starts_a_producer(kafka: FakeKafka, tmp_path: Path) -> None:
    """A bridge between epochs goes on only with the producer its process has as the latest:
    where another process's task started one since (the file names it), starting one would
    fence that task; the bridge ends instead."""
    machine = fencing(Machine(kafka, tmp_path / "a", TELLS))
    clients = Clients(machine.config, machine.worker)
    writer = tmp_path / "partition-0.writer"
    kept = ExactlyOnce(clients, 0, [IN], writer=writer)
    assert ExactlyOnce(clients, 0, [IN], writer=writer, start=False).transactions is (
        kept.transactions
    )
    writer.write_text("the next epoch's task in another process")
    epochs = dict(kafka.epochs)
    with pytest.raises(FencedError, match="a newer writer started"):
        ExactlyOnce(clients, 0, [IN], writer=writer, start=False)
    assert kafka.epochs == epochs  # nothing started, nobody fenced


def test_a_store_catching_up_leaves_out_rows_of_records_it_has_not_applied(
    kafka: FakeKafka, tmp_path: Path
) -> None:
    """At-least-once left changelog rows of a commit it did not finish (a crash after the
    outputs, before the store); the group switched to exactly-once: its task catches the store
    up from the changelog's tail, leaving those rows out, as their records are processed next.
    Applying them counted those records twice."""
    sent = click(kafka, 15)
    machine = Machine(kafka, tmp_path / "a", TELLS)
    machine.run(0, {IN: (0, 10)})
    for offset in range(10, 15):  # the unfinished commit's rows: the counts after each record
        user = f"u{offset % 5}"
        kafka.append(TELLS.table, user, b"%d" % (sent[user]), partition=0,
                     headers=[(SRC_TOPIC, IN.encode()), (SRC_OFFSET, b"%d" % offset)])  # fmt: skip
    fencing(machine)
    summary = machine.run(0, {IN: (10, 15)})
    assert summary.store == "reused" and summary.processed == 5
    assert machine.state(0) == dict(sent) == counts(kafka)


def test_a_micro_batch_commits_a_long_backlog_in_slices_under_exactly_once(
    kafka: FakeKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backlog is not one transaction (the broker aborts one open for 60 s, and a crash
    would repeat all its outputs): about every ``TRANSACTION_SECONDS`` of processing, a
    commit. At-least-once commits a batch once."""
    monkeypatch.setattr(batch, "TRANSACTION_SECONDS", 0.0)  # (each slice: its first size)
    sent = click(kafka, 2_500)
    machine = fencing(Machine(kafka, tmp_path / "a", TELLS))
    machine.run(0, {IN: (0, 2_500)})
    commits = [e for e in kafka.events if e.startswith("commit tells-0")]
    assert len(commits) == 3  # slices of 1,000, 1,000 and 500
    assert machine.state(0) == dict(sent) == counts(kafka)
    assert sum(told(kafka).values()) == 2_500 == len(told(kafka))


def test_a_slices_time_counts_its_commit_not_only_its_processing(
    kafka: FakeKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow commit (large outputs, a slow broker) keeps slices small: a slice's time is
    its processing, producing and commit. Timed by processing alone, the first commit of 0.2 s
    went unseen and the rest of the backlog was one transaction (it can outlive the broker's
    transaction timeout: aborted, fenced, run again the same way)."""
    monkeypatch.setattr(batch, "TRANSACTION_SECONDS", 0.1)
    slow = EpochTransactions.commit

    def commit(self: EpochTransactions, offsets: Any = None) -> None:
        time.sleep(0.2)  # (the broker's time, not a synchronisation)
        slow(self, offsets)

    monkeypatch.setattr(EpochTransactions, "commit", commit)
    sent = click(kafka, 2_500)
    machine = fencing(Machine(kafka, tmp_path / "a", TELLS))
    machine.run(0, {IN: (0, 2_500)})
    commits = [e for e in kafka.events if e.startswith("commit tells-0")]
    assert len(commits) == 3  # slices of 1,000 (the least), 1,000 and 500; not 1,000 and 1,500
    assert machine.state(0) == dict(sent) == counts(kafka)


def test_an_abort_that_fails_as_a_call_fails_raises_gokas_error() -> None:
    """A call that needs an abort, whose abort fails too, raises goka's error (librdkafka's
    exception escaped, and the producer and its file stayed)."""

    def failing(code: int, *, abortable: bool = False) -> Any:
        def call(*args: Any) -> None:
            raise confluent_kafka.KafkaException(
                confluent_kafka.KafkaError(code, "failed", txn_requires_abort=abortable)
            )

        return call

    class Client:
        commit_transaction = failing(confluent_kafka.KafkaError._TIMED_OUT, abortable=True)
        abort_transaction = failing(confluent_kafka.KafkaError._TRANSPORT)

    transactions = Transactions.__new__(Transactions)
    transactions.group, transactions.partition, transactions.id = "g", 0, "g-0"
    transactions.timeout, transactions.open, transactions._client = 1.0, True, Client()
    with pytest.raises(BrokerError, match="abort_transaction failed"):
        transactions.commit()
    assert not transactions.open


@pytest.mark.parametrize("mode", ["epoch", "batch"])
def test_work_goes_on_from_the_last_commit_after_a_transaction_failed(
    kafka: FakeKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """A broker lost under a transaction (its group coordinator moved: librdkafka's abortable
    error) aborts it; the epoch or batch goes on from its last commit with a new producer,
    instead of stopping the processor: every record told once, the table exact."""
    from goka.processing import exactly_once

    monkeypatch.setattr(exactly_once, "RETRY_SECONDS", 0.0)
    failures = [TransactionAbortedError("tells-0: send_offsets_to_transaction failed, "
                                        "transaction aborted: Not coordinator")]  # fmt: skip

    class Failing(EpochTransactions):
        def send_offsets(self, offsets: Any) -> None:
            if self.commits and failures:  # (its second commit)
                self.abort()
                raise failures.pop()
            super().send_offsets(offsets)

    machine = fencing(Machine(kafka, tmp_path / "a", TELLS, commit_interval=0))
    with_builders(machine, transactions=lambda *args: Failing(kafka, *args))
    if mode == "epoch":
        sent = Counter[str]()
        script = Script(kafka, lambda: sent.update(click(kafka, 10)), lambda: None,
                        lambda: sent.update(click(kafka, 10, start=10)), lambda: None)  # fmt: skip
        epoch(machine, {IN: 0}, script.done)
    else:
        monkeypatch.setattr(batch, "TRANSACTION_SECONDS", 0.0)  # (commits of 1,000 records)
        sent = click(kafka, 2_500)
        machine.run(0, {IN: (0, 2_500)})
    assert not failures  # (it failed once)
    assert sum(told(kafka).values()) == sum(sent.values()) == len(told(kafka))
    assert counts(kafka) == dict(sent)


def test_offsets_the_coordinator_never_takes_give_the_producer_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """librdkafka's ``send_offsets_to_transaction`` ignores its timeout while the group's
    coordinator is lost (confluentinc/librdkafka#5456): it held an epoch for minutes in the
    failover test. The call is given up after its timeout and a grace, as a TransactionError
    (the task goes on from its last commit with a new producer)."""
    import goka.kafka.transactions as module

    monkeypatch.setattr(module, "OFFSETS_SECONDS", 0.05)
    monkeypatch.setattr(module, "CALL_GRACE_SECONDS", 0.05)
    never = threading.Event()

    class Client:
        def send_offsets_to_transaction(self, *args: Any) -> None:
            never.wait()  # (the coordinator lost: no answer, whatever the timeout says)

    transactions = Transactions.__new__(Transactions)
    transactions.group, transactions.partition, transactions.id = "g", 0, "g-0"
    transactions.timeout, transactions.open, transactions._client = 30.0, True, Client()
    transactions._metadata = object()
    with pytest.raises(TransactionError, match="no answer from the group's coordinator"):
        transactions.send_offsets({"in": 7})
    assert not transactions.open
    never.set()
