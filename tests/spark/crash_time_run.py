"""The processor under test of the time crash tests: ``tests/spark/timed.py``'s group in the
mode the command line gives until caught up, killed where ``--kill`` says (through the
builders of ``tests/spark/crash.py``).

    python -m tests.spark.crash_time_run BROKERS TOPIC STATE CHECKPOINT [--mode MODE]
        [--max-offsets N] [--fire-budget N] [--guarantee G] [--concurrency N]
        [--kill POINT --nth N --marker FILE]
"""

from __future__ import annotations

import argparse
import time

from goka.errors import BrokerError
from goka.logs import configure
from goka.spark import Processor
from tests.spark.crash import POINTS, add_kill_arguments, builders, kill_of
from tests.spark.timed import timed_graph


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("brokers", "topic", "state", "checkpoint"):
        parser.add_argument(name)
    parser.add_argument("--mode", choices=("available-now", "continuous"), default="available-now")
    parser.add_argument("--max-offsets", type=int, default=None)
    parser.add_argument("--fire-budget", type=int, default=10_000)
    parser.add_argument("--guarantee", default="at-least-once")
    parser.add_argument("--concurrency", type=int, default=1)
    add_kill_arguments(parser, POINTS)
    args = parser.parse_args()
    configure("INFO", "text")
    kill = kill_of(args)
    processor = Processor(
        timed_graph(args.topic, args.concurrency), args.brokers, state_dir=args.state,
        checkpoint_dir=args.checkpoint, max_offsets_per_trigger=args.max_offsets,
        snapshot_interval=0.5, builders=builders(kill), fire_budget=args.fire_budget,
        mode="continuous" if args.mode == "continuous" else "micro-batch", epoch=3.0,
        guarantee=args.guarantee, log_level="INFO",  # its stderr is kept with the stores when a trial fails
    )  # fmt: skip
    ticks = processor.graph.group.ticks
    processor.prepare_topics(create_outputs=True)
    if args.mode == "available-now":
        processor.run_until_caught_up(timeout=300)
        return
    processor.start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # caught up: every partition committed to its end
        try:
            status = [p for p in processor.partition_status() if p["topic"] != ticks]
        except BrokerError:  # (offsets a killed exactly-once run sent: held until it is fenced)
            status = []
        if status and all(p["lag"] == 0 for p in status):
            break
        time.sleep(0.2)
    processor.stop()
    processor.wait(60)


if __name__ == "__main__":
    main()
