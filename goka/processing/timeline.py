"""The timeline of a continuous loop (:mod:`goka.processing.epoch`): how long each step of
each turn took, to find where records wait.

A turn of the loop polls, processes what came, and every commit interval commits: the steps are
:data:`STEPS`. A poll that waits for records is idle, not a stall: the *stall* of a turn is its
time less the part of its poll spent waiting within the poll's timeout. Kept per loop: a
histogram of each step's durations (:data:`BUCKETS`), the longest stalls with their steps and
when they began, and, at DEBUG, a log line for each turn that stalled longer than
:data:`LOG_STALL_SECONDS`. The task's summary carries :meth:`Timeline.report`; the driver adds
the histograms to ``goka_processor_loop_step_seconds`` and keeps the longest stalls.
"""

from __future__ import annotations

import heapq
import json
import logging
import time
from collections.abc import Callable
from typing import Any

__all__ = ["BUCKETS", "STEPS", "Timeline", "merge_reports", "no_lap"]

log = logging.getLogger(__name__)

#: The steps of a turn: lease, ask, begin and assign (an epoch's first turn: its stores leased,
#: from another process if one held them; the broker asked where its inputs and table end and
#: where the group is; the stores made current; its consumer assigned), poll (the consumer),
#: process (the engine, producing its effects), flush (waiting for the broker to acknowledge
#: every output so far), write (state and offsets into the store), group_commit (the group's
#: offsets to Kafka), finals (windows' final results), snapshot (staging the stores' files for
#: upload, when due).
STEPS = (
    "lease",
    "ask",
    "begin",
    "assign",
    "poll",
    "process",
    "flush",
    "write",
    "group_commit",
    "finals",
    "snapshot",
)
#: Upper bounds (seconds) of the step histograms; one more bucket counts the rest.
BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
#: Stalls kept per loop (the longest).
KEPT = 10
#: Turns stalling longer than this are logged (at DEBUG).
LOG_STALL_SECONDS = 0.1


def no_lap(step: str) -> None:
    """A lap nobody times (micro-batches)."""


class Timeline:
    """The timeline of one loop (see the module docstring). Not thread-safe: the loop's own.

    Args:
        what: names the loop in log lines (``group g partitions [0, 1]``).
        clock: monotonic seconds.
        wall: unix seconds (when stalls began, to line them up with other measurements).
    """

    def __init__(self, what: str, *, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:  # fmt: skip
        self.what, self._clock, self._wall = what, clock, wall
        self.counts: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}
        self.stalls: list[tuple[float, float, list[tuple[str, float]]]] = []  # a min-heap
        self.turns = 0
        self._laps: list[tuple[str, float]] = []
        self._began = self._last = clock()
        self._idle = 0.0

    def start(self) -> None:
        """A turn begins."""
        self._laps = []
        self._began = self._last = self._clock()
        self._idle = 0.0

    def lap(self, step: str, idle: float = 0.0) -> None:
        """Step ``step`` ended (it began when the previous one ended); up to ``idle`` seconds
        of it were spent waiting with nothing to do."""
        now = self._clock()
        took, self._last = now - self._last, now
        self._laps.append((step, took))
        self._idle += min(idle, took)
        counts = self.counts.get(step)
        if counts is None:
            counts = self.counts[step] = [0] * (len(BUCKETS) + 1)
            self.sums[step] = 0.0
        counts[_bucket(took)] += 1
        self.sums[step] += took

    def end(self) -> float:
        """The turn ended: keep its stall if it is among the longest; return it (seconds)."""
        self.turns += 1
        stall = (self._last - self._began) - self._idle
        if len(self.stalls) < KEPT or stall > self.stalls[0][0]:
            began = self._wall() - (self._clock() - self._began)
            entry = (stall, began, self._laps)
            if len(self.stalls) < KEPT:
                heapq.heappush(self.stalls, entry)
            else:
                heapq.heapreplace(self.stalls, entry)
        if stall >= LOG_STALL_SECONDS and log.isEnabledFor(logging.DEBUG):
            steps = ", ".join(f"{name} {took * 1000:.0f} ms" for name, took in self._laps)
            log.debug("%s: loop stalled %.0f ms: %s", self.what, stall * 1000, steps)
        return stall

    @property
    def longest(self) -> float:
        """The longest stall so far (seconds)."""
        return max((s[0] for s in self.stalls), default=0.0)

    def report(self) -> str:
        """The histograms and the longest stalls, as JSON (for a task's summary)."""
        return json.dumps({
            "turns": self.turns,
            "steps": {s: {"counts": c, "sum": round(self.sums[s], 6)}
                      for s, c in self.counts.items()},
            "stalls": [{"seconds": round(s, 6), "began": round(b, 3),
                        "steps": [[n, round(t, 6)] for n, t in laps]}
                       for s, b, laps in sorted(self.stalls, reverse=True)],
        })  # fmt: skip


def merge_reports(*reports: str) -> str:
    """One report of several (:meth:`Timeline.report`, empty ones allowed): histograms added,
    the longest :data:`KEPT` stalls kept."""
    turns, stalls = 0, []
    steps: dict[str, dict[str, Any]] = {}
    for report in reports:
        if not report:
            continue
        found: dict[str, Any] = json.loads(report)
        turns += found["turns"]
        for step, figures in found["steps"].items():
            into = steps.setdefault(step, {"counts": [0] * (len(BUCKETS) + 1), "sum": 0.0})
            into["counts"] = [a + b for a, b in zip(into["counts"], figures["counts"],
                                                    strict=True)]  # fmt: skip
            into["sum"] += figures["sum"]
        stalls += found["stalls"]
    if not turns and not stalls:
        return ""
    stalls = sorted(stalls, key=lambda s: s["seconds"], reverse=True)[:KEPT]
    return json.dumps({"turns": turns, "steps": steps, "stalls": stalls})


def _bucket(seconds: float) -> int:
    for index, bound in enumerate(BUCKETS):
        if seconds <= bound:
            return index
    return len(BUCKETS)
