"""What the windowed tables' contract costs per record at least, against a plain count.

``bench.windows`` compares windowed groups with the plain count. Part of a windowed record's
cost is not the implementation's but the contract's: every window a record updates is a row
of its table (a changelog record and a store row, and a close index row when it is created),
and every window of final results is produced once more when it closes. (Window values are
read from memory: a partition keeps the windows it wrote until they close, see
``goka.time.window_cache``; the plain count reads its keys from the store.) This script runs
only that I/O (confluent-kafka's ``produce`` with a delivery callback and
provenance headers, plyvel reads and write batches: what the processor uses), in the simplest
Python loop, over the input of ``bench.windows`` (keys, event times), for:

* the plain count: per record a read, a changelog record, a store row (per commit);
* tumbling 1-minute windows with final results (grace 5 s);
* hopping 5-minute windows advancing by 1 minute, updates only;

with a commit every ``--commit`` records (continuous: about 0.1 s; micro-batch: a batch per
partition). Reported: each loop's records per second (best of three), its calls per record,
and what a windowed record costs more than a plain one (µs): the loop's, and its calls'
alone (each call's cost measured alone in a loop). A windowed group whose other costs
(consuming, decoding, the callback, the window logic) were nothing would still pay the calls'
extra: against a plain count group measured at ``P`` µs per record per core, its ratio is at
most ``P / (P + extra)``; with ``--plain-us P`` both bounds are printed.

    python -m bench.windows_floor [--records 250000] [--keys 25000] [--commit 2500]
        [--plain-us 8.3]
"""

from __future__ import annotations

import argparse
import heapq
import random
import tempfile
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka
import plyvel

from bench.windows import SPAN_MS

HEADERS = [("goka-src-topic", b"bench"), ("goka-src-partition", b"0"), ("goka-src-offset", b"1")]
Records = list[tuple[bytes, int]]
Calls = dict[str, int]  # calls made, by kind: produce, get, put
Loop = Callable[[Records, int, Any, Any], Calls]


def _delivered(error: Any, message: Any) -> None:
    """A delivery report (the processor counts each)."""


def _read(rows: dict[bytes, bytes], get: Callable[[bytes], Any], row: bytes,
          calls: Calls) -> bytes | None:  # fmt: skip
    """``row`` as this commit left it, else as stored (a counted read)."""
    value = rows.get(row)
    if value is None:
        value = get(row)
        calls["get"] += 1
    return value


def _commit(db: Any, rows: dict[bytes, bytes], calls: Calls) -> None:
    """Store a commit's rows (counted puts, in one write batch)."""
    calls["put"] += len(rows)
    with db.write_batch() as batch:
        for row, value in rows.items():
            batch.put(row, value)


def plain(records: Records, commit: int, db: Any, producer: Any) -> Calls:
    """Per record: the key's count read, written to the changelog; rows stored per commit."""
    get, produce = db.get, producer.produce
    calls = dict.fromkeys(("produce", "get", "put"), 0)
    for first in range(0, len(records), commit):
        rows: dict[bytes, bytes] = {}
        for key, _ in records[first : first + commit]:
            row = b"d" + key
            old = _read(rows, get, row, calls)
            rows[row] = value = b"%d" % (int(old or b"0") + 1)
            produce("table", value, key, partition=0, on_delivery=_delivered, headers=HEADERS)
        calls["produce"] += min(commit, len(records) - first)
        _commit(db, rows, calls)
    return calls


def windowed(size: int, advance: int, *, final: bool, grace: int = 5_000) -> Loop:
    """Per record and window: its value (kept in memory until the window closes) updated,
    written to the changelog and stored (with its close index row when created); with
    ``final``, each window closed by the stream time produced as a result."""

    def loop(records: Records, commit: int, db: Any, producer: Any) -> Calls:
        produce = producer.produce
        calls = dict.fromkeys(("produce", "get", "put"), 0)
        kept: dict[bytes, bytes] = {}  # the open windows' values
        closing: list[tuple[int, bytes]] = []  # a heap
        for first in range(0, len(records), commit):
            rows: dict[bytes, bytes] = {}
            for key, at in records[first : first + commit]:
                last = at - at % advance
                for start in range(last - size + advance, last + 1, advance):
                    window = b"%s@%015d-%015d" % (key, start, start + size)
                    old = kept.get(window)
                    kept[window] = rows[b"w" + window] = value = b"%d" % (int(old or b"0") + 1)
                    if old is None:
                        rows[b"c%015d%s" % (start + size + grace, window)] = b""
                        heapq.heappush(closing, (start + size + grace, window))
                    produce("windows", value, window, partition=0, on_delivery=_delivered,
                            headers=HEADERS)  # fmt: skip
                    calls["produce"] += 1
                while closing and closing[0][0] <= at:
                    window = heapq.heappop(closing)[1]
                    result = kept.pop(window)
                    if final:
                        produce("results", result, window[:-32], on_delivery=_delivered,
                                headers=HEADERS)  # fmt: skip
                        calls["produce"] += 1
            _commit(db, rows, calls)
        return calls

    return loop


