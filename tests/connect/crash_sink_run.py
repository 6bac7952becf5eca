"""The sink jobs under test of the sink crash tests: an upsert and an append sink of one topic,
run until caught up, one after the other, killed where ``--kill`` says: ``copy`` (after the
COPY, before the upserts), ``before-commit`` (everything written, the transaction open),
``after-commit`` (committed, before Spark commits the batch), the ``nth`` time a Spark worker
gets there.

    python -m tests.connect.crash_sink_run BROKERS TOPIC DSN CHECKPOINTS [--max-offsets N]
        [--chunk N] [--kill POINT --nth N --marker FILE]
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import Any

from goka import JsonCodec
from goka.connect import PostgresSink, PostgresWriter
from goka.logs import configure
from goka.spark.sink import SinkJob
from tests.spark.crash import Kill, add_kill_arguments, kill_of

POINTS = ("copy", "before-commit", "after-commit")


class KillingWriter(PostgresWriter):
    """A writer whose process is killed at ``kill``'s point."""

    def __init__(self, sink: PostgresSink, kill: Kill) -> None:
        super().__init__(sink)
        self.kill = kill

    def _copy(self, *args: Any) -> None:
        super()._copy(*args)
        self.kill.reached("copy")

    def _transaction(self, *args: Any) -> None:
        super()._transaction(*args)
        self.kill.reached("before-commit")

    def write(self, *args: Any) -> Any:
        done = super().write(*args)
        self.kill.reached("after-commit")
        return done


def sinks(topic: str, dsn: str) -> list[PostgresSink]:
    return [PostgresSink(topic, JsonCodec(), dsn, table="users"),
            PostgresSink(topic, JsonCodec(), dsn, table="users_log", mode="append")]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("brokers", "topic", "dsn", "checkpoints"):
        parser.add_argument(name)
    parser.add_argument("--max-offsets", type=int, default=None)
    parser.add_argument("--chunk", type=int, default=50_000)
    add_kill_arguments(parser, POINTS)
    args = parser.parse_args()
    configure("INFO", "text")
    kill = kill_of(args)
    writer = functools.partial(KillingWriter, kill=kill) if kill else PostgresWriter
    spark = None
    for sink in sinks(args.topic, args.dsn):
        job = SinkJob(sink, args.brokers, checkpoint_dir=Path(args.checkpoints) / sink.table,
                      spark=spark, max_offsets_per_trigger=args.max_offsets, chunk=args.chunk,
                      writer=writer)  # fmt: skip
        print(job.run_until_caught_up(timeout=300).describe(), flush=True)
        spark = job.spark()


if __name__ == "__main__":
    main()
