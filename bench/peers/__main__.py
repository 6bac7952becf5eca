"""goka-py, Kafka Streams and quixstreams on the same broker and input (see :mod:`bench.peers`).

Reported: each system's records/s (steady state: goka-py from its first commit, Kafka Streams
from its first record read to the end of its close, quixstreams from its start) and peak memory
(the processes' resident memory, shared pages counted once: goka-py's driver, Spark JVM and
Python workers, sampled every second; Kafka Streams' JVM and quixstreams' process: their own
peak RSS), medians over the runs. The last line:
``peers: goka/kstreams min X median Y max Z``: goka-py continuous over Kafka Streams, per run,
over the (plain, tumbling, hopping) x (guarantees both have) pairs. goka-py has no
exactly-once outputs yet (issue 50): its state is exactly once, its outputs at least once, so
its pairs are at least once; its rate beside Kafka Streams' exactly_once_v2 is printed apart.

    python -m bench.peers [--messages 1000000] [--runs 3] [--batch 250000]
        [--only plain,tumbling,hopping] [--systems goka,kstreams,quix]
        [--quix-guarantees at-least-once,exactly-once]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import confluent_kafka.admin

from bench.common import add_broker, start_broker, summary
from bench.peers import kstreams
from bench.processor import PARTITIONS, count_group, goka_continuous, goka_run, quix_figures
from bench.windows import SPAN_MS, fill, per_five, tumbling
from examples.click_count.demo import descendants, process_memory
from goka import (
    Hopping,
    Int64Codec,
    StringCodec,
    TopicManager,
    define_group,
    input,
    output,
    persist,
    window,
)
from goka.dev import EmbeddedBroker
from goka.group.graph import GroupGraph
from goka.spark import build_session

TOPOLOGIES = ("plain", "tumbling", "hopping")
GUARANTEES = ("at-least-once", "exactly-once")
#: The input's output topics (made once): goka-py's final results, Kafka Streams'.
SINKS = ("per-minute", "per-five", "ks-plain", "ks-tumbling", "ks-hopping")
KS_GUARANTEE = {"at-least-once": "at_least_once", "exactly-once": "exactly_once_v2"}
#: Kafka Streams' arguments per topology: the windows of bench.windows' groups.
KS_TOPOLOGY = {"plain": ("count", {}),
               "tumbling": ("tumbling", {"size_ms": 60_000, "grace_ms": 5_000}),
               "hopping": ("hopping", {"size_ms": 300_000, "advance_ms": 60_000,
                                       "grace_ms": 5_000})}  # fmt: skip


def hopping_final(topic: str) -> GroupGraph:
    """Hopping 5-minute windows advancing by a minute, grace 5 s, final results."""
    return define_group(
        f"{topic}-hf{time.monotonic_ns()}", input(topic, StringCodec(), per_five),
        window("five", Hopping(5 * 60_000, 60_000), Int64Codec(), grace=5_000, emit="final",
               output=f"{topic}-per-five"),
        output(f"{topic}-per-five", Int64Codec()), persist(Int64Codec()),
    )  # fmt: skip


GOKA_GROUPS: dict[str, Callable[[str], GroupGraph]] = {
    "plain": count_group, "tumbling": tumbling, "hopping": hopping_final,
}  # fmt: skip


@contextmanager
def peak_memory(broker: EmbeddedBroker) -> Iterator[list[float]]:
    """Sample the memory of this process and those below it but the broker (PSS: pages shared
    between processes counted once) every second; the list yielded holds the peak (kB).

    Once a second: reading the memory maps of a JVM costs tens of milliseconds, which sampled
    five times a second took a tenth of the cores the processor measured had."""
    peak = [0.0]
    done = threading.Event()
    broker_tree = {broker.pid, *descendants(broker.pid)} if broker.pid is not None else set()

    def sample() -> None:
        while True:
            mine = [p for p in [os.getpid(), *descendants(os.getpid())] if p not in broker_tree]
            peak[0] = max(peak[0], sum(process_memory(p)[1] for p in mine))
            if done.wait(1.0):
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()


Figures = dict[tuple[str, str, str], list[tuple[float, float]]]


def one_run(spark: object, broker: EmbeddedBroker, topic: str, run: int,
            args: argparse.Namespace, figures: Figures) -> None:  # fmt: skip
    """Each system over each topology once; records/s and peak memory (kB) into ``figures``
    under (system, guarantee, topology)."""
    for name in args.only:
        line = []
        for system, guarantee, result in one_topology(spark, broker, topic, name, run, args):
            if isinstance(result, str):
                line.append(f"{system} {guarantee}: {result}")
                continue
            figures.setdefault((system, guarantee, name), []).append(result)
            line.append(f"{system} {guarantee} {result[0]:,.0f}/s {result[1] / 1024:,.0f} MB")
        print(f"run {run} {name}: " + "   ".join(line), flush=True)
        drop_topics(broker.bootstrap, keep={topic, *(f"{topic}-{sink}" for sink in SINKS)})


def drop_topics(brokers: str, keep: set[str]) -> None:
    """Delete the topics the systems made (tables, changelogs, outputs), keeping the input and
    its sinks: the broker keeps its data in memory (/dev/shm), and three runs' changelogs
    took enough of it that the kernel killed Kafka Streams' JVM (5 GB) for memory."""
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": brokers})
    names = [t for t in admin.list_topics(timeout=30).topics
             if t not in keep and not t.startswith("__")]  # fmt: skip
    for future in admin.delete_topics(names, operation_timeout=60).values() if names else []:
        future.result(60)


Result = tuple[str, str, tuple[float, float] | str]


