"""The processor under test of the crash tests: click count until caught up (micro-batches) or
until SIGTERM (``--mode continuous``), killed where ``--kill`` says (through the builders of
``tests/spark/crash.py``, imported from there so that Spark pickles them by reference and a
worker's counts last across tasks).

    python -m tests.spark.crash_run BROKERS TOPIC GROUP STATE CHECKPOINT [--kill POINT --nth N]
        [--mode continuous]
"""

from __future__ import annotations

import argparse
import json
import signal
from collections import Counter

from examples.click_count.group import count
from goka import Int64Codec, StringCodec, define_group, input, persist
from goka.spark import Processor
from tests.spark.crash import POINTS, Kill, builders


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("brokers", "topic", "group", "state", "checkpoint"):
        parser.add_argument(name)
    parser.add_argument("--kill", choices=POINTS)
    parser.add_argument("--nth", type=int, default=1)
    parser.add_argument("--marker", default="")
    parser.add_argument("--snapshot-interval", type=float, default=0.5)
    parser.add_argument("--mode", choices=("micro-batch", "continuous"), default="micro-batch")
    args = parser.parse_args()
    graph = define_group(args.group, input(args.topic, StringCodec(), count), persist(Int64Codec()))
    kill = Kill(args.kill, args.nth, args.marker) if args.kill else None
    processor = Processor(
        graph, args.brokers, state_dir=args.state, checkpoint_dir=args.checkpoint,
        max_offsets_per_trigger=400, snapshot_interval=args.snapshot_interval,
        builders=builders(kill), mode=args.mode, epoch=5,
    )  # fmt: skip
    if args.mode == "continuous":
        signal.signal(signal.SIGTERM, lambda *_: processor.stop())
        processor.run()
        batches = processor.batches
    else:
        batches = processor.run_until_caught_up(timeout=300)
    stores = sum((b.stores for b in batches), Counter[str]())
    print(json.dumps({"processed": sum(b.processed for b in batches), "stores": stores}))


if __name__ == "__main__":
    main()
