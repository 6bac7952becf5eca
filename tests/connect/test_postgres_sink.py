"""The PostgreSQL sink against a real server (``goka.dev.postgres``): upserts and deletes equal
the topic's last value per key, append mode stores each record once, replays write nothing
twice, one transaction per write (a failure after the COPY leaves nothing), schema growth adds
columns, and what does not fit fails naming the record and the column."""

from __future__ import annotations

import json
import random
from typing import Any

import psycopg
import pytest

from goka import Int64Codec, JsonCodec, StringCodec
from goka.connect import PostgresSink, PostgresWriter, SinkError
from goka.connect.rows import Record
from goka.dev.postgres import LocalPostgres
from goka.errors import ConfigurationError

pytestmark = pytest.mark.postgres

T0 = 1_700_000_000_000


def records(n: int, *, keys: int = 40, seed: int = 1, start: int = 0) -> list[Record]:
    """JSON values with a tombstone now and then, offsets from ``start``."""
    rng = random.Random(seed)
    out: list[Record] = []
    for offset in range(start, start + n):
        key = f"user-{rng.randrange(keys)}".encode()
        value = None if rng.random() < 0.15 else json.dumps(
            {"clicks": rng.randrange(1000), "page": f"/p{rng.randrange(9)}"}).encode()  # fmt: skip
        out.append(("users", offset, key, value, T0 + offset, None))
    return out


def last_values(items: list[Record]) -> dict[str, dict[str, Any]]:
    """The reference: each key's last value, tombstones deleting (computed here)."""
    table: dict[str, dict[str, Any]] = {}
    for _, _, key, value, _, _ in items:
        assert key is not None
        if value is None:
            table.pop(key.decode(), None)
        else:
            table[key.decode()] = json.loads(value)
    return table


def rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query).fetchall()


def stored(dsn: str) -> dict[str, dict[str, Any]]:
    return {k: {"clicks": c, "page": p}
            for k, c, p in rows(dsn, "SELECT key, clicks, page FROM users")}  # fmt: skip


def sink(dsn: str, **options: Any) -> PostgresSink:
    return PostgresSink("users", options.pop("codec", JsonCodec()), dsn, table="users", **options)


def test_upserts_and_deletes_equal_each_keys_last_value(dsn: str) -> None:
    items = records(3_000)
    with PostgresWriter(sink(dsn)) as writer:
        for start in range(0, len(items), 700):  # writes of various sizes
            writer.write(0, items[start : start + 700], min(start + 700, len(items)))
        assert writer.offsets() == {0: len(items)}
    assert stored(dsn) == last_values(items) and stored(dsn)
    meta = rows(dsn, "SELECT key, goka_partition, goka_offset, goka_timestamp FROM users")
    newest = {(r[2] or b"").decode(): r[1] for r in items}  # the offset of each key's last record
    assert all(p == 0 and newest[k] == o and o + T0 == round(t.timestamp() * 1000)
               for k, p, o, t in meta)  # fmt: skip


def test_replays_from_older_positions_write_nothing_twice(dsn: str) -> None:
    items = records(2_000, seed=2)
    log = PostgresSink("users", JsonCodec(), dsn, table="users_log", mode="append")
    with PostgresWriter(sink(dsn)) as writer, PostgresWriter(log) as appender:
        done = 0
        for start, end in ((0, 800), (300, 1_200), (0, 1_200), (1_100, 2_000), (0, 2_000)):
            summary = writer.write(0, items[start:end], end)
            assert summary.already == max(0, min(done, end) - start)  # below the stored offset
            assert appender.write(0, items[start:end], end).already == summary.already
            done = max(done, end)
        assert writer.offsets() == appender.offsets() == {0: 2_000}
    assert stored(dsn) == last_values(items)
    appended = rows(dsn, "SELECT goka_topic, goka_partition, goka_offset, key, goka_deleted, "
                         "clicks, page FROM users_log ORDER BY goka_offset")  # fmt: skip
    want = [("users", 0, o, k.decode(), v is None, *(
        (None, None) if v is None else (json.loads(v)["clicks"], json.loads(v)["page"])))
        for _, o, k, v, _, _ in items if k is not None]  # fmt: skip
    assert appended == want  # one row per record, tombstones included, each once


