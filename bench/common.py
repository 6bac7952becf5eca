"""Helpers shared by the benchmark scripts: a broker, fresh topics, and summaries."""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Sequence
from typing import Any

from goka import TopicManager
from goka.dev import KINDS, EmbeddedBroker

_names = itertools.count()


def add_broker(parser: argparse.ArgumentParser) -> None:
    """Add ``--broker`` (the development broker a bench runs on; Apache Kafka by default)."""
    parser.add_argument("--broker", choices=KINDS, default="kafka",
                        help="the development broker to run on (default: kafka)")  # fmt: skip


def start_broker(kind: str, **kwargs: Any) -> EmbeddedBroker:
    """Start a development broker of ``kind`` and print which it is and how long it took."""
    began = time.monotonic()
    broker = EmbeddedBroker(kind, **kwargs).start()  # type: ignore[arg-type]
    print(f"broker: {broker.name} at {broker.bootstrap} (started in "
          f"{time.monotonic() - began:.1f} s)", flush=True)  # fmt: skip
    return broker


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
