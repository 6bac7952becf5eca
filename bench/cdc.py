"""Change data capture from PostgreSQL (``goka.dev.postgres``) into the Apache Kafka development
broker, each figure against its baseline in the same run.

* ``stream``: ``--updates`` single-row UPDATE transactions (a procedure that commits after each)
  of a table of ``--rows`` rows, read by the change source with ``pgoutput`` (the default)
  against the same with ``wal2json`` (the source before pgoutput), each with a slot made before
  the updates; changes/s from the job's start to caught up. Both topics are checked to hold
  every change once, equal to the table at the end. Runs alternate which goes first.
  Target: pgoutput >= 0.8x wal2json.
* ``snapshot``: a table of ``--snapshot-rows`` rows (id, n, note) into a topic of 4 partitions
  by the change source's initial snapshot (``snapshot="initial_only"``: the slot made with its
  exported snapshot, chunks of 10,000 rows, records with positions), against a hand-written
  loop: ``COPY (SELECT ...) TO STDOUT`` through psycopg, each row as JSON produced by one
  confluent-kafka producer keyed by its id, flushed at the end. Rows/s over the whole run;
  both topics are checked to hold every row once. Target: >= 0.7x the loop.

    python -m bench.cdc [--only stream,snapshot] [--runs 3] [--rows 10000] [--updates 100000]
        [--snapshot-rows 1000000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections import Counter
from typing import Any

import confluent_kafka
import psycopg

from bench.common import fresh_topic, start_broker, summary
from goka.connect import PostgresCdcSource, PostgresCdcSourceJob
from goka.dev.postgres import LocalPostgres
from goka.kafka.config import producer_config
from goka.kafka.consumer import read_to_end

PARTITIONS = 4


def stream(brokers: str, dsn: str, rows: int, updates: int, runs: int) -> list[str]:
    """pgoutput against wal2json (see the module docstring)."""
    lines, ratios = [], []
    for number in range(runs):
        table = f"items{number}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, n int, note text)")
            conn.execute(f"INSERT INTO {table} SELECT g, 0, 'row ' || g "
                         f"FROM generate_series(1, {rows}) AS g")  # fmt: skip
        sources = {
            decoder: PostgresCdcSource(dsn, {f"public.{table}": fresh_topic(brokers, decoder,
                                                                            PARTITIONS)},
                                       decoder=decoder, slot=f"{decoder}_{number}",
                                       snapshot="never")  # type: ignore[arg-type]
            for decoder in ("pgoutput", "wal2json")
        }  # fmt: skip
        for source in sources.values():  # (the slots start here)
            PostgresCdcSourceJob(source, brokers).run_until_caught_up()
        began = time.monotonic()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"""CREATE PROCEDURE touch{number}() LANGUAGE plpgsql AS $$
                BEGIN FOR i IN 1..{updates} LOOP
                    UPDATE {table} SET n = n + 1 WHERE id = 1 + (i * 7919) % {rows};
                    COMMIT;
                END LOOP; END $$""")  # fmt: skip
            conn.execute(f"CALL touch{number}()")
        print(f"stream run {number + 1}: {updates:,} single-row updates committed in "
              f"{time.monotonic() - began:.1f} s", flush=True)  # fmt: skip
        order = ("pgoutput", "wal2json") if number % 2 == 0 else ("wal2json", "pgoutput")
        rates: dict[str, float] = {}
        for decoder in order:
            started = time.monotonic()
            totals = PostgresCdcSourceJob(sources[decoder], brokers).run_until_caught_up()
            rates[decoder] = updates / (time.monotonic() - started)
            assert totals.produced == updates, (decoder, totals.produced)
            _check(brokers, sources[decoder].topic, dsn, table, updates)
        ratios.append(rates["pgoutput"] / rates["wal2json"])
        lines.append(f"stream run {number + 1}: {rates['pgoutput']:,.0f} changes/s with "
                     f"pgoutput, {rates['wal2json']:,.0f} with wal2json: "
                     f"{ratios[-1]:.2f}")  # fmt: skip
        print(lines[-1], flush=True)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for decoder in order:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (f"{decoder}_{number}",))
    lines.append(f"stream pgoutput/wal2json: {summary(ratios)} (target >= 0.8)")
    return lines


def snapshot(brokers: str, dsn: str, rows: int, runs: int) -> list[str]:
    """The initial snapshot against COPY and a producer (see the module docstring)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE big (id int PRIMARY KEY, n int, note text)")
        conn.execute("INSERT INTO big SELECT g, g %% 1000, 'row ' || g "
                     "FROM generate_series(1, %s) AS g", (rows,))  # fmt: skip
        conn.execute("VACUUM ANALYZE big")
    lines, ratios = [], []
    for number in range(runs):
        order = ("source", "loop") if number % 2 == 0 else ("loop", "source")
        rates: dict[str, float] = {}
        for what in order:
            topic = fresh_topic(brokers, f"snapshot-{what}", PARTITIONS)
            started = time.monotonic()
            if what == "source":
                source = PostgresCdcSource(dsn, {"public.big": topic}, snapshot="initial_only",
                                           slot=f"snap_{number}")  # fmt: skip
                totals = PostgresCdcSourceJob(source, brokers).run_until_caught_up()
                assert totals.snapshot_rows == rows, totals.describe()
            else:
                _copy_loop(brokers, dsn, topic)
            rates[what] = rows / (time.monotonic() - started)
            ids = Counter(
                json.loads(r.value)["id"] for r in read_to_end(brokers, topic, timeout=60)
            )
            assert ids == Counter(range(1, rows + 1)), what
        ratios.append(rates["source"] / rates["loop"])
        lines.append(f"snapshot run {number + 1}: {rows:,} rows, {rates['source']:,.0f} rows/s "
                     f"by the source's snapshot, {rates['loop']:,.0f} by COPY and a producer: "
                     f"{ratios[-1]:.2f}")  # fmt: skip
        print(lines[-1], flush=True)
    lines.append(f"snapshot source/COPY loop: {summary(ratios)} (target >= 0.7)")
    return lines