def test_a_write_is_one_transaction(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    items = records(500, seed=3)
    with PostgresWriter(sink(dsn)) as writer:
        writer.write(0, items[:200], 200)
        before = stored(dsn)
        real = PostgresWriter._copy

        def copied_then_failed(self: PostgresWriter, *args: Any) -> None:
            real(self, *args)  # the rows are in the table, inside the transaction
            raise RuntimeError("killed between the COPY and the COMMIT")

        monkeypatch.setattr(PostgresWriter, "_copy", copied_then_failed)
        with pytest.raises(RuntimeError):
            writer.write(0, items[200:], 500)
        assert stored(dsn) == before and writer.offsets() == {0: 200}  # none of it
        monkeypatch.setattr(PostgresWriter, "_copy", real)
        writer.write(0, items[200:], 500)
    assert stored(dsn) == last_values(items)


def test_partitions_keep_their_own_offsets(dsn: str) -> None:
    a, b = records(300, seed=4), records(300, seed=5, keys=10)
    b = [(t, o, b"b-" + (k or b""), v, ts, h) for t, o, k, v, ts, h in b]
    with PostgresWriter(sink(dsn)) as writer:
        writer.write(0, a, 300)
        writer.write(1, b[:100], 100)
        assert writer.offsets() == {0: 300, 1: 100}
        writer.write(1, b, 300)
    assert stored(dsn) == {**last_values(a), **last_values(b)}
    assert {p for (p,) in rows(dsn, "SELECT DISTINCT goka_partition FROM users")} == {0, 1}


def test_the_table_grows_a_column_for_a_new_field(dsn: str) -> None:
    first = [("users", 0, b"u", json.dumps({"clicks": 1}).encode(), T0, None)]
    later = [("users", 1, b"w", json.dumps({"clicks": 2, "tags": ["a"], "ok": True,
                                           "score": 0.5}).encode(), T0, None)]  # fmt: skip
    with PostgresWriter(sink(dsn)) as writer:
        assert writer.write(0, first, 1).added_columns == ["clicks"]
        assert writer.write(0, later, 2).added_columns == ["ok", "score", "tags"]
    assert rows(dsn, "SELECT key, clicks, tags, ok, score FROM users ORDER BY key") == [
        ("u", 1, None, None, None), ("w", 2, ["a"], True, 0.5)]  # fmt: skip
    kinds = dict(rows(dsn, "SELECT column_name, data_type FROM information_schema.columns "
                           "WHERE table_name = 'users'"))  # fmt: skip
    assert (kinds["clicks"], kinds["tags"], kinds["ok"], kinds["score"]) == (
        "bigint",
        "jsonb",
        "boolean",
        "double precision",
    )


def test_a_value_that_does_not_fit_its_column_names_it(dsn: str) -> None:
    with PostgresWriter(sink(dsn)) as writer:
        writer.write(0, [("users", 0, b"u", b'{"clicks": 1}', T0, None)], 1)
        with pytest.raises(
            SinkError,
            match=r"topic 'users' partition 0 offset 1: key 'w': "
            r"column 'clicks' \(bigint\) takes no str",
        ):
            writer.write(0, [("users", 1, b"w", b'{"clicks": "many"}', T0, None)], 2)
        with psycopg.connect(dsn) as conn:
            conn.execute("ALTER TABLE users ADD COLUMN page varchar(3)")
        with pytest.raises(SinkError, match=r"offset 1: .*column 'page' .*at most 3 characters"):
            writer.write(0, [("users", 1, b"w", b'{"page": "/long"}', T0, None)], 2)
        assert writer.offsets() == {0: 1}  # nothing of the failed writes


def test_bad_records_fail_or_are_skipped_with_their_position(dsn: str) -> None:
    bad = [("users", 0, b"u", b'{"clicks": 1}', T0, None), ("users", 1, b"w", b"{nope", T0, None),
           ("users", 2, None, b'{"clicks": 3}', T0, None)]  # fmt: skip
    with (
        PostgresWriter(sink(dsn)) as writer,
        pytest.raises(SinkError, match=r"topic 'users' partition 0 offset 1: .*Error"),
    ):
        writer.write(0, bad, 3)
    with PostgresWriter(sink(dsn, on_error="skip")) as writer:
        summary = writer.write(0, bad, 3)
    assert [s.split(":")[0] for s in summary.skipped] == [
        "topic 'users' partition 0 offset 1",
        "topic 'users' partition 0 offset 2",
    ]
    assert "no key" in summary.skipped[1]
    assert rows(dsn, "SELECT key, clicks FROM users") == [("u", 1)]


def test_values_that_are_not_records_go_to_a_value_column(dsn: str) -> None:
    counts = PostgresSink("clicks-table", Int64Codec(), dsn, table="clicks")
    pages = PostgresSink("pages", StringCodec(), dsn, table="pages", create=True)
    with PostgresWriter(counts) as a, PostgresWriter(pages) as b:
        a.write(3, [("clicks-table", 7, b"u", b"41", T0, None),
                    ("clicks-table", 8, b"u", b"42", T0, None)], 9)  # fmt: skip
        b.write(0, [("pages", 0, b"p", b"/home", T0, None)], 1)
    assert rows(dsn, "SELECT key, value, goka_partition, goka_offset FROM clicks") == [
        ("u", 42, 3, 8)
    ]
    assert rows(dsn, "SELECT key, value FROM pages") == [("p", "/home")]


def test_without_create_the_table_must_exist(dsn: str) -> None:
    with (
        PostgresWriter(sink(dsn, create=False)) as writer,
        pytest.raises(SinkError, match=r"table public.users does not exist \(create=False\)"),
    ):
        writer.write(0, records(3), 3)


def test_a_database_restart_between_writes_is_retried(
    postgres_server: LocalPostgres, dsn: str
) -> None:
    items = records(600, seed=6)
    with PostgresWriter(sink(dsn)) as writer:
        writer.write(0, items[:300], 300)
        postgres_server.restart()  # the writer's connection is gone
        writer.write(0, items[300:], 600)
        assert writer.offsets() == {0: 600}
    assert stored(dsn) == last_values(items)


@pytest.mark.parametrize(
    ("options", "message"),
    [({"table": "bad name"}, "table must be a plain SQL name"),
     ({"mode": "merge"}, "mode must be 'upsert' or 'append'"),
     ({"on_error": "retry"}, "on_error must be 'fail', 'skip' or 'dead-letter'"),
     ({"on_error": "dead-letter"}, "go together"),
     ({"mapper": 42}, "mapper must be callable")],
)  # fmt: skip
def test_invalid_declarations_fail_at_once(options: dict[str, Any], message: str) -> None:
    settings = {"table": "users", **options}
    with pytest.raises(ConfigurationError, match=message):
        PostgresSink("users", JsonCodec(), "dbname=x", **settings)


def test_the_click_count_example_sink_loads_from_the_command_line_spec(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from goka.commands.connect import load_sink

    monkeypatch.setenv("CLICKS_DSN", dsn)
    sink = load_sink("examples.click_count.sinks:clicks")
    assert (sink.topic, sink.table, sink.mode, sink.dsn) == (
        "clicks-table",
        "clicks",
        "upsert",
        dsn,
    )
    with PostgresWriter(sink) as writer:
        writer.write(0, [("clicks-table", 0, b"user-01", b"3", T0, None)], 1)
    assert rows(dsn, "SELECT key, value FROM clicks") == [("user-01", 3)]


def order_type() -> Any:
    """A protobuf message class made here: an id, a Timestamp, repeated tags, an enum."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    field = descriptor_pb2.FieldDescriptorProto
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    proto = descriptor_pb2.FileDescriptorProto(
        name="order.proto", package="t", syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"],
    )  # fmt: skip
    order = proto.message_type.add(name="Order")
    state = order.enum_type.add(name="State")
    state.value.add(name="NEW", number=0)
    state.value.add(name="PAID", number=1)
    order.field.add(name="id", number=1, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    order.field.add(name="placed", number=2, type=field.TYPE_MESSAGE, label=field.LABEL_OPTIONAL,
                    type_name=".google.protobuf.Timestamp")  # fmt: skip
    order.field.add(name="tags", number=3, type=field.TYPE_STRING, label=field.LABEL_REPEATED)
    order.field.add(name="state", number=4, type=field.TYPE_ENUM, label=field.LABEL_OPTIONAL,
                    type_name=".t.Order.State")  # fmt: skip
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("t.Order"))


def test_protobuf_values_give_a_column_per_field(dsn: str) -> None:
    import datetime as dt

    from goka import ProtobufCodec

    order = order_type()
    codec = ProtobufCodec(order)
    placed = order(id=7, tags=["a", "b"], state=1)
    placed.placed.FromDatetime(dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC))
    fresh = order(id=8)
    items = [("users", 0, b"o7", codec.encode(placed), T0, None),
             ("users", 1, b"o8", codec.encode(fresh), T0, None)]  # fmt: skip
    with PostgresWriter(sink(dsn, codec=codec)) as writer:
        writer.write(0, items, 2)
    found = rows(dsn, "SELECT key, id, placed, tags, state FROM users ORDER BY key")
    assert found == [
        ("o7", 7, dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), ["a", "b"], "PAID"),
        ("o8", 8, None, [], "NEW"),
    ]


def test_a_mapper_that_returns_none_leaves_the_record_out(dsn: str) -> None:
    items = records(400, seed=5)

    def even(key: str, value: dict[str, Any]) -> dict[str, Any] | None:
        return value if value["clicks"] % 2 == 0 else None

    with PostgresWriter(sink(dsn, mapper=even)) as writer:
        summary = writer.write(0, items, 400)
    kept = [r for r in items if r[3] is None or json.loads(r[3])["clicks"] % 2 == 0]
    assert summary.filtered == len(items) - len(kept) > 0
    assert stored(dsn) == last_values(kept)
