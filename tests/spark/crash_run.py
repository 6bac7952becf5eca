"""The processor under test of the crash tests: click count in the mode and configuration the
command line gives, until caught up (``--mode available-now``) or until SIGTERM (it prints
``running`` once its query started), killed where
``--kill`` says (through the builders of ``tests/spark/crash.py``, imported from there so that
Spark pickles them by reference and a worker's counts last across tasks). Prints what it did
as one JSON line when it ends.

    python -m tests.spark.crash_run BROKERS TOPIC GROUP STATE CHECKPOINT [--mode MODE]
        [--max-offsets N] [--epoch S] [--trigger S] [--commit-interval S]
        [--snapshot-interval S] [--guarantee G] [--tell TOPIC] [--transaction-timeout-ms MS]
        [--concurrency N] [--graph timed]
        [--kill POINT --nth N --marker FILE]
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import signal

from examples.click_count.group import count
from goka import Int64Codec, StringCodec, define_group, input, output, persist
from goka.spark import Processor
from tests.spark.crash import POINTS, Kill, builders, count_and_tell, count_and_tell_later
from tests.spark.timed import timed_graph


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("brokers", "topic", "group", "state", "checkpoint"):
        parser.add_argument(name)
    parser.add_argument("--mode", choices=("micro-batch", "continuous", "available-now"),
                        default="available-now")  # fmt: skip
    parser.add_argument("--max-offsets", type=int, default=None)
    parser.add_argument("--epoch", type=float, default=5.0)
    parser.add_argument("--trigger", type=float, default=0.0)
    parser.add_argument("--commit-interval", type=float, default=0.1)
    parser.add_argument("--snapshot-interval", type=float, default=0.5)
    parser.add_argument("--snapshot-dir", default="",
                        help="where snapshots go (default: beside the checkpoint)")  # fmt: skip
    parser.add_argument("--guarantee", default="at-least-once")
    parser.add_argument("--tell", default="", help="emit each click's place to this topic")
    parser.add_argument("--transaction-timeout-ms", type=int, default=None)
    parser.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="records of a partition in flight (the count awaits at random)",
    )
    parser.add_argument("--graph", choices=("count", "timed"), default="count",
                        help="timed: tests/spark/timed.py's group (on GROUP = TOPIC-g)")  # fmt: skip
    parser.add_argument("--log-level", default=None, help="of the driver and the workers")
    parser.add_argument("--kill", choices=POINTS)
    parser.add_argument("--nth", type=int, default=1)
    parser.add_argument("--marker", default="")
    args = parser.parse_args()
    if args.log_level:
        logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: "
                            "%(message)s")  # fmt: skip
    told = [output(args.tell, StringCodec())] if args.tell else []
    tell = count_and_tell_later if args.concurrency > 1 else count_and_tell
    callback = functools.partial(tell, args.tell) if args.tell else count
    graph = define_group(args.group, input(args.topic, StringCodec(), callback),
                         persist(Int64Codec()), *told, concurrency=args.concurrency)  # fmt: skip
    if args.graph == "timed":
        graph = timed_graph(args.topic, args.concurrency)
        assert graph.group == args.group, (graph.group, args.group)
    kill = Kill(args.kill, args.nth, args.marker) if args.kill else None
    micro = args.mode == "micro-batch"  # (a trigger in continuous mode is refused)
    timing = {"trigger": f"{round(args.trigger * 1000)} milliseconds"} if micro else {}
    processor = Processor(
        graph, args.brokers, state_dir=args.state, checkpoint_dir=args.checkpoint,
        max_offsets_per_trigger=args.max_offsets, snapshot_interval=args.snapshot_interval,
        snapshot_dir=args.snapshot_dir or None,
        builders=builders(kill, transaction_timeout_ms=args.transaction_timeout_ms),
        mode=args.mode, epoch=args.epoch,
        **timing,
        commit_interval=args.commit_interval, guarantee=args.guarantee,
        log_level=args.log_level,
    )  # fmt: skip
    if args.graph == "timed":
        processor.prepare_topics(create_outputs=True)
    if args.mode == "available-now":
        totals = processor.run_until_caught_up(timeout=300)
    else:  # until SIGTERM
        signal.signal(signal.SIGTERM, lambda *_: processor.stop())
        processor.start()
        print("running", flush=True)
        while not processor.wait(0.5):
            pass
        totals = processor.totals
    print(json.dumps({"processed": totals.processed, "skipped_applied": totals.skipped_applied,
                      "stores": totals.stores}))  # fmt: skip


if __name__ == "__main__":
    main()
