"""The connectors on a real S3 server (S3Proxy over HTTP): the Parquet archive written to
``s3://`` and read back through its manifest and as a plain directory, a crash on either side
of a commit recovered there; the file source reading JSON lines, CSV and Parquet files from an
``s3://`` prefix, each record once across reruns; a wrong bucket or credential refused when the
job is made, naming the URL."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from goka import JsonCodec
from goka.connect import FileSource, FileSourceJob, ParquetSink, ParquetWriter, read_table
from goka.connect.manifest import Manifest
from goka.dev.pytest_plugin import S3Bucket
from goka.errors import ConfigurationError
from goka.spark.sink import SinkJob

from ..helpers import produce
from .records import offsets_of, orders, records, values, want

pytestmark = [pytest.mark.s3, pytest.mark.cost(25)]


def sink(s3: S3Bucket, root: str, **options: Any) -> ParquetSink:
    return ParquetSink("clicks", JsonCodec(), f"{s3.url}/{root}",
                       storage_options=s3.storage_options, **options)  # fmt: skip


def test_the_parquet_archive_on_s3_holds_each_record_once_through_a_crash_either_side_of_a_commit(
    s3: S3Bucket,
) -> None:
    items = records(900)
    fs = s3.fs()

    def staged() -> list[str]:
        fs.invalidate_cache()
        return list(fs.find(f"{s3.name}/archive/_goka/staging"))

    writer = ParquetWriter(sink(s3, "archive", partition_by="country={country}"))
    writer.write(0, items[:300], 300)
    real_commit, real_place = writer.manifest.commit, writer.manifest._place
    writer.manifest.commit = lambda *a, **k: (_ for _ in ()).throw(OSError("killed"))  # type: ignore[method-assign]
    with pytest.raises(OSError, match="killed"):  # staged, not committed: nothing visible
        writer.write(0, items[300:600], 600)
    assert len(staged()) >= 3  # (a file a country)
    assert writer.offsets() == {0: 300}
    writer.manifest.commit = real_commit  # type: ignore[method-assign]
    writer.manifest._place = lambda files: None  # type: ignore[method-assign]  # killed after
    writer.write(0, items[200:600], 600)  # (a replay from an older position, then the rest)
    writer.close()
    again = ParquetWriter(sink(s3, "archive", partition_by="country={country}"))  # recovers
    assert again.write(0, items[:900], 900).already == 600
    again.close()
    writer.manifest._place = real_place  # type: ignore[method-assign]
    root, options = f"{s3.url}/archive", s3.storage_options
    assert Manifest(root, options).offsets() == {0: 900}
    assert offsets_of(read_table(root, options)) == list(range(900))
    assert not staged()
    plain = ds.dataset(f"{s3.name}/archive", filesystem=fs, format="parquet",
                       partitioning="hive").to_table()  # fmt: skip
    assert offsets_of(plain) == list(range(900))  # a plain reader of the prefix sees the same


@pytest.mark.kafka
def test_the_file_source_reads_jsonl_csv_and_parquet_from_an_s3_prefix_each_record_once(
    s3: S3Bucket, brokers: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=4)
    fs = s3.fs()
    prefix = f"{s3.name}/incoming"
    fs.pipe(f"{prefix}/a.jsonl", "".join(json.dumps(r) + "\n" for r in orders(0, 300)).encode())
    text = io.StringIO()
    out = csv.DictWriter(text, ["id", "user", "amount"])
    out.writeheader()
    out.writerows({k: str(v) for k, v in r.items()} for r in orders(300, 200))
    fs.pipe(f"{prefix}/b.csv", text.getvalue().encode())
    table = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(orders(500, 250)), table)
    fs.pipe(f"{prefix}/c.parquet", table.getvalue())
    fs.pipe(f"{prefix}/_hidden.jsonl", b'{"id": -1, "user": "x"}\n')  # never read
    source = FileSource(f"{s3.url}/incoming", topic, key="user",
                        storage_options=s3.storage_options)  # fmt: skip
    totals = FileSourceJob(source, brokers).run_until_caught_up()
    assert (totals.files, totals.records, totals.produced) == (3, 750, 750)
    expected = orders(0, 300) + [{k: str(v) for k, v in r.items()} for r in orders(300, 200)]
    assert values(brokers, topic) == want(expected + orders(500, 250))
    assert FileSourceJob(source, brokers).run_until_caught_up().produced == 0  # a rerun
    fs.pipe(f"{prefix}/d.jsonl", "".join(json.dumps(r) + "\n" for r in orders(750, 40)).encode())
    assert FileSourceJob(source, brokers).run_until_caught_up().produced == 40  # what is new
    assert values(brokers, topic) == want(expected + orders(500, 250) + orders(750, 40))


@pytest.mark.kafka
def test_a_wrong_bucket_or_credential_is_refused_when_the_job_is_made_naming_the_url(
    s3: S3Bucket, brokers: str
) -> None:
    bad = {**s3.storage_options, "key": "nobody"}
    for made, said in (
        (lambda: FileSourceJob(FileSource("s3://no-such-bucket/in", "t",
                                          storage_options=s3.storage_options), brokers),
         "file source 't' s3://no-such-bucket/in: bucket 'no-such-bucket' does not exist"),
        (lambda: SinkJob(ParquetSink("t", JsonCodec(), f"{s3.url}/out", storage_options=bad),
                         brokers, checkpoint_dir="unused"),
         f"Parquet sink 't' {s3.url}/out: access denied"),
    ):  # fmt: skip
        with pytest.raises(ConfigurationError) as refused:
            made()
        assert said in str(refused.value)


@pytest.mark.spark
@pytest.mark.kafka
def test_a_parquet_sink_job_archives_a_topic_to_s3_with_nested_storage_options(
    s3: S3Bucket, spark: Any, brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = new_topic(partitions=4)
    sent = [(f"user-{i % 40}", {"n": i}) for i in range(2_000)]
    produce(brokers, topic, JsonCodec(), sent)
    root = f"{s3.url}/archive"  # (options with dicts inside: client_kwargs, config_kwargs)
    job = SinkJob(ParquetSink(topic, JsonCodec(), root, storage_options=s3.storage_options,
                              ),
                  brokers, spark=spark, checkpoint_dir=tmp_path / "checkpoint")  # fmt: skip
    assert job.run_until_caught_up(timeout=300).records == 2_000
    table = read_table(root, s3.storage_options)
    assert sorted(table.column("n").to_pylist()) == list(range(2_000))
    assert job.offsets() == {p: n for p, n in _ends(brokers, topic).items() if n}


def _ends(brokers: str, topic: str) -> dict[int, int]:
    from goka.kafka.offsets import EndOffsets

    ends = EndOffsets(brokers, {})
    try:
        high = ends.high([(topic, p) for p in range(4)])
    finally:
        ends.close()
    return {p: high[(topic, p)] for p in range(4)}


def test_a_move_cut_between_its_copy_and_its_delete_is_finished_once_on_s3(
    s3: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    import goka.connect.manifest as manifest_module

    items = records(400)
    fs = s3.fs()
    monkeypatch.setattr(manifest_module, "move", lambda fs, a, b: fs.copy(a, b))  # no delete
    ParquetWriter(sink(s3, "cut")).write(0, items[:250], 250)  # killed after the copy
    monkeypatch.undo()
    ParquetWriter(sink(s3, "cut")).write(0, items, 400)  # recovers, then writes the rest
    fs.invalidate_cache()
    assert not fs.find(f"{s3.name}/cut/_goka/staging")  # the copy's source deleted
    assert offsets_of(read_table(f"{s3.url}/cut", s3.storage_options)) == list(range(400))
    plain = ds.dataset(f"{s3.name}/cut", filesystem=fs, format="parquet").to_table()
    assert offsets_of(plain) == list(range(400))
