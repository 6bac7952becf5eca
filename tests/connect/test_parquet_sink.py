"""The Parquet sink on real files (a temp directory, and fsspec's memory filesystem): every
record once in the committed files, read back by pyarrow's dataset over the directory and
through the manifest alike; replays and rewrites write nothing twice; a crash between staging
and commit leaves nothing visible and the rewrite names the same file; rolling by records,
bytes and record time; partition templates; schema growth and misfits naming the record."""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from goka import JsonCodec, StringCodec
from goka.connect import ParquetSink, ParquetWriter, SinkError, read_table
from goka.connect.manifest import Manifest, committed_files
from goka.errors import ConfigurationError

from .records import T0, offsets_of, records


def sink(path: Path | str, **options: Any) -> ParquetSink:
    return ParquetSink("clicks", options.pop("codec", JsonCodec()), str(path), **options)


def test_each_record_once_in_the_directory_and_through_the_manifest(tmp_path: Path) -> None:
    items = records(1_000)
    with ParquetWriter(sink(tmp_path, partition_by="date=%Y-%m-%d/country={country}")) as w:
        for start in range(0, len(items), 300):
            w.write(0, items[start : start + 300], min(start + 300, len(items)))
        assert w.offsets() == {0: 1_000}
    through_manifest = read_table(str(tmp_path))
    assert offsets_of(through_manifest) == list(range(1_000))
    plain = ds.dataset(str(tmp_path), format="parquet", partitioning="hive").to_table()
    assert offsets_of(plain) == list(range(1_000))  # a plain reader sees the same records
    by_offset = {r["goka_offset"]: r for r in through_manifest.to_pylist()}
    for _, offset, key, value, timestamp, _ in items:  # every column as produced
        row = by_offset[offset]
        assert row["key"] == (key or b"").decode() and row["goka_deleted"] == (value is None)
        assert row["goka_timestamp"] == dt.datetime.fromtimestamp(timestamp / 1000, dt.UTC)
        if value is not None:
            assert {"n": row["n"], "country": row["country"]} == json.loads(value)
    for file in committed_files(str(tmp_path)):  # the directory names the record's time/field
        table = pq.read_table(file, partitioning=None)
        day = Path(file).parent.parent.name
        assert all(day == f"date={t:%Y-%m-%d}" for t in table.column("goka_timestamp").to_pylist())
        countries = set(table.column("country").to_pylist())
        assert countries <= {Path(file).parent.name.split("=")[1], None}


def test_replays_write_nothing_twice_and_partitions_keep_their_own_position(
    tmp_path: Path,
) -> None:
    items = records(500)
    with ParquetWriter(sink(tmp_path)) as w:
        w.write(0, items[:300], 300)
        again = w.write(0, items[100:400], 400)  # a replay from an older checkpoint
        assert again.already == 200 and again.appended + again.deleted == 100
        assert w.write(0, items[:400], 400).already == 400  # all written before: no commit
        w.write(1, records(50, seed=2), 50)
        assert w.offsets() == {0: 400, 1: 50}
    table = read_table(str(tmp_path))
    assert sorted(zip(table.column("goka_partition").to_pylist(),
                      table.column("goka_offset").to_pylist(), strict=True)) == sorted(
        [(0, o) for o in range(400)] + [(1, o) for o in range(50)])  # fmt: skip


def test_a_crash_before_the_commit_leaves_nothing_visible_and_the_rewrite_names_the_same_file(
    tmp_path: Path,
) -> None:
    items = records(200)
    writer = ParquetWriter(sink(tmp_path))
    real_commit = writer.manifest.commit
    writer.manifest.commit = lambda *a, **k: (_ for _ in ()).throw(OSError("killed"))  # type: ignore[method-assign]
    with pytest.raises(OSError, match="killed"):
        writer.write(0, items, 200)
    staged = list((tmp_path / "_goka" / "staging").iterdir())
    assert len(staged) == 1 and not list(tmp_path.glob("*.parquet"))
    assert read_table(str(tmp_path)).num_rows == 0 and writer.offsets() == {}
    writer.manifest.commit = real_commit  # type: ignore[method-assign]
    writer.write(0, items, 200)
    assert [p.name for p in tmp_path.glob("*.parquet")] == [staged[0].name[: -len(".tmp")]]
    assert offsets_of(read_table(str(tmp_path))) == list(range(200))
    assert not list((tmp_path / "_goka" / "staging").iterdir())


def test_a_crash_after_the_commit_finishes_the_moves_at_the_next_write(tmp_path: Path) -> None:
    items = records(100)
    writer = ParquetWriter(sink(tmp_path))
    manifest = writer.manifest
    real_place = manifest._place
    manifest._place = lambda files: None  # type: ignore[method-assign]  # killed after commit
    writer.write(0, items[:60], 60)
    assert not list(tmp_path.glob("*.parquet"))  # committed, not yet in place
    manifest._place = real_place  # type: ignore[method-assign]
    ParquetWriter(sink(tmp_path)).write(0, items, 100)  # a new process: recovers first
    assert offsets_of(read_table(str(tmp_path))) == list(range(100))
    assert len(list(tmp_path.glob("*.parquet"))) == 2


