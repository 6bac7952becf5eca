"""Connectors against plain loops doing the same work, in the same run, on the embedded broker
and a throwaway PostgreSQL server (``goka.dev.postgres``).

PostgreSQL upsert sink: ``--messages`` JSON records (``{"clicks": n, "page": "/p.."}``) over
``--keys`` keys in 4 partitions, tombstones among them, written by the sink job (``goka.connect.
job.SinkJob``, local[2], a warm session) into a fresh table. The plain loop reads the same topic
with one confluent-kafka consumer, decodes the JSON, and per 10,000 records runs one transaction:
binary COPY into a temporary table, newest row per key upserted with ON CONFLICT, tombstones
deleted. Rows/s are records over the whole write (the job: from start to caught up). Both
tables are checked equal. Memory: the peak RSS of the job (this process and its Spark workers,
the broker and PostgreSQL left out) and of the plain loop's process.

Parquet sink: the same records archived by the sink job (``goka.connect.ParquetSink``, no
partition template, zstd) into a fresh directory. The plain loop: one consumer, the JSON
decoded into columns (key, partition, offset, timestamp, deleted, clicks, page), one
``pyarrow.parquet.write_table`` per 250,000 records (the job's write size). Both sets of files
are read back and checked equal (every record once).

File source: ``--messages`` JSON lines (``{"user": ..., "clicks": n, "page": ...}``) in 10
files, produced by ``goka.connect.FileSourceJob`` (key from ``user``, position headers) into a
fresh topic, in a process of its own. The plain loop (an emitter loop), in a process of its
own too: one confluent-kafka producer, each line parsed for its key and produced as read.
Both topics are read back and checked to hold the same records. The ratio of a run is the
lowest of its ratios. The last line:
``connectors/plain: min X median Y max Z``.

    python -m bench.connectors [--messages 1000000] [--keys 100000] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import add_broker, fresh_topic, produce_records, start_broker, summary
from examples.click_count.demo import tree_memory
from goka import JsonCodec
from goka.connect import FileSource, FileSourceJob, ParquetSink, PostgresSink, read_table
from goka.dev.postgres import LocalPostgres
from goka.kafka.config import producer_config
from goka.kafka.consumer import read_to_end
from goka.kafka.ranges import fast_fetch
from goka.spark import build_session
from goka.spark.sink import SinkJob

PARTITIONS = 4


def fill(brokers: str, topic: str, messages: int, keys: int) -> None:
    rng = random.Random(11)

    def records() -> Iterator[tuple[bytes, bytes | None]]:
        for i in range(messages):
            key = f"user-{rng.randrange(keys)}".encode()
            value = None if rng.random() < 0.05 else json.dumps(
                {"clicks": i, "page": f"/p{rng.randrange(50)}"}).encode()  # fmt: skip
            yield key, value

    produce_records(brokers, topic, records())


def plain(brokers: str, topic: str, dsn: str, messages: int) -> float:
    """The plain loop; return its seconds."""
    consumer = confluent_kafka.Consumer(fast_fetch(brokers, {}))  # as the sink's tasks read
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(PARTITIONS)])  # fmt: skip
    conn = psycopg.connect(dsn)
    conn.execute("CREATE TABLE plain (key text PRIMARY KEY, clicks bigint, page text, "
                 "goka_offset bigint)")  # fmt: skip
    conn.commit()
    started, done, rows = time.monotonic(), 0, []

    def write() -> None:
        with conn.transaction():
            conn.execute("CREATE TEMP TABLE tmp (key text, clicks bigint, page text, "
                         "goka_offset bigint, deleted boolean) ON COMMIT DROP")  # fmt: skip
            with conn.cursor().copy("COPY tmp FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["text", "int8", "text", "int8", "bool"])
                for row in rows:
                    copy.write_row(row)
            newest = "(SELECT DISTINCT ON (key) * FROM tmp ORDER BY key, goka_offset DESC) n"
            conn.execute(f"DELETE FROM plain p USING {newest} WHERE n.deleted AND p.key = n.key")
            conn.execute(f"INSERT INTO plain SELECT key, clicks, page, goka_offset FROM {newest} "
                         "WHERE NOT n.deleted ON CONFLICT (key) DO UPDATE SET clicks = "
                         "EXCLUDED.clicks, page = EXCLUDED.page, goka_offset = "
                         "EXCLUDED.goka_offset")  # fmt: skip
        rows.clear()

    while done < messages:
        for message in consumer.consume(10_000, 1.0):
            if message.error():
                continue
            value = message.value()
            decoded = None if value is None else json.loads(value)
            rows.append((message.key().decode(), None if decoded is None else decoded["clicks"],
                         None if decoded is None else decoded["page"], message.offset(),
                         decoded is None))  # fmt: skip
            done += 1
            if len(rows) == 10_000:
                write()
    if rows:
        write()
    seconds = time.monotonic() - started
    consumer.close()
    conn.close()
    return seconds


def plain_parquet(brokers: str, topic: str, directory: str, messages: int) -> float:
    """The plain Parquet loop; return its seconds."""
    consumer = confluent_kafka.Consumer(fast_fetch(brokers, {}))
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(PARTITIONS)])  # fmt: skip
    names = ("key", "goka_partition", "goka_offset", "goka_timestamp", "goka_deleted", "clicks",
             "page")  # fmt: skip
    schema = pa.schema([("key", pa.string()), ("goka_partition", pa.int32()),
                        ("goka_offset", pa.int64()),
                        ("goka_timestamp", pa.timestamp("ms", tz="UTC")),
                        ("goka_deleted", pa.bool_()), ("clicks", pa.int64()),
                        ("page", pa.string())])  # fmt: skip
    columns: list[list[Any]] = [[] for _ in names]
    started, done, files = time.monotonic(), 0, 0

    def write() -> None:
        nonlocal files
        table = pa.table(dict(zip(names, columns, strict=True)), schema=schema)
        pq.write_table(table, f"{directory}/part-{files:05d}.parquet", compression="zstd")
        files += 1
        for column in columns:
            column.clear()

    os.makedirs(directory, exist_ok=True)
    while done < messages:
        for message in consumer.consume(10_000, 1.0):
            if message.error():
                continue
            value = message.value()
            decoded = None if value is None else json.loads(value)
            row = (message.key().decode(), message.partition(), message.offset(),
                   message.timestamp()[1], decoded is None,
                   None if decoded is None else decoded["clicks"],
                   None if decoded is None else decoded["page"])  # fmt: skip
            for column, item in zip(columns, row, strict=True):
                column.append(item)
            done += 1
            if len(columns[0]) == 250_000:
                write()
    if columns[0]:
        write()
    seconds = time.monotonic() - started
    consumer.close()
    return seconds


def write_files(directory: Path, messages: int, keys: int) -> None:
    """``messages`` JSON lines in 10 files."""
    rng = random.Random(13)
    directory.mkdir(parents=True)
    per = -(-messages // 10)
    for number in range(10):
        count = min(per, messages - number * per)
        lines = [json.dumps({"user": f"user-{rng.randrange(keys)}", "clicks": number * per + i,
                             "page": f"/p{rng.randrange(50)}"}) for i in range(count)]  # fmt: skip
        (directory / f"{number:02d}.jsonl").write_text("\n".join(lines) + "\n")
        os.utime(directory / f"{number:02d}.jsonl", ns=(0, (1_000 + number) * 10**9))


def plain_emitter(brokers: str, topic: str, directory: str, messages: int) -> float:
    """The plain emitter loop over the files; return its seconds."""
    started = time.monotonic()
    producer = confluent_kafka.Producer(producer_config(brokers, {}))
    produce, done = producer.produce, 0
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as lines:
            for line in lines:
                value = line.rstrip(b"\n")
                key = json.loads(value)["user"].encode()
                while True:
                    try:
                        produce(topic, value, key)
                        break
                    except BufferError:
                        producer.poll(0.01)
                done += 1
    assert producer.flush(120) == 0 and done == messages
    return time.monotonic() - started


def file_source(brokers: str, topic: str, directory: str, messages: int) -> float:
    """The file source job over the files, in this process; return its seconds."""
    started = time.monotonic()
    totals = FileSourceJob(FileSource(directory, topic, key="user"), brokers).run_until_caught_up()
    assert totals.produced == messages, totals.describe()
    return time.monotonic() - started


def _topic_records(brokers: str, topic: str) -> Counter[tuple[bytes, str]]:
    return Counter((r.key or b"", json.dumps(json.loads(r.value or b""), sort_keys=True))
                   for r in read_to_end(brokers, topic, timeout=300))  # fmt: skip


def _records(table: pa.Table) -> set[tuple[Any, ...]]:
    names = ["key", "goka_partition", "goka_offset", "goka_deleted", "clicks", "page"]
    return set(zip(*(table.column(n).to_pylist() for n in names), strict=True))


class Peak:
    """The peak RSS of a process tree, sampled every 0.2 s while running."""

    def __init__(self, pid: int, leave_out: list[int]) -> None:
        self.pid, self.leave_out, self.peak = pid, leave_out, 0.0
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            rss = tree_memory(self.pid)[0] - sum(tree_memory(p)[0] for p in self.leave_out)
            self.peak = max(self.peak, rss * 1024)

    def stop(self) -> float:
        self._stop.set()
        return self.peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=2)
    add_broker(parser)
    args = parser.parse_args()
    ratios: list[float] = []
    postgres: list[float] = []
    parquet: list[float] = []
    sources: list[float] = []
    lines: list[str] = []
    with start_broker(args.broker) as broker, LocalPostgres() as server:
        brokers = broker.bootstrap
        topic = fresh_topic(brokers, "sink", PARTITIONS)
        fill(brokers, topic, args.messages, args.keys)
        inputs = Path(tempfile.mkdtemp(prefix="goka-bench-files-")) / "in"
        write_files(inputs, args.messages, args.keys)
        spark = build_session("bench-connectors", "local[2]")
        spark.sparkContext.setLogLevel("ERROR")
        state = Path(tempfile.mkdtemp(prefix="goka-bench-"))
        leave_out = [broker.pid or 0]  # (PostgreSQL's server is not below this process)
        try:  # warm: the workers and the first connection
            warm = fresh_topic(brokers, "warm", PARTITIONS)
            fill(brokers, warm, 1_000, 100)
            SinkJob(PostgresSink(warm, JsonCodec(), server.dsn, table="warm"), brokers,
                    spark=spark, checkpoint_dir=state / "warm").run_until_caught_up()  # fmt: skip
            for run in range(1, args.runs + 1):
                table = f"sink{run}"
                job = SinkJob(PostgresSink(topic, JsonCodec(), server.dsn, table=table), brokers,
                              spark=spark, checkpoint_dir=state / table)  # fmt: skip
                peak = Peak(os.getpid(), leave_out)
                started = time.monotonic()
                job.run_until_caught_up()
                sink_seconds, sink_rss = time.monotonic() - started, peak.stop()
                with psycopg.connect(server.dsn, autocommit=True) as conn:
                    conn.execute("DROP TABLE IF EXISTS plain")
                plain_seconds, plain_rss = _in_a_process(plain, brokers, topic, server.dsn,
                                                         args.messages)  # fmt: skip
                with psycopg.connect(server.dsn) as conn:
                    query = (f"SELECT key, clicks, page FROM {table} EXCEPT SELECT key, clicks, "
                             "page FROM plain")  # fmt: skip
                    got = conn.execute(query).fetchall()
                    count = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
                    want = conn.execute("SELECT count(*) FROM plain").fetchone()
                assert not got and count == want, f"tables differ: {got[:3]}, {count} {want}"
                ratio = plain_seconds / sink_seconds
                postgres.append(ratio)
                lines.append(
                    f"run {run}: postgres sink {args.messages / sink_seconds:,.0f} rows/s (peak "
                    f"RSS {sink_rss / 2**20:,.0f} MB), plain {args.messages / plain_seconds:,.0f}"
                    f" rows/s (peak RSS {plain_rss / 2**20:,.0f} MB): sink/plain {ratio:.2f}"
                )
                print(lines[-1], flush=True)
                archive = str(state / f"parquet{run}")
                job = SinkJob(ParquetSink(topic, JsonCodec(), archive), brokers, spark=spark,
                              checkpoint_dir=state / f"parquet{run}-checkpoint")  # fmt: skip
                peak = Peak(os.getpid(), leave_out)
                started = time.monotonic()
                job.run_until_caught_up()
                sink_seconds, sink_rss = time.monotonic() - started, peak.stop()
                target = str(state / f"plain-parquet{run}")
                plain_seconds, plain_rss = _in_a_process(plain_parquet, brokers, topic, target,
                                                         args.messages)  # fmt: skip
                got, want = _records(read_table(archive)), _records(pq.read_table(target))
                assert got == want and len(got) == args.messages, (
                    f"files differ: {len(got)} {len(want)} records")  # fmt: skip
                files = len(os.listdir(archive)) - 1  # (_goka)
                parquet_ratio = plain_seconds / sink_seconds
                parquet.append(parquet_ratio)
                ratios.append(min(ratio, parquet_ratio))
                lines.append(
                    f"run {run}: parquet sink {args.messages / sink_seconds:,.0f} rows/s in "
                    f"{files} files (peak RSS {sink_rss / 2**20:,.0f} MB), plain pyarrow "
                    f"{args.messages / plain_seconds:,.0f} rows/s (peak RSS "
                    f"{plain_rss / 2**20:,.0f} MB): sink/plain {parquet_ratio:.2f}"
                )
                print(lines[-1], flush=True)
                target = fresh_topic(brokers, f"files{run}", PARTITIONS)
                source_seconds, source_rss = _in_a_process(file_source, brokers, target,
                                                           str(inputs), args.messages)  # fmt: skip
                emitted = fresh_topic(brokers, f"emitted{run}", PARTITIONS)
                plain_seconds, plain_rss = _in_a_process(plain_emitter, brokers, emitted,
                                                         str(inputs), args.messages)  # fmt: skip
                assert _topic_records(brokers, target) == _topic_records(brokers, emitted), (
                    "the topics differ")  # fmt: skip
                source_ratio = plain_seconds / source_seconds
                sources.append(source_ratio)
                ratios[-1] = min(ratios[-1], source_ratio)
                lines.append(
                    f"run {run}: file source {args.messages / source_seconds:,.0f} records/s "
                    f"(peak RSS {source_rss / 2**20:,.0f} MB), plain emitter loop "
                    f"{args.messages / plain_seconds:,.0f} records/s (peak RSS "
                    f"{plain_rss / 2**20:,.0f} MB): source/plain {source_ratio:.2f}"
                )
                print(lines[-1], flush=True)
        finally:
            spark.stop()
            shutil.rmtree(state, ignore_errors=True)
            shutil.rmtree(inputs.parent, ignore_errors=True)
    print(f"\n{args.messages:,} records over {args.keys:,} keys, {PARTITIONS} partitions, "
          f"{args.runs} runs")  # fmt: skip
    print(f"postgres upsert sink / plain: {summary(postgres)}")
    print(f"parquet sink / pyarrow: {summary(parquet)}")
    print(f"file source / plain emitter: {summary(sources)}")
    print(f"connectors/plain: {summary(ratios)}")


def _in_a_process(loop: Any, *args: Any) -> tuple[float, float]:
    """A plain loop (returning its seconds) in a process of its own: its seconds and peak
    RSS."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=_plain_child, args=(loop, args, results))
    process.start()
    assert process.pid is not None
    peak = Peak(process.pid, [])
    seconds = float(results.get(timeout=3_600))
    process.join(60)
    return seconds, peak.stop()


def _plain_child(loop: Any, args: tuple[Any, ...], results: Any) -> None:
    results.put(loop(*args))


if __name__ == "__main__":
    main()