def _copy_loop(brokers: str, dsn: str, topic: str) -> None:
    producer = confluent_kafka.Producer(producer_config(brokers))
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    with psycopg.connect(dsn) as conn, conn.cursor().copy(
            "COPY (SELECT id, n, note FROM big) TO STDOUT") as copy:  # fmt: skip
        for id_, n, note in copy.rows():
            value = dumps({"id": int(id_), "n": int(n), "note": note}).encode()
            while True:
                try:
                    producer.produce(topic, value, id_.encode())
                    break
                except BufferError:
                    producer.poll(0.05)
    producer.flush(120)


def _check(brokers: str, topic: str, dsn: str, table: str, updates: int) -> None:
    """Every change once (each row's versions 1..n in order), the last equal to the table."""
    seen: dict[int, list[int]] = {}
    for record in read_to_end(brokers, topic, timeout=60):
        row = json.loads(record.value)
        seen.setdefault(row["id"], []).append(row["n"])
    with psycopg.connect(dsn) as conn:
        want = dict(conn.execute(f"SELECT id, n FROM {table} WHERE n > 0").fetchall())
    assert {k: v[-1] for k, v in seen.items()} == want, topic
    assert all(v == list(range(1, len(v) + 1)) for v in seen.values()), topic
    assert sum(map(len, seen.values())) == updates, topic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="stream,snapshot")
    parser.add_argument("--snapshot-rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--updates", type=int, default=100_000)
    args = parser.parse_args()
    lines: list[str] = []
    with contextlib.ExitStack() as stack:
        brokers = stack.enter_context(start_broker("kafka")).bootstrap
        server: Any = stack.enter_context(LocalPostgres())
        print(f"PostgreSQL at {server.dsn}", flush=True)
        if "stream" in args.only.split(","):
            lines += stream(brokers, server.dsn, args.rows, args.updates, args.runs)
        if "snapshot" in args.only.split(","):
            lines += snapshot(brokers, server.dsn, args.snapshot_rows, args.runs)
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
