"""Keys of any bytes, as Go services write them: emitted, recovered by a view, served over gRPC
(real broker, LevelDB, socket), byte for byte and in Go's partitions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import confluent_kafka
import grpc
import pytest

from goka import BytesCodec, Emitter, Int64Codec, key_bytes, key_str
from goka.grpc import ViewClient, ViewServer
from goka.grpc.v1 import view_pb2, view_pb2_grpc
from goka.kafka.config import consumer_config
from goka.partitioner import partition_for
from goka.view import View

from .go_keys import GO_KEYS, written_as_go_does

pytestmark = pytest.mark.kafka


def read_back(brokers: str, topic: str, partitions: int) -> list[tuple[int, bytes, bytes | None]]:
    consumer = confluent_kafka.Consumer({**consumer_config(brokers), "enable.partition.eof": True})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    found, ended = [], set()
    while len(ended) < partitions:
        msg = consumer.poll(10)
        assert msg is not None, f"{topic}: no end of partition within 10 s"
        if msg.error():
            ended.add(msg.partition())
        else:
            found.append((msg.partition(), msg.key(), msg.value()))
    consumer.close()
    return found


def test_a_table_go_wrote_is_recovered_by_a_view_and_served_over_grpc_with_every_key(
    brokers: str, new_topic: Callable[..., str], tmp_path: Path
) -> None:
    table = new_topic(table=True)
    written_as_go_does(brokers, table, [(k, b"%d" % i) for i, k in enumerate(GO_KEYS)])
    written_as_go_does(brokers, table, [(b"\xffgone", b"1"), (b"\xffgone", None)])  # a tombstone
    view = View(brokers, table, Int64Codec(), path=tmp_path / "view").start()
    try:
        view.wait_recovered(60)
        assert view.stats().skipped == 0
        assert {key_bytes(k): v for k, v in view.items()} == {k: i for i, k in enumerate(GO_KEYS)}
        assert view.get(b"\x00\x01\xff\xfe") == 1 and view.get("caf\udce9") == 0
        assert view.get("user-1") == 5 and not view.has(b"\xffgone")
        with ViewServer([view]) as server, ViewClient(server.address) as client:
            assert client.get(table, b"\xc3") == 2
            found = client.get_many(table, [*GO_KEYS, b"\xffgone"])
            assert {key_bytes(k): v for k, v in found.items()} == {
                k: i for i, k in enumerate(GO_KEYS)
            }
            scanned = [key_bytes(k) for k, _ in client.scan(table)]
            assert scanned == sorted(GO_KEYS)  # in byte order, as LevelDB and Go's views keep
            assert [key_bytes(k) for k, _ in client.scan(table, prefix=b"a\x00")] == [b"a\x00b"]
            # a client in another language sends and receives plain bytes
            with grpc.insecure_channel(server.address) as channel:
                stub = view_pb2_grpc.ViewServiceStub(channel)
                answer = stub.Get(view_pb2.GetRequest(table=table, key=b"\xed\xa0\x80"))
                assert answer.found and answer.value == b"3"
                entries = stub.GetMany(view_pb2.GetManyRequest(table=table, keys=GO_KEYS)).entries
                assert [(e.key, e.found) for e in entries] == [(k, True) for k in GO_KEYS]
    finally:
        view.close()
    reopened = View(brokers, table, Int64Codec(), path=tmp_path / "view").start()
    try:  # the LevelDB copy kept every key across a restart
        reopened.wait_recovered(60)
        assert sorted(key_bytes(k) for k, _ in reopened.items()) == sorted(GO_KEYS)
    finally:
        reopened.close()


def test_emitted_keys_reach_the_wire_byte_for_byte_in_gos_partitions(
    brokers: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=8)
    with Emitter(brokers, topic, BytesCodec()) as emitter:
        for key in GO_KEYS:
            emitter.emit(key, b"as-bytes")
            emitter.emit(key_str(key), b"as-str")  # the str form stands for the same bytes
        assert emitter.flush(30) == 0
    records = read_back(brokers, topic, 8)
    assert sorted((k, v) for _, k, v in records) == sorted(
        (k, v) for k in GO_KEYS for v in (b"as-bytes", b"as-str")
    )
    assert all(p == partition_for(k, 8) for p, k, _ in records)
