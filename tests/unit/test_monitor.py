"""The processor monitor's sample, from a processor's figures and its partition board."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from goka import Int64Codec, StringCodec, define_group, input, persist
from goka.processing.signals import PartitionBoard
from goka.processing.summary import PartitionSummary
from goka.spark.summary import BatchSummary, Totals
from goka.web.monitor import ProcessorMonitor


class FakeProcessor:
    def __init__(self, board: PartitionBoard) -> None:
        self.graph = define_group("clicks", input("user-clicks", StringCodec(), lambda c, m: None),
                                  persist(Int64Codec()))  # fmt: skip
        self.mode, self.active, self.prepared, self.failure = "continuous", True, True, None
        self.board, self.totals = board, Totals()
        self.totals.add_batch(BatchSummary.of(0, [PartitionSummary(
            1, processed=10, failed=1, skipped_applied=4, store_bytes=2_000_000,
            errors=json.dumps(["boom at offset 3"]),
        )]))  # fmt: skip
        self.offsets = {0: None, 1: 100}

    def partition_status(self) -> list[dict[str, Any]]:
        return [{"topic": "user-clicks", "partition": p, "offset": o,
                 "lag": None if o is None else 50, "committed_at": time.time()}
                for p, o in self.offsets.items()]  # fmt: skip


def test_states_progress_sizes_rates_and_errors(tmp_path: Path) -> None:
    board = PartitionBoard(str(tmp_path / "board"))
    processor = FakeProcessor(board)
    board.report(0, "rebuilding", 120_000, 400_000)
    board.report(1, "running")
    assert board.settle()
    monitor = ProcessorMonitor([processor])
    first = monitor.sample()["groups"][0]
    assert [row[4] for row in first["partitions"]] == ["rebuilding 120,000 of 400,000", "running"]
    assert first["partitions"][1][7] == "2.0 MB" and first["partitions"][0][7] == ""
    assert first["errors"] == ["boom at offset 3"] and first["failed"] == 1
    assert first["skipped_applied"] == 4
    processor.offsets[1] = 300
    time.sleep(0.05)
    second = monitor.sample()["groups"][0]
    assert second["partitions"][1][6] > 0  # records/s from the offsets' progress
    processor.active = False
    assert monitor.sample()["groups"][0]["partitions"][1][4] == "idle"
    processor.failure = "ProcessingError: boom"
    monitor.refresh()
    page = monitor.handle("/")
    assert page is not None and b"FAILED: ProcessingError: boom" in page.body
    assert b"4 already applied (skipped)" in page.body


def test_a_continuous_processor_counts_what_its_epochs_committed_before_they_end(
    tmp_path: Path,
) -> None:
    """An epoch reports at its end (30 s by default); meanwhile its partitions say on the
    board what they committed, and the monitor adds that, once, to the epochs that ended."""
    board = PartitionBoard(str(tmp_path / "board"), every=0.0)
    board.progress(0, 999)  # said by a run before this processor started: not counted
    assert board.settle()
    processor = FakeProcessor(board)
    processor.started_at = time.time()  # type: ignore[attr-defined]
    monitor = ProcessorMonitor([processor])
    assert monitor.sample()["groups"][0]["processed"] == 10  # the epoch that ended
    board.progress(0, 300)
    board.progress(1, 200)
    board.progress(1, 50, bridge=True)  # a bridge between epochs, in another worker
    assert board.settle()
    group = monitor.sample()["groups"][0]
    assert group["processed"] == 10 + 300 + 200 + 50
    assert group["unit"] == ["epoch", "epochs"]
    board.progress(0, 400)
    assert board.settle()
    assert monitor.sample()["groups"][0]["processed"] == 10 + 400 + 200 + 50
    processor.totals.add_batch(BatchSummary.of(1, [PartitionSummary(0, processed=450),
                                                   PartitionSummary(1, processed=250)]))  # fmt: skip
    assert monitor.sample()["groups"][0]["processed"] == 10 + 450 + 250  # no longer on the board
    monitor.refresh()
    page = monitor.handle("/")
    assert page is not None and b"2 epochs, 710 records" in page.body


def test_a_micro_batch_processor_counts_batches(tmp_path: Path) -> None:
    processor = FakeProcessor(PartitionBoard(str(tmp_path / "board")))
    processor.mode = "micro-batch"
    monitor = ProcessorMonitor([processor])
    monitor.refresh()
    page = monitor.handle("/")
    assert page is not None and b"1 batches, 10 records" in page.body
    assert monitor.sample()["groups"][0]["unit"] == ["batch", "batches"]


def test_records_in_flight_reach_the_summary_the_metrics_and_the_page(tmp_path: Path) -> None:
    """A call of a group with concurrency: how many were in flight, the longest, and the keys
    that waited for an earlier record of their own, from the engine to the partition's
    summary, the Prometheus metrics and the monitor."""
    import asyncio

    from prometheus_client import REGISTRY

    from goka.group.engine import Engine
    from goka.spark.metrics import ProcessorMetrics

    async def wait(ctx: Any, msg: str) -> None:  # (the hot key's records the slowest: the
        await asyncio.sleep(0.05 if ctx.key == "hot" else 0.01)  # others finish behind them)

    graph = define_group("flying", input("in", StringCodec(), wait), concurrency=8)
    keys = ["hot"] * 5 + [f"k{i}" for i in range(20)]
    messages = [("in", n, k.encode(), b"x", 0, None) for n, k in enumerate(keys)]
    result = Engine(graph, 3, store={}.get).process(messages)
    part = PartitionSummary(3)
    part.flown(result.flight)
    assert part.in_flight_most == 8 and part.in_flight_longest >= 0.05
    assert 7 <= part.in_flight_held <= 20  # (k0-k6 finish while hot's first record runs)
    assert part.key_waits == 4 and json.loads(part.waiting_keys) == {"hot": 4}
    assert part.in_flight_seconds >= 25 * 0.01
    summary = BatchSummary.of(0, [part])
    assert summary.key_waits == 4
    ProcessorMetrics("flying").batch(summary, "fail")
    sample = REGISTRY.get_sample_value
    assert (
        sample("goka_processor_in_flight_most_records", {"group": "flying", "partition": "3"}) == 8
    )
    assert sample("goka_processor_key_waits_total", {"group": "flying"}) == 4
    assert sample("goka_processor_in_flight_held_records",
                  {"group": "flying", "partition": "3"}) == part.in_flight_held  # fmt: skip
    assert sample("goka_processor_waiting_key_records", {"group": "flying", "key": "hot"}) == 4
    processor = FakeProcessor(PartitionBoard(str(tmp_path / "board")))
    processor.graph = graph
    processor.totals.add_batch(summary)
    flight = ProcessorMonitor([processor]).sample()["groups"][0]["flight"]
    assert flight.startswith("in flight: at most 8 of 8 a partition") and "hot (4)" in flight
    assert f"at most {part.in_flight_held} finished and held" in flight
