"""The continuous loop's timeline: steps timed, idle polls not counted as stalls, the longest
stalls kept, reports merged and turned into Prometheus histograms."""

from __future__ import annotations

import json
import logging

import pytest
from prometheus_client import CollectorRegistry

from goka.processing.timeline import BUCKETS, KEPT, Timeline, merge_reports
from goka.spark.metrics import _LoopSteps


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def turn(timeline: Timeline, clock: Clock, steps: list[tuple[str, float, float]]) -> float:
    timeline.start()
    for step, took, idle in steps:
        clock.now += took
        timeline.lap(step, idle=idle)
    return timeline.end()


def test_a_stall_is_the_turn_less_its_idle_poll() -> None:
    clock = Clock()
    timeline = Timeline("group g partitions [0]", clock=clock, wall=lambda: 5_000.0)
    # an idle poll that waited its 50 ms: no stall
    assert turn(timeline, clock, [("poll", 0.05, 0.05)]) == pytest.approx(0.0)
    # a poll that overran its 50 ms wait by 30 ms, then a slow flush: both stall
    stall = turn(timeline, clock, [("poll", 0.08, 0.05), ("process", 0.002, 0),
                                   ("flush", 0.3, 0), ("write", 0.001, 0)])  # fmt: skip
    assert stall == pytest.approx(0.333)
    assert timeline.longest == pytest.approx(0.333)
    report = json.loads(timeline.report())
    assert report["turns"] == 2
    assert report["steps"]["poll"]["counts"][BUCKETS.index(0.05)] == 1  # 50 ms: in its bucket
    assert report["steps"]["poll"]["counts"][BUCKETS.index(0.1)] == 1
    assert report["steps"]["flush"]["counts"][BUCKETS.index(0.5)] == 1
    assert report["steps"]["flush"]["sum"] == pytest.approx(0.3)
    worst = report["stalls"][0]
    assert worst["seconds"] == pytest.approx(0.333)
    assert [name for name, _ in worst["steps"]] == ["poll", "process", "flush", "write"]
    assert worst["began"] == pytest.approx(5_000.0 - 0.383, abs=0.01)  # wall time it began


def test_the_longest_stalls_are_kept_and_long_ones_logged(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    timeline = Timeline("group g partitions [0, 1]", clock=clock)
    with caplog.at_level(logging.DEBUG, logger="goka.processing.timeline"):
        for ms in range(1, 31):
            turn(timeline, clock, [("process", ms / 1000, 0)])
        turn(timeline, clock, [("flush", 2.5, 0)])
    kept = [s["seconds"] for s in json.loads(timeline.report())["stalls"]]
    assert len(kept) == KEPT
    assert kept == sorted(kept, reverse=True)
    assert kept[0] == pytest.approx(2.5)
    assert kept[-1] == pytest.approx(0.022)
    assert json.loads(timeline.report())["steps"]["flush"]["counts"][-1] == 0  # 2.5 s <= 5 s
    logged = [r.getMessage() for r in caplog.records]
    assert logged == ["group g partitions [0, 1]: loop stalled 2500 ms: flush 2500 ms"]


def test_reports_merge_and_become_histograms() -> None:
    clock = Clock()
    first, second = Timeline("a", clock=clock), Timeline("b", clock=clock)
    for ms in range(12):
        turn(first, clock, [("poll", 0.001, 0.05), ("process", ms / 1000, 0)])
    turn(second, clock, [("flush", 7.0, 0)])  # beyond the last bound
    merged = json.loads(merge_reports(first.report(), "", second.report()))
    assert merged["turns"] == 13
    assert sum(merged["steps"]["process"]["counts"]) == 12
    assert merged["steps"]["flush"]["counts"][-1] == 1
    assert merged["stalls"][0]["seconds"] == pytest.approx(7.0)
    assert len(merged["stalls"]) == KEPT
    assert merge_reports("", "") == ""

    steps = _LoopSteps()
    registry = CollectorRegistry()
    registry.register(steps)
    steps.add("g", first.report())
    steps.add("g", second.report())
    steps.add("g", "")
    assert registry.get_sample_value("goka_processor_loop_step_seconds_count",
                                     {"group": "g", "step": "process"}) == 12  # fmt: skip
    assert registry.get_sample_value("goka_processor_loop_step_seconds_bucket",
                                     {"group": "g", "step": "process", "le": "0.005"}) == 6  # fmt: skip
    assert registry.get_sample_value("goka_processor_loop_step_seconds_bucket",
                                     {"group": "g", "step": "flush", "le": "5.0"}) == 0  # fmt: skip
    assert registry.get_sample_value("goka_processor_loop_step_seconds_sum",
                                     {"group": "g", "step": "flush"}) == pytest.approx(7.0)  # fmt: skip
