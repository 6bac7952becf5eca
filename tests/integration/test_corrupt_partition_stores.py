"""Damaged partition stores of a processor heal themselves: the same damage as the views'
suite (tests/integration/test_corrupt_stores.py) done to a group's LevelDB store between two
batches; the next batch detects it at open or at its first bad read, moves the store aside,
rebuilds it from the group table and ends with the exact state and table. The broker is the
unit tests' in-memory one; the stores are real LevelDB."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from goka.storage import LevelDBStorage

from ..unit.fake_kafka import FakeKafka
from ..unit.machines import CLICKS, IN, Machine, click, table_of, with_builders
from .damage import DAMAGE

pytestmark = pytest.mark.slow

USERS = 20_000


def machine(kafka: FakeKafka, root: Path) -> Machine:
    return with_builders(Machine(kafka, root), storage=LevelDBStorage)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_partition_store_is_never_read_wrong_and_heals(
    tmp_path: Path, damage: str
) -> None:
    kafka = FakeKafka(partitions=1)
    sent = click(kafka, USERS, users=USERS)
    first = machine(kafka, tmp_path)
    first.catch_up(0, {IN: 0})
    first.close()
    store = tmp_path / CLICKS.group / "partition-0"
    with LevelDBStorage(store, CLICKS.table) as storage:  # values into table files, as a
        storage.flush()  # long-running store has them
    DAMAGE[damage](store)
    sent += click(kafka, 5_000, users=USERS, start=USERS)
    started = time.monotonic()
    restarted = machine(kafka, tmp_path)
    try:
        summary = restarted.catch_up(0, {IN: USERS})
        seconds = time.monotonic() - started
        assert restarted.state(0) == dict(sent) == table_of(kafka)
    finally:
        restarted.close()
    aside = list(store.parent.glob("partition-0.damaged-*"))
    print(
        f"\n{damage}: store {summary.store}, {summary.corrupt_stores} damaged store(s) moved "
        f"aside, {summary.table_records} table records replayed; exact after {seconds:.2f}s"
    )
    assert bool(aside) == (summary.corrupt_stores > 0)
