"""A processor whose only lasting storage is an S3 server (S3Proxy, a real one over HTTP) and the
broker: its state directory and Spark checkpoint are deleted between runs, as a container's
disk is, and the next run restores its stores from the snapshots on S3."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from goka import Int64Codec, StringCodec, TopicManager, define_group, input, output, persist
from goka.dev.pytest_plugin import S3Bucket
from goka.errors import ConfigurationError
from goka.kafka.consumer import read_to_end

from ..helpers import wait_for
from .fixtures import Running, clicks, count, table_of

pytestmark = [pytest.mark.cost(60), pytest.mark.spark, pytest.mark.kafka, pytest.mark.s3]


def _run(processor: Any, mode: str, topic: str, brokers: str) -> Any:
    """Process what ``topic`` holds in ``mode``; return the processor's totals."""
    if mode == "micro-batch":
        return processor.run_until_caught_up(timeout=300)
    running = Running(processor)
    wait_for(lambda: processor.totals.batches >= 1 and all(
        p["lag"] == 0 for p in processor.partition_status() if p["topic"] == topic),
        240, "an epoch to end, caught up")  # fmt: skip
    running.stop(within=60)
    return processor.totals


@pytest.mark.parametrize("modes", [("micro-batch", "continuous"), ("continuous", "micro-batch")],
                         ids=["micro-batch-then-continuous", "continuous-then-micro-batch"])  # fmt: skip
def test_a_new_container_restores_its_state_from_snapshots_on_s3_exactly_once(
    modes: tuple[str, str], s3: S3Bucket, brokers: str, new_topic: Callable[..., str],
    make_processor: Any, tmp_path: Path,
) -> None:  # fmt: skip
    topic = new_topic(partitions=2)
    out = f"{topic}-out"
    TopicManager(brokers).ensure_stream_exists(out, 2)

    def told(ctx: Any, msg: str) -> None:
        count(ctx, msg)
        ctx.emit(out, ctx.key, str(ctx.value()))

    graph = define_group(f"{topic}-g", input(topic, StringCodec(), told),
                         output(out, StringCodec()), persist(Int64Codec()))  # fmt: skip
    settings = {"snapshot_dir": f"{s3.url}/snapshots", "storage_options": s3.storage_options,
                "guarantee": "exactly-once", "epoch": 3.0}  # fmt: skip
    sent = clicks(brokers, topic, 1_000)
    _run(make_processor(graph, mode=modes[0], **settings), modes[0], topic, brokers)
    fs = s3.fs()
    published = f"{s3.name}/snapshots/{graph.group}"
    wait_for(lambda: all(fs.invalidate_cache() or fs.glob(f"{published}/{p}/manifests/*.json")
                         for p in (0, 1)), 60, "a snapshot of each partition on S3")  # fmt: skip
    shutil.rmtree(tmp_path / "state")  # a new container: no state, no Spark checkpoint
    shutil.rmtree(tmp_path / "checkpoint")
    sent += clicks(brokers, topic, 300, seed=3)
    second = _run(make_processor(graph, mode=modes[1], **settings), modes[1], topic, brokers)
    assert second.stores["restored"] == 2 and second.stores["rebuilt"] == 0, second.stores
    assert second.table_records < 1_000  # (only what came after the snapshot)
    assert table_of(brokers, graph.table, Int64Codec()) == dict(sent)
    told = Counter(r.key.decode() for r in read_to_end(
        brokers, out, kafka_config={"isolation.level": "read_committed"}))  # fmt: skip
    assert told == sent  # read committed: each click told once


def test_a_wrong_endpoint_credential_or_bucket_fails_at_declaration_naming_the_url(
    s3: S3Bucket, brokers: str, new_topic: Callable[..., str], make_processor: Any,
) -> None:  # fmt: skip
    graph = define_group(f"{new_topic(partitions=1)}-g", input("in", StringCodec(), count),
                         persist(Int64Codec()))  # fmt: skip
    good = s3.storage_options
    url = f"{s3.url}/snapshots"
    cases = {
        "cannot reach its store at endpoint http://127.0.0.1:9": {
            **good, "endpoint_url": "http://127.0.0.1:9",
            "config_kwargs": {**good["config_kwargs"], "retries": {"max_attempts": 1},
                              "connect_timeout": 2}},
        "access denied": {**good, "secret": "not-the-secret"},
        "bucket 'no-such-bucket' does not exist": good,
    }  # fmt: skip
    for said, options in cases.items():
        where = url if "bucket" not in said else "s3://no-such-bucket/snapshots"
        with pytest.raises(ConfigurationError) as refused:
            make_processor(graph, snapshot_dir=where, storage_options=options)
        assert f"snapshot_dir {where}: {said}" in str(refused.value)


def test_a_checkpoint_on_s3a_without_hadoop_aws_is_refused_before_the_query_starts(
    s3: S3Bucket, brokers: str, new_topic: Callable[..., str], make_processor: Any,
) -> None:  # fmt: skip
    topic = new_topic(partitions=1)
    graph = define_group(f"{topic}-g", input(topic, StringCodec(), count), persist(Int64Codec()))
    checkpoint = f"s3a://{s3.name}/checkpoint"
    processor = make_processor(graph, checkpoint_dir=checkpoint, snapshot_interval=0.0,
                               storage_options=s3.storage_options)  # fmt: skip
    with pytest.raises(ConfigurationError) as refused:
        processor.run_until_caught_up(timeout=60)
    assert str(refused.value).startswith(f"checkpoint_dir {checkpoint}: Spark has "
                                         "no Hadoop file system for s3a://")  # fmt: skip
