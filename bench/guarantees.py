"""What exactly-once costs: the same groups under ``guarantee="at-least-once"`` and
``"exactly-once"``, on the same input and broker, one after another.

Input: bench.windows' dense input (1M events over 1,000 keys, event times over 20 minutes, 4
partitions). Groups, in micro-batches: the plain count, and the tumbling (final results) and
hopping windowed counts of bench.windows; in continuous mode (commit interval 0.1 s): the
plain count. Reported per run: each group's steady records/s under both guarantees and the
changelog records it wrote per input record; then, over the runs (min/median/max),
exactly-once / at-least-once per group and mode, and windowed / plain under exactly-once.
The last line: ``exactly-once/at-least-once (continuous plain): min X median Y max Z``.

    python -m bench.guarantees [--messages 1000000] [--runs 2] [--batch 250000]
"""

from __future__ import annotations

import argparse

from bench.common import add_broker, start_broker, summary
from bench.processor import count_group, goka_continuous, goka_run
from bench.windows import INPUTS, changelog_records, fill, hopping, tumbling
from goka.spark import build_session

GUARANTEES = ("at-least-once", "exactly-once")
GROUPS = {"plain": count_group, "tumbling": tumbling, "hopping": hopping}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=250_000, help="maxOffsetsPerTrigger")
    add_broker(parser)
    args = parser.parse_args()
    ratios: dict[str, list[float]] = {}
    with start_broker(args.broker) as broker:
        brokers, topic = broker.bootstrap, "bench-guarantees-dense"
        fill(brokers, topic, args.messages, INPUTS["dense"])
        spark = build_session("bench", "local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        for run in range(1, args.runs + 1):
            steady: dict[tuple[str, str], float] = {}
            for guarantee in GUARANTEES:
                for name, build in GROUPS.items():
                    graph = build(topic)
                    _, rate, done = goka_run(spark, brokers, topic, args.batch, graph,
                                             guarantee=guarantee)  # fmt: skip
                    assert done == args.messages, f"{name} {guarantee}: {done:,} processed"
                    steady[(guarantee, name)] = rate
                    written = changelog_records(brokers, graph) / args.messages
                    print(f"run {run} {guarantee:<13} {name:<10} {rate:>9,.0f} msg/s, "
                          f"{written:.2f} changelog records per input record",
                          flush=True)  # fmt: skip
                _, rate = goka_continuous(spark, brokers, topic, args.messages,
                                          guarantee=guarantee)  # fmt: skip
                steady[(guarantee, "continuous plain")] = rate
                print(f"run {run} {guarantee:<13} continuous plain {rate:>9,.0f} msg/s",
                      flush=True)  # fmt: skip
            for name in (*GROUPS, "continuous plain"):
                ratios.setdefault(f"exactly-once/at-least-once ({name})", []).append(
                    steady[("exactly-once", name)] / steady[("at-least-once", name)]
                )
                if name in ("tumbling", "hopping"):
                    ratios.setdefault(f"{name}/plain (exactly-once)", []).append(
                        steady[("exactly-once", name)] / steady[("exactly-once", "plain")]
                    )
        spark.stop()
    print(f"\n{args.messages:,} events over {INPUTS['dense']:,} keys, micro-batches of "
          f"{args.batch:,}, continuous commits every 0.1 s, {args.runs} runs")  # fmt: skip
    for name, values in ratios.items():
        if "(continuous plain)" not in name:
            print(f"{name:<44}: {summary(values)}")
    plain = ratios["exactly-once/at-least-once (continuous plain)"]
    print(f"exactly-once/at-least-once (continuous plain): {summary(plain)}")


if __name__ == "__main__":
    main()