def _clients(path: str) -> tuple[Any, Any]:
    """A store in ``path`` and a producer, as the processor makes them (the producer has no
    broker: nothing is sent, every call is made)."""
    db = plyvel.DB(path, create_if_missing=True, bloom_filter_bits=10, lru_cache_size=64 << 20)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": "127.0.0.1:1", "log_level": 0,
        "queue.buffering.max.messages": 10_000_000, "queue.buffering.max.kbytes": 2_000_000,
    })  # fmt: skip
    return db, producer


def _best(run: Callable[[], object]) -> float:
    """The shortest of three runs, in seconds."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def rate(loop: Loop, records: Records, commit: int) -> tuple[float, Calls]:
    """Records per second of ``loop`` (best of three, each with a new store and producer),
    and the calls it made."""
    best, calls = float("inf"), {}
    for _ in range(3):
        with tempfile.TemporaryDirectory() as path:
            db, producer = _clients(path)
            started = time.perf_counter()
            calls = loop(records, commit, db, producer)
            best = min(best, time.perf_counter() - started)
            producer.purge()
            db.close()
    return len(records) / best, calls


def call_costs(records: Records) -> dict[str, float]:
    """µs per call, alone in a loop: ``produce`` (a delivery callback, three headers), a row
    put in a write batch, a store read (of rows in a table file, and of missing ones)."""
    keys = [b"%s@%015d-%015d" % (key, at, at) for key, at in records]
    with tempfile.TemporaryDirectory() as path:
        db, producer = _clients(path)

        def produce() -> None:
            for key in keys:
                producer.produce("windows", b"1", key, partition=0, on_delivery=_delivered,
                                 headers=HEADERS)  # fmt: skip
            producer.purge()

        def put() -> None:
            with db.write_batch() as batch:
                for key in keys[::2]:
                    batch.put(key, b"1")

        def get() -> None:
            for key in keys:
                db.get(key, verify_checksums=True)

        costs = {"produce": _best(produce), "put": _best(put) * 2}
        db.compact_range()  # (what is read was written to a table file)
        costs["get"] = _best(get)
        db.close()
    return {kind: seconds / len(keys) * 1e6 for kind, seconds in costs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=250_000, help="of one partition")
    parser.add_argument("--keys", type=int, default=25_000, help="of one partition")
    parser.add_argument("--commit", type=int, default=2_500, help="records per commit")
    parser.add_argument("--plain-us", type=float, help="a plain count's µs per record and core")
    args = parser.parse_args()
    rng = random.Random(7)
    start = 1_700_000_000_000
    records = [(b"user-%d" % rng.randrange(args.keys), start + i * SPAN_MS // args.records)
               for i in range(args.records)]  # fmt: skip
    loops = {
        "plain": plain,
        "tumbling": windowed(60_000, 60_000, final=True),
        "hopping": windowed(300_000, 60_000, final=False),
    }
    costs = call_costs(records)  # (first: the loops leave the process's memory larger)
    measured = {name: rate(loop, records, args.commit) for name, loop in loops.items()}
    print(f"{args.records:,} records over {args.keys:,} keys, event times over 20 minutes, "
          f"a commit every {args.commit:,}; µs per call: "
          + ", ".join(f"{k} {v:.2f}" for k, v in costs.items()))  # fmt: skip
    base_rate, base_calls = measured["plain"]
    for name, (found, calls) in measured.items():
        per = {k: n / len(records) for k, n in calls.items()}
        line = f"{name:9} {found:10,.0f} records/s  calls per record: " + " ".join(
            f"{k} {v:.2f}" for k, v in per.items()
        )
        if name != "plain":
            extra = 1e6 / found - 1e6 / base_rate
            alone = sum((n - base_calls[k]) * costs[k] for k, n in calls.items()) / len(records)
            line += f"\n{'':9} more than plain: +{extra:.2f} µs per record (the loop), " \
                    f"+{alone:.2f} µs (the calls alone)"  # fmt: skip
            if args.plain_us:
                p = args.plain_us
                line += f"; windowed/plain at most {p / (p + extra):.2f} and {p / (p + alone):.2f}"
        print(line)


if __name__ == "__main__":
    main()
