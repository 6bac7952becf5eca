"""Helpers shared by the benchmark scripts: a broker, fresh topics, and summaries."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

from goka import TopicManager

_names = itertools.count()


def fresh_topic(brokers: str, prefix: str, partitions: int) -> str:
    """Create and return a new stream topic."""
    name = f"bench-{prefix}-{next(_names)}"
    TopicManager(brokers).ensure_stream_exists(name, partitions)
    return name


def summary(values: Sequence[float]) -> str:
    """``min / median / max`` of ``values``."""
    return (
        f"min {min(values):,.2f}  median {statistics.median(values):,.2f}  max {max(values):,.2f}"
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, nearest rank."""
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered)) - 1))
    return ordered[index]
