"""Kafka Streams as a peer: ``bench/peers/kstreams`` (one Java source and a pom naming
``org.apache.kafka:kafka-streams`` at the development broker's version) built once into a cache,
and run as a child JVM on a topic of the broker.

It is built as :mod:`bench.peers.java` builds peers (into
``$XDG_CACHE_HOME/goka-py/kstreams-peer/``). What the program runs and prints is in its
javadoc.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bench.peers import java
from bench.peers.java import PeerUnavailable
from goka.dev.kafka import KAFKA_VERSION

SOURCES = Path(__file__).resolve().parent / "kstreams"
MAIN = "dev.goka.peers.KStreamsPeer"
#: The peer's stderr line for each (record, window) it dropped as late (Kafka Streams' own WARN).
_DROPPED = re.compile(r"Skipping record for expired window\. topic=\[(?P<topic>[^\]]*)\] "
                      r"partition=\[(?P<partition>\d+)\] offset=\[(?P<offset>\d+)\] "
                      r"timestamp=\[(?P<timestamp>-?\d+)\] window=\[(?P<start>-?\d+),"
                      r"(?P<end>-?\d+)\)")  # fmt: skip


def version() -> str:
    """The kafka-streams version the pom names."""
    found = re.search(r"<artifactId>kafka-streams</artifactId>\s*<version>([^<]+)</version>",
                      (SOURCES / "pom.xml").read_text())  # fmt: skip
    assert found, "bench/peers/kstreams/pom.xml names no kafka-streams version"
    return found.group(1)


def build() -> Path:
    """The built peer's folder (:func:`bench.peers.java.build`).

    Raises:
        PeerUnavailable: no ``mvn`` or ``javac``, Maven could not resolve the pom, or the pom
            names another Kafka version than the broker's.
    """
    if version() != KAFKA_VERSION:
        raise PeerUnavailable(
            f"bench/peers/kstreams/pom.xml names kafka-streams {version()}, the broker is "
            f"{KAFKA_VERSION}: keep them equal"
        )
    return java.build(SOURCES, "kstreams-peer", "the Kafka Streams peer")


@dataclass(frozen=True)
class Dropped:
    """A (record, window) Kafka Streams dropped as late, from its log."""

    partition: int
    offset: int
    timestamp: int
    window_start: int
    window_end: int


@dataclass
class PeerRun:
    """What one run of the peer printed (times in epoch milliseconds)."""

    started: int
    first: int
    last: int
    closed: int
    read: int
    dropped: int
    peak_rss_kb: int
    dropped_records: list[Dropped] = field(default_factory=list)

    @property
    def steady(self) -> float:
        """Records/s from the first record read to the end of the close (its last commit)."""
        return self.read * 1000 / max(self.closed - self.first, 1)

    @property
    def whole(self) -> float:
        """Records/s from the JVM's start (its group joined, its stores made) to the close."""
        return self.read * 1000 / max(self.closed - self.started, 1)


def run(bootstrap: str, input: str, *, app: str, topology: str, expect: int,
        output: str = "", guarantee: str = "at_least_once", timeout: float = 900,
        **settings: object) -> PeerRun:  # fmt: skip
    """Run the peer over ``expect`` records of ``input`` and return what it measured.

    ``settings``: more of its ``name=value`` arguments (``threads``, ``size_ms``, ``advance_ms``,
    ``grace_ms``, ``cache_bytes``).
    """
    built = build()
    with tempfile.TemporaryDirectory(prefix="kstreams-") as state:
        arguments = {"bootstrap": bootstrap, "input": input, "output": output, "app": app,
                     "state": state, "topology": topology, "guarantee": guarantee,
                     "expect": expect, "timeout_s": int(timeout), **settings}  # fmt: skip
        figures, stderr = java.run(built, MAIN, arguments, figures="started=",
                                   what=f"Kafka Streams ({topology}, {guarantee})",
                                   timeout=timeout + 180)  # fmt: skip
    dropped = [Dropped(int(m["partition"]), int(m["offset"]), int(m["timestamp"]),
                       int(m["start"]), int(m["end"]))
               for m in _DROPPED.finditer(stderr)]  # fmt: skip
    return PeerRun(**figures, dropped_records=dropped)