def test_files_roll_by_records_bytes_and_record_time(tmp_path: Path) -> None:
    items = records(1_000)  # one second apart
    cases = {"records": {"max_file_records": 100}, "bytes": {"max_file_bytes": 5_000},
             "time": {"max_file_ms": 60_000}}  # fmt: skip
    for name, options in cases.items():
        root = tmp_path / name
        with ParquetWriter(sink(root, **options)) as w:
            w.write(0, items, 1_000)
        files = [pq.read_table(f) for f in committed_files(str(root))]
        assert sum(t.num_rows for t in files) == 1_000
        if name == "records":
            assert [t.num_rows for t in files] == [100] * 10
        elif name == "bytes":
            sizes = [
                sum(
                    len(r[2] or b"") + len(r[3] or b"")
                    for r in items
                    if r[1] in set(t.column("goka_offset").to_pylist())
                )
                for t in files
            ]
            assert len(files) > 5 and max(sizes) <= 5_000
        else:
            assert len(files) == 17  # 1,000 s in 60-second files
            for t in files:
                times = t.column("goka_offset").to_pylist()
                assert max(times) - min(times) < 60


def test_the_schema_grows_and_a_misfit_names_the_record_and_column(tmp_path: Path) -> None:
    first = [("clicks", 0, b"a", b'{"n": 1}', T0, None)]
    later = [("clicks", 1, b"b", b'{"n": 2.5, "page": "/x"}', T0, None)]  # an int column
    with ParquetWriter(sink(tmp_path)) as w:
        w.write(0, first, 1)
        with pytest.raises(SinkError, match=r"partition 0 offset 1: .*column 'n' \(int64\) "
                           r"takes no double value"):  # fmt: skip
            w.write(0, later, 2)
        grown = [("clicks", 1, b"b", b'{"n": 2, "page": "/x", "tags": ["a"]}', T0, None)]
        assert w.write(0, grown, 2).added_columns == ["page", "tags"]
    table = read_table(str(tmp_path))
    assert table.to_pylist()[0]["page"] is None  # the first file has no page: null
    assert [r["tags"] for r in table.to_pylist()] == [None, '["a"]']  # lists as JSON text
    skipping = sink(tmp_path / "skip", on_error="skip")
    with ParquetWriter(skipping) as w:
        w.write(0, first, 1)
        done = w.write(0, [*later, ("clicks", 2, b"c", b'{"n": 3}', T0, None)], 3)
        assert len(done.skipped) == 1 and "offset 1" in done.skipped[0] and done.appended == 1
    assert read_table(str(tmp_path / "skip")).column("n").to_pylist() == [1, 3]


def test_a_root_belongs_to_one_sink_and_reset_forgets_positions(tmp_path: Path) -> None:
    with ParquetWriter(sink(tmp_path)) as w:
        w.write(0, records(10), 10)
    other = ParquetSink("views", StringCodec(), str(tmp_path))
    with pytest.raises(SinkError, match="belongs to sink 'clicks' of topic 'clicks'"):
        ParquetWriter(other).write(0, [("views", 0, b"k", b"v", T0, None)], 1)
    with ParquetWriter(sink(tmp_path)) as w:
        w.reset()
        assert w.offsets() == {}


def test_fsspec_memory_filesystem_and_merged_manifest_entries() -> None:
    root = f"memory://goka-test-{random.randrange(10**9)}/archive"
    items = records(400)
    with ParquetWriter(sink(root, partition_by="country={country}")) as w:
        for offset in range(0, 400, 10):  # 40 commits: merged after 32
            w.write(3, items[offset : offset + 10], offset + 10)
    manifest = Manifest(root)
    assert len(manifest.entries(3)) < 10 and manifest.offsets() == {3: 400}
    assert offsets_of(read_table(root)) == list(range(400))


@pytest.mark.parametrize(
    ("options", "message"),
    [({"path": ""}, "path must be"), ({"path": "nosuch://x"}, "fsspec knows no protocol"),
     ({"partition_by": "/abs"}, "relative directory"),
     ({"partition_by": "c={a.b}"}, "not a plain field name"),
     ({"max_file_records": 0}, "max_file_records must be a positive int"),
     ({"max_file_ms": -1}, "max_file_ms must be"), ({"compression": "zip"}, "compression"),
     ({"tombstones": "drop"}, "tombstones must be"), ({"on_error": "retry"}, "on_error")],
)  # fmt: skip
def test_invalid_declarations_fail_at_once(options: dict[str, Any], message: str) -> None:
    path = options.pop("path", "/tmp/x")
    with pytest.raises(ConfigurationError, match=message):
        ParquetSink("clicks", JsonCodec(), path, **options)


def test_a_second_writer_leaves_a_young_staged_file_alone_and_a_lost_one_is_an_error(
    tmp_path: Path,
) -> None:
    items = records(300)
    slow, other = ParquetWriter(sink(tmp_path)), ParquetWriter(sink(tmp_path))
    commit = slow.manifest.commit
    held: list[tuple[int, int, list[dict[str, Any]]]] = []
    slow.manifest.commit = lambda p, end, files: held.append((p, end, files))  # type: ignore[method-assign]
    slow.write(0, items[:200], 200)  # staged; its commit comes after the other's recovery
    other.write(1, records(10, seed=2), 10)  # (another partition: its recovery is partition 1's)
    other.manifest.recover(0)  # the other writer of partition 0 recovers before it writes
    (_, end, files) = held[0]
    commit(0, end, files)  # the slow writer's staged file was left alone: placed now
    assert sorted(o for p, o in zip(*_columns(read_table(str(tmp_path))), strict=True)
                  if p == 0) == list(range(200))  # fmt: skip
    (tmp_path / files[0]["path"]).unlink()  # a committed file gone: never silently
    with pytest.raises(SinkError, match="is neither in place nor staged"):
        ParquetWriter(sink(tmp_path)).manifest._place(files)


def _columns(table: pa.Table) -> tuple[list[int], list[int]]:
    return table.column("goka_partition").to_pylist(), table.column("goka_offset").to_pylist()
