"""State that follows its partition: the same micro-batches on a standalone cluster and locally.

A Spark standalone master and two workers (one core each) run on 127.0.0.1; each executor keeps
its partition stores on its own disk, and snapshots go to a checkpoint directory they share (as
an NFS mount would be). For each mode (``cluster``, then ``local[2]``, alternating per run):

1. setup: the click-count group builds a table of ``--keys`` keys on 4 partitions (one event
   per key, one micro-batch); its first commit snapshots each partition;
2. once every partition's snapshot is published, ``--batches`` micro-batches of ``--batch``
   events over random keys, measured one by one.

Per batch it prints the wall time, how the 4 partition stores came to be (reused, opened,
caught up from their own older state, restored from a snapshot, rebuilt from the whole table),
the records read from the table topic and the snapshot bytes restored. Targets: no full rebuild
after the first snapshot, table records re-read per batch under 5% of the table, median batch
time on the cluster at most 2x local mode (each run's ratio, min / median over runs).

    python -m bench.cluster [--keys 400000] [--batches 8] [--batch 2000] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import add_broker, produce_keys, start_broker, summary
from goka import Int64Codec, StringCodec, TopicManager, define_group, input, persist

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 4
ORIGINS = ("reused", "opened", "caught_up", "restored", "rebuilt", "created")


def fill(brokers: str, topic: str, keys: list[str]) -> None:
    produce_keys(brokers, topic, keys)


def drive(args: argparse.Namespace) -> None:
    """One mode, in its own process (its own Spark driver): print the results as JSON."""
    from examples.click_count.group import count
    from goka.spark import Processor, build_session

    conf = json.loads(args.conf)
    if conf:
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.appName("bench-cluster")
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    else:
        spark = build_session("bench-local", "local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    graph = define_group(f"{args.topic}-g", input(args.topic, StringCodec(), count),
                         persist(Int64Codec()))  # fmt: skip
    common = {"spark": spark, "state_dir": "goka-state", "checkpoint_dir": args.checkpoint}
    started = time.monotonic()
    setup = Processor(graph, args.brokers, **common).run_until_caught_up()
    setup_seconds = time.monotonic() - started
    published = Path(args.checkpoint) / "state" / graph.group
    while not all(
        any((published / f"{p}" / "manifests").glob("*.json")) for p in range(PARTITIONS)
    ):
        time.sleep(0.1)
    rng = random.Random(7)
    fill(args.brokers, args.topic, [f"user-{rng.randrange(args.keys):07d}"
                                    for _ in range(args.batches * args.batch)])  # fmt: skip
    measured = Processor(graph, args.brokers, max_offsets_per_trigger=args.batch, **common)
    began = time.time()
    run = measured.run_until_caught_up()
    previous, rows = began, []
    for b in run.recent:
        rows.append({"wall": b.finished_at - previous, "task": b.seconds,
                     "processed": b.processed, "stores": dict(b.stores),
                     "table_records": b.table_records, "restored_bytes": b.restored_bytes,
                     "restore_seconds": b.restore_seconds})  # fmt: skip
        previous = b.finished_at
    uploads = [u for b in [*setup.recent, *run.recent] for u in b.uploads]
    print(
        "RESULT "
        + json.dumps(
            {
                "setup_seconds": setup_seconds,
                "batches": rows,
                "uploads": uploads,
                "setup_stores": dict(setup.stores),
            }
        )
    )
    spark.stop()


def run_mode(mode: str, brokers: str, keys: int, args: argparse.Namespace,
             conf: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    topic = f"bench-cluster-{mode}-{time.monotonic_ns()}"
    TopicManager(brokers).ensure_stream_exists(topic, PARTITIONS)
    fill(brokers, topic, [f"user-{k:07d}" for k in range(keys)])
    with tempfile.TemporaryDirectory(prefix=f"goka-bench-{mode}-") as work:
        command = [sys.executable, "-m", "bench.cluster", "--drive", "--topic", topic,
                   "--brokers", brokers, "--checkpoint", str(Path(work) / "checkpoint"),
                   "--keys", str(keys), "--batches", str(args.batches), "--batch", str(args.batch),
                   "--conf", json.dumps(conf)]  # fmt: skip
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "GOKA_LOG_LEVEL": "WARNING",
            "PYSPARK_PYTHON": sys.executable,
        }  # also the driver's data source planner
        done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True,
                              timeout=1800)  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{mode} run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return result


def report(mode: str, result: dict[str, Any], keys: int) -> None:
    print(f"\n{mode}: setup {result['setup_seconds']:.1f}s (stores {result['setup_stores']})")
    print("  batch  wall s  task s  " + "  ".join(f"{o[:9]:>9}" for o in ORIGINS)
          + "  table rec  restored MB")  # fmt: skip
    for n, row in enumerate(result["batches"], 1):
        stores = "  ".join(f"{row['stores'].get(o, 0):>9}" for o in ORIGINS)
        print(f"  {n:>5}  {row['wall']:>6.2f}  {row['task']:>6.2f}  {stores}  "
              f"{row['table_records']:>9}  {row['restored_bytes'] / 1e6:>11.2f}")  # fmt: skip
    sent = [u for u in result["uploads"] if not u.get("error")]
    if sent:
        size = statistics.median(u["bytes"] for u in sent) / 1e6
        took = statistics.median(u["seconds"] for u in sent)
        print(f"  snapshot uploads: {len(sent)}, {size:.2f} MB and {took:.2f}s median")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=400_000)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--drive", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--topic", "--brokers", "--checkpoint", "--conf"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    add_broker(parser)
    args = parser.parse_args()
    if args.drive:
        drive(args)
        return
    from goka.spark.standalone import StandaloneCluster

    ratios, rebuilds, reread = [], 0, []
    with start_broker(args.broker) as broker, StandaloneCluster(2, python_path=ROOT) as cluster:
        for run in range(1, args.runs + 1):
            modes = [("cluster", cluster.session_conf()), ("local[2]", {})]
            results = {}
            for mode, conf in modes if run % 2 else modes[::-1]:
                results[mode] = run_mode(
                    mode.split("[")[0], broker.bootstrap, args.keys, args, conf
                )
                report(f"run {run}, {mode}", results[mode], args.keys)
            for result in results.values():
                rebuilds += sum(b["stores"].get("rebuilt", 0) for b in result["batches"])
                reread += [b["table_records"] / args.keys for b in result["batches"]]
            medians = {
                m: statistics.median(b["wall"] for b in r["batches"]) for m, r in results.items()
            }
            ratios.append(medians["cluster"] / medians["local[2]"])
            print(
                f"\nrun {run}: median batch {medians['cluster']:.2f}s on the cluster, "
                f"{medians['local[2]']:.2f}s local: ratio {ratios[-1]:.2f}",
                flush=True,
            )
    print(f"\n{args.keys:,} keys on {PARTITIONS} partitions, {args.batches} batches of "
          f"{args.batch:,} events after the first snapshot, {args.runs} runs")  # fmt: skip
    print(f"full rebuilds after the first snapshot : {rebuilds}   (target 0)")
    print(f"table records re-read per batch / table: max {max(reread):.2%}, "
          f"median {statistics.median(reread):.2%}   (target < 5%)")  # fmt: skip
    print(f"median batch time, cluster / local     : {summary(ratios)}   (target <= 2)")


if __name__ == "__main__":
    main()
