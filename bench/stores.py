"""Per-partition costs of a partition store, for sizing (no broker, no Spark).

For stores of ``--keys`` keys with values of ``--value-bytes`` bytes (LevelDB as processors open
it, snapshots in a local directory), it measures:

* staging a snapshot (the hard-link checkpoint a task makes after a commit);
* publishing the first snapshot (every file) and one after a batch of ``--updates`` updates
  (only new files): bytes and seconds;
* restoring it elsewhere (fetch, verify, open) and reading a key;
* memory (RSS) and open files per open store, with ``--stores`` stores open in one process
  after ``--reads`` random reads each.

    python -m bench.stores [--keys 100000 1000000] [--value-bytes 8] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from goka.processing.builders import leveldb_store
from goka.storage import Storage, WriteBatch
from goka.storage.snapshots import SnapshotStore, install, stage

TABLE = "bench-table"


def build(path: Path, keys: int, value_bytes: int) -> Storage:
    store = leveldb_store(path, TABLE)
    value = os.urandom(value_bytes)
    for low in range(0, keys, 50_000):
        batch = WriteBatch({f"user-{i:08d}": value for i in range(low, min(keys, low + 50_000))})
        batch.set_offset("in", 0, min(keys, low + 50_000))
        batch.set_offset(TABLE, 0, min(keys, low + 50_000))
        store.write(batch)
    return store


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def snapshot_costs(keys: int, args: argparse.Namespace, work: Path) -> dict[str, float]:
    store = build(work / "a" / "partition-0", keys, args.value_bytes)
    snapshots = SnapshotStore(str(work / "snapshots"))
    started = time.perf_counter()
    staged = stage("g", 0, {"partition": (store, work / "a" / "partition-0")}, work / "staging")
    stage_s = time.perf_counter() - started
    first = snapshots.publish(staged)
    staged.discard()
    rng = random.Random(1)
    batch = WriteBatch({f"user-{rng.randrange(keys):08d}": b"x" * args.value_bytes
                        for _ in range(args.updates)})  # fmt: skip
    batch.set_offset("in", 0, keys + args.updates)
    store.write(batch)
    staged = stage("g", 0, {"partition": (store, work / "a" / "partition-0")}, work / "staging")
    second = snapshots.publish(staged)
    staged.discard()
    store.close()
    manifest = snapshots.manifests("g", 0)[0]
    started = time.perf_counter()
    fetched = snapshots.fetch(manifest, "partition", work / "b" / "partition-0")
    install(manifest, "partition", work / "b" / "partition-0")
    restored = leveldb_store(work / "b" / "partition-0", TABLE)
    assert restored.get("user-00000001") is not None
    restore_s = time.perf_counter() - started
    restored.close()
    return {"stage_s": stage_s, "full_mb": first.bytes / 1e6, "full_s": first.seconds,
            "incr_mb": second.bytes / 1e6, "incr_s": second.seconds, "incr_reused": second.reused,
            "restore_mb": fetched / 1e6, "restore_s": restore_s}  # fmt: skip


def open_costs(keys: int, args: argparse.Namespace, work: Path) -> dict[str, float]:
    paths = [work / f"p{n}" for n in range(args.stores)]
    for path in paths:
        build(path, keys, args.value_bytes).close()
    rng = random.Random(2)
    memory, files = rss(), open_files()
    stores = [leveldb_store(path, TABLE) for path in paths]
    for store in stores:
        for _ in range(args.reads):
            store.get(f"user-{rng.randrange(keys):08d}")
    per_store = {"rss_mb": (rss() - memory) / 1e6 / len(stores),
                 "files": (open_files() - files) / len(stores)}  # fmt: skip
    for store in stores:
        store.close()
    return per_store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--value-bytes", type=int, default=8)
    parser.add_argument("--updates", type=int, default=2_000)
    parser.add_argument("--stores", type=int, default=8)
    parser.add_argument("--reads", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for keys in args.keys:
        runs = []
        for _ in range(args.runs):
            work = Path(tempfile.mkdtemp(prefix="goka-bench-stores-"))
            try:
                runs.append({**snapshot_costs(keys, args, work), **open_costs(keys, args, work)})
            finally:
                shutil.rmtree(work, ignore_errors=True)
        print(f"\n{keys:,} keys, {args.value_bytes}-byte values ({args.runs} runs, median):")
        for name in runs[0]:
            values = [r[name] for r in runs]
            print(f"  {name:<12} median {statistics.median(values):>9.3f}   "
                  f"min {min(values):>9.3f}   max {max(values):>9.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
