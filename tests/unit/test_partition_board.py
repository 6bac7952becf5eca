"""The partition board's progress is written on a thread of its own: a commit does not wait
for the disk, and what the board says last is what the task said last."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from goka.processing.signals import PartitionBoard


def test_progress_returns_while_a_write_is_held_and_the_last_said_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    board = PartitionBoard(str(tmp_path / "board"), every=0.0)
    release, entered = threading.Event(), threading.Event()
    write = PartitionBoard._write

    def held(self: PartitionBoard, name: str, entry: dict[str, Any]) -> None:
        entered.set()
        assert release.wait(10)
        write(self, name, entry)

    monkeypatch.setattr(PartitionBoard, "_write", held)
    board.progress(0, 100)
    assert entered.wait(10)  # the writer holds the first write
    started = time.monotonic()
    for processed in range(200, 1100, 100):  # said while the disk "stalls"
        board.progress(0, processed)
    board.progress(1, 7, bridge=True)
    assert time.monotonic() - started < 0.5  # none of them waited for the held write
    assert not board.settle(timeout=0.05)  # not written yet
    release.set()
    assert board.settle()
    entries = board._entries()
    assert entries["0.epoch"]["processed"] == 1000  # the last said, not one in between
    assert entries["1.bridge"]["processed"] == 7
    states, committed = board.sample(since=0.0)
    assert states == {} and committed == 1007


def test_progress_is_stamped_when_said_not_when_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The monitor counts a bridge's or epoch's progress said after the last finished epoch
    was counted: a write that lands later keeps the time it was said."""
    board = PartitionBoard(str(tmp_path / "board"), every=0.0)
    release = threading.Event()
    write = PartitionBoard._write

    def held(self: PartitionBoard, name: str, entry: dict[str, Any]) -> None:
        assert release.wait(10)
        write(self, name, entry)

    monkeypatch.setattr(PartitionBoard, "_write", held)
    board.progress(2, 50)
    counted_at = time.time() + 1e-3  # an epoch counted after it was said
    while time.time() < counted_at:
        pass
    release.set()
    assert board.settle()
    assert board.sample(since=counted_at)[1] == 0
    assert board.sample(since=counted_at - 60)[1] == 50
