"""Helpers shared by the benchmark scripts: a broker, fresh topics, summaries, CPU shares."""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from collections.abc import Iterable, Sequence
from typing import Any

import confluent_kafka

from goka import TopicManager
from goka.dev import KINDS, EmbeddedBroker
from goka.kafka.config import producer_config

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


class CpuShare:
    """The cores a process (the broker) and the rest of the machine used between
    :meth:`start` and :meth:`line`, from ``/proc`` (Linux)."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self._began = self._read()

    @staticmethod
    def _machine() -> float:
        with open("/proc/stat") as stat:
            fields = [int(f) for f in stat.readline().split()[1:8]]
        return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # less idle, iowait

    def _process(self) -> float:
        if self.pid is None:
            return 0.0
        with open(f"/proc/{self.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _read(self) -> tuple[float, float, float]:
        return time.monotonic(), self._machine(), self._process()

    def start(self) -> None:
        self._began = self._read()

    def cores(self) -> tuple[float, float]:
        """The cores the process and the rest of the machine used since :meth:`start`."""
        (t0, m0, p0), (t1, m1, p1) = self._began, self._read()
        took = max(t1 - t0, 1e-9)
        return (p1 - p0) / took, (m1 - m0 - p1 + p0) / took

    def line(self) -> str:
        """``broker 0.62 cores, the rest 1.31`` since :meth:`start`."""
        broker, rest = self.cores()
        return f"broker {broker:.2f} cores, the rest {rest:.2f}"


def produce_keys(brokers: str, topic: str, keys: Iterable[str], value: bytes = b"/page") -> None:
    """Produce a record of ``value`` for each of ``keys``, in order, waiting for them all."""
    produce_records(brokers, topic, ((key, value) for key in keys))


def produce_records(brokers: str, topic: str,
                    records: Iterable[tuple[str | bytes, bytes | None]]) -> None:  # fmt: skip
    """Produce ``(key, value)`` records, in order, waiting for them all."""
    producer = confluent_kafka.Producer(producer_config(brokers, {"linger.ms": 20}))
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
