"""A worker process's stores, released when a query ends (the holder protocol)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from goka.processing.holders import release_held
from goka.processing.worker import Worker
from goka.storage import MemoryStorage

from ..helpers import TrackedStores

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="holders are asked by datagram on Linux")  # fmt: skip


def test_stores_held_for_a_next_task_are_closed_when_asked_and_stale_holders_forgotten(
    tmp_path: Path,
) -> None:
    group = tmp_path / "counts"
    group.mkdir()
    worker, stores = Worker(), TrackedStores(MemoryStorage.at)
    try:
        with worker.lease(stores, group / "partition-0", "counts-table"):
            pass  # the task ended: the worker keeps the store for its next task
        assert (group / "partition-0.holder").exists()
        assert stores.open() == [group / "partition-0"]
        (group / "partition-1.holder").write_text("goka-worker-gone-0123")  # a killed process
        assert release_held(group, timeout=5) == []
        assert stores.open() == []
        assert not any(group.glob("*.holder"))
    finally:
        worker.close()


def test_a_store_in_use_is_closed_once_its_task_ends(tmp_path: Path) -> None:
    worker, stores = Worker(), TrackedStores(MemoryStorage.at)
    try:
        with worker.lease(stores, tmp_path / "partition-0", "counts-table"):
            assert release_held(tmp_path, timeout=0.2) == [tmp_path / "partition-0"]
        assert release_held(tmp_path, timeout=5) == []
        assert stores.open() == []
    finally:
        worker.close()
