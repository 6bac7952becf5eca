"""confluentinc/parallel-consumer as a peer: ``bench/peers/parallel_consumer`` (one Java source
and a pom naming ``parallel-consumer-core``) built as :mod:`bench.peers.java` builds peers, and
run as a child JVM on a topic of the broker. What the program runs and prints is in its
javadoc.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.peers import java

SOURCES = Path(__file__).resolve().parent / "parallel_consumer"
MAIN = "dev.goka.peers.ParallelConsumerPeer"


def build() -> Path:
    """The built peer's folder (raises :class:`bench.peers.java.PeerUnavailable`)."""
    return java.build(SOURCES, "parallel-consumer-peer", "the parallel-consumer peer")


@dataclass(frozen=True)
class PeerRun:
    """What one run printed (epoch milliseconds)."""

    first: int  # the first record read
    last: int  # the last output acknowledged
    read: int
    produced: int
    closed: int


def run(bootstrap: str, input: str, output: str, *, group: str, url: str, concurrency: int,
        expect: int, guarantee: str = "at_least_once",
        timeout: float = 900) -> PeerRun:  # fmt: skip
    """Run the peer until it produced ``expect`` outputs; return what it measured."""
    built = build()
    arguments = {"bootstrap": bootstrap, "input": input, "output": output, "group": group,
                 "url": url, "concurrency": concurrency, "expect": expect,
                 "guarantee": guarantee, "timeout_s": int(timeout)}  # fmt: skip
    figures, _ = java.run(built, MAIN, arguments, what="parallel-consumer", figures="first=",
                          timeout=timeout + 120)  # fmt: skip
    return PeerRun(**figures)