def one_topology(spark: object, broker: EmbeddedBroker, topic: str, name: str, run: int,
                 args: argparse.Namespace) -> Iterator[Result]:  # fmt: skip
    """Each system over topology ``name``: (system, guarantee, (records/s, peak kB) or why
    it did not run)."""
    brokers = broker.bootstrap
    if "goka" in args.systems:
        with peak_memory(broker) as peak:
            _, steady, done = goka_run(spark, brokers, topic, args.batch, GOKA_GROUPS[name](topic))
        assert done == args.messages, f"goka-py {name}: {done:,} of {args.messages:,}"
        yield "goka-py micro-batch", "at-least-once", (steady, peak[0])
        with peak_memory(broker) as peak:
            _, steady = goka_continuous(spark, brokers, topic, args.messages,
                                        graph=GOKA_GROUPS[name](topic))  # fmt: skip
        yield "goka-py continuous", "at-least-once", (steady, peak[0])
    if "kstreams" in args.systems:
        topology, settings = KS_TOPOLOGY[name]
        for guarantee in GUARANTEES:
            peer = kstreams.run(brokers, topic, app=f"ks-{name}-{guarantee}-{run}",
                                topology=topology, expect=args.messages,
                                output=f"{topic}-ks-{name}",
                                guarantee=KS_GUARANTEE[guarantee], **settings)  # fmt: skip
            assert peer.read == args.messages, f"Kafka Streams read {peer.read:,}"
            yield "Kafka Streams", guarantee, (peer.steady, peer.peak_rss_kb)
    if "quix" in args.systems:
        how = "count" if name == "plain" else name
        for guarantee in args.quix_guarantees:
            yield "quixstreams", guarantee, quix_figures(brokers, topic, args.messages, how,
                                                         guarantee)  # fmt: skip


def table(figures: Figures, topologies: list[str]) -> None:
    """Medians per system and guarantee (rows) and topology (columns)."""
    rows = sorted({(s, g) for s, g, _ in figures}, key=lambda r: (r[0].startswith("q"), r))
    print(f"{'':<40}" + "".join(f"{t:>26}" for t in topologies))
    for system, guarantee in rows:
        cells = []
        for name in topologies:
            values = figures.get((system, guarantee, name))
            if not values:
                cells.append(f"{'-':>26}")
                continue
            rate = statistics.median(v[0] for v in values)
            memory = statistics.median(v[1] for v in values) / 1024
            cells.append(f"{f'{rate:,.0f}/s {memory:,.0f} MB':>26}")
        print(f"{system + ' ' + guarantee:<40}" + "".join(cells))


def ratios(figures: Figures, topologies: list[str], peer: str) -> dict[str, list[float]]:
    """goka-py continuous over Kafka Streams (``peer`` guarantee), run by run, per topology."""
    found = {}
    for name in topologies:
        goka = figures.get(("goka-py continuous", "at-least-once", name), [])
        other = figures.get(("Kafka Streams", peer, name), [])
        if goka and other:
            found[name] = [g[0] / k[0] for g, k in zip(goka, other, strict=True)]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=250_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--only", type=lambda s: s.split(","), default=list(TOPOLOGIES),
                        help="topologies, comma-separated (plain,tumbling,hopping)")  # fmt: skip
    parser.add_argument("--systems", type=lambda s: s.split(","),
                        default=["goka", "kstreams", "quix"])  # fmt: skip
    parser.add_argument("--quix-guarantees", type=lambda s: s.split(","),
                        default=["at-least-once"],
                        help="quixstreams' guarantees, comma-separated (at-least-once,"
                        "exactly-once; default: at-least-once, its exactly-once measured "
                        "within 10%% of it)")  # fmt: skip
    add_broker(parser)
    args = parser.parse_args()
    if "kstreams" in args.systems:
        began = time.monotonic()
        kstreams.build()
        print(f"Kafka Streams {kstreams.version()} peer built or found in "
              f"{time.monotonic() - began:.1f} s", flush=True)  # fmt: skip
    with start_broker(args.broker) as broker:
        topic = "bench-peers"
        fill(broker.bootstrap, topic, args.messages)
        manager = TopicManager(broker.bootstrap)
        for sink in SINKS:
            manager.ensure_stream_exists(f"{topic}-{sink}", PARTITIONS)
        spark = build_session("bench", "local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        figures: Figures = {}
        for run in range(1, args.runs + 1):
            one_run(spark, broker, topic, run, args, figures)
        spark.stop()
        name = broker.name
    print(f"\n{args.messages:,} events over 100,000 keys, {PARTITIONS} partitions, event times "
          f"over {SPAN_MS // 60_000} minutes; {name}; Kafka Streams {kstreams.version()} (2 "
          f"threads, RocksDB, default caching); {os.cpu_count()} cores, {platform.machine()}, "
          f"Python {platform.python_version()}; {args.runs} runs, medians")  # fmt: skip
    table(figures, args.only)
    pairs: list[float] = []
    for name, values in ratios(figures, args.only, "at-least-once").items():
        print(f"goka-py continuous / Kafka Streams, {name:<8} at least once: {summary(values)}"
              f"   (target >= 1.0)")  # fmt: skip
        pairs.extend(values)
    for name, values in ratios(figures, args.only, "exactly-once").items():
        print(f"goka-py continuous / Kafka Streams exactly_once_v2, {name:<8}: "
              f"{summary(values)}   (goka-py's outputs at least once: issue 50)")  # fmt: skip
    if pairs:
        print(f"peers: goka/kstreams {summary(pairs)}")


if __name__ == "__main__":
    main()
