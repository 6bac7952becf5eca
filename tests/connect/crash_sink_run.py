"""The sink jobs under test of the sink crash tests: an upsert and an append PostgreSQL sink
and a Parquet sink (under ARCHIVE) of one topic, run until caught up, one after the other,
killed where ``--kill`` says, the ``nth`` time a Spark worker gets there:

* ``copy``: PostgreSQL: after the COPY, before the upserts; Parquet: the files staged, before
  the manifest's entry;
* ``before-commit``: PostgreSQL: everything written, the transaction open; Parquet: the entry
  committed, the files not moved to their places;
* ``after-commit``: committed, before Spark commits the batch.

    python -m tests.connect.crash_sink_run BROKERS TOPIC DSN CHECKPOINTS ARCHIVE
        [--max-offsets N] [--chunk N] [--rotate N] [--kill POINT --nth N --marker FILE]
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import Any

from goka import JsonCodec
from goka.connect import ParquetSink, ParquetWriter, PostgresSink, PostgresWriter
from goka.connect.sink import Sink
from goka.connect.task import Writer, open_writer
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

    def write(self, *args: Any, **kwargs: Any) -> Any:
        done = super().write(*args, **kwargs)
        self.kill.reached("after-commit")
        return done


class KillingParquetWriter(ParquetWriter):
    """A Parquet writer whose process is killed at ``kill``'s point."""

    def __init__(self, sink: ParquetSink, kill: Kill) -> None:
        super().__init__(sink)
        self.kill, manifest = kill, self.manifest
        commit, place = manifest.commit, manifest._place

        def killing_commit(*args: Any) -> None:
            kill.reached("copy")
            commit(*args)

        def killing_place(files: Any) -> None:
            kill.reached("before-commit")
            place(files)

        manifest.commit, manifest._place = killing_commit, killing_place  # type: ignore[method-assign,assignment]

    def write(self, *args: Any, **kwargs: Any) -> Any:
        done = super().write(*args, **kwargs)
        self.kill.reached("after-commit")
        return done


def killing_writer(sink: Sink, kill: Kill) -> Writer:
    if isinstance(sink, ParquetSink):
        return KillingParquetWriter(sink, kill)
    return KillingWriter(sink, kill)


def sinks(topic: str, dsn: str, archive: str) -> list[Sink]:
    return [PostgresSink(topic, JsonCodec(), dsn, table="users"),
            PostgresSink(topic, JsonCodec(), dsn, table="users_log", mode="append"),
            ParquetSink(topic, JsonCodec(), archive, name="archive", max_file_records=700,
                        partition_by="minute=%M")]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("brokers", "topic", "dsn", "checkpoints", "archive"):
        parser.add_argument(name)
    parser.add_argument("--max-offsets", type=int, default=None)
    parser.add_argument("--chunk", type=int, default=None)
    parser.add_argument("--rotate", type=int, default=0, help="run the sinks from this one on")
    add_kill_arguments(parser, POINTS)
    args = parser.parse_args()
    configure("INFO", "text")
    kill = kill_of(args)
    writer = functools.partial(killing_writer, kill=kill) if kill else open_writer
    spark = None
    order = sinks(args.topic, args.dsn, args.archive)
    for sink in order[args.rotate :] + order[: args.rotate]:
        job = SinkJob(sink, args.brokers, checkpoint_dir=Path(args.checkpoints) / sink.name,
                      spark=spark, max_offsets_per_trigger=args.max_offsets, chunk=args.chunk,
                      writer=writer)  # fmt: skip
        print(job.run_until_caught_up(timeout=300).describe(), flush=True)
        spark = job.spark()


if __name__ == "__main__":
    main()
