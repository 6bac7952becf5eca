"""Change data capture with PostgreSQL's own pgoutput on a real server: column values mapped
as Debezium maps them, tables whose changes would have no key refused at start (and those
keyed by a replica identity index or the source's key option accepted), the publication made
before the slot or completed or refused, unchanged TOASTed values, and a slot that moves past
WAL without changes of its tables."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest

from goka.connect import PostgresCdcSource, PostgresCdcSourceJob, SourceError
from goka.connect.pgoutput import UNAVAILABLE
from goka.connect.postgres_cdc import OP_HEADER, lsn_int
from goka.kafka.consumer import Record, read_to_end

from .versions import execute

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

psycopg = pytest.importorskip("psycopg")


def values(brokers: str, topic: str) -> list[tuple[bytes | None, Any, bytes]]:
    found: list[Record] = list(read_to_end(brokers, topic, timeout=30))
    return [(r.key, None if r.value is None else json.loads(r.value), dict(r.headers)[OP_HEADER])
            for r in found]  # fmt: skip


def test_values_of_each_type_are_mapped_as_debezium_maps_them(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    topic = new_topic()
    execute(dsn, """CREATE TABLE t (id int PRIMARY KEY, flag bool, small smallint, big bigint,
        real4 real, num numeric(10, 2), free numeric, zoned timestamptz, local3 timestamp(3),
        local timestamp, day date, clock time, zclock timetz, span interval, doc jsonb,
        js json, raw bytea, id2 uuid, words text[], grid int[][], label varchar(5),
        note text)""")  # fmt: skip
    source = PostgresCdcSource(dsn, {"public.t": topic})
    PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    execute(dsn, """INSERT INTO t VALUES (1, true, -3, 9007199254740993, 1.5, 12.5,
        'NaN', '2024-01-02 03:04:05.123456+02', '2024-01-02 03:04:05.987',
        '1969-12-31 23:59:59.5', '1969-12-30', '13:14:15.25', '13:14:15+01',
        '1 year 2 days 03:04:05', '{"b": [1, 2], "a": null}', '{"x":1}', '\\x00ff10',
        'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', ARRAY['a b', NULL, 'c"d', ''],
        '{{1,2},{3,NULL}}', 'hé', E'a\\tb\\nc\\\\d\\\\N')""",
            "INSERT INTO t (id, zoned, local, day) VALUES (2, 'infinity', '-infinity', "
            "'infinity')")  # fmt: skip
    PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    found = {key: value for key, value, _ in values(brokers, topic)}
    first = found[b"1"]
    stamp = dt.datetime(2024, 1, 2, 1, 4, 5, 123456, tzinfo=dt.UTC)
    local = dt.datetime(2024, 1, 2, 3, 4, 5, 987000) - dt.datetime(1970, 1, 1)
    assert first == {
        "id": 1, "flag": True, "small": -3, "big": 9007199254740993, "real4": 1.5,
        "num": "12.50", "free": "NaN",
        "zoned": stamp.isoformat().replace("+00:00", "Z"),
        "local3": (local.days * 86_400 + local.seconds) * 1000 + local.microseconds // 1000,
        "local": -500_000,  # (microseconds)
        "day": -2, "clock": (13 * 3600 + 14 * 60 + 15) * 1_000_000 + 250_000,
        "zclock": "12:14:15Z", "span": "P1Y2DT3H4M5S",
        "doc": '{"a": null, "b": [1, 2]}', "js": '{"x":1}',
        "raw": base64.b64encode(b"\x00\xff\x10").decode(),
        "id2": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "words": ["a b", None, 'c"d', ""], "grid": [[1, 2], [3, None]], "label": "hé",
        "note": "a\tb\nc\\d\\N",
    }  # fmt: skip
    assert {k: found[b"2"][k] for k in ("zoned", "local", "day")} == {
        "zoned": "infinity", "local": "-infinity", "day": "infinity"}  # fmt: skip
    read = new_topic()  # a snapshot reads each row as its change gave it
    PostgresCdcSourceJob(PostgresCdcSource(dsn, {"public.t": read}, slot="reads",
                                           snapshot="initial_only"), brokers).run_until_caught_up()  # fmt: skip
    assert {key: value for key, value, _ in values(brokers, read)} == found
    # the same of a table whose rows' JSON is made from COPY's lines (goka/_copy_json.c)
    execute(dsn, "CREATE TABLE s (id text PRIMARY KEY, flag bool, big bigint, note text)")
    changes, read = new_topic(), new_topic()
    source = PostgresCdcSource(dsn, {"public.s": changes}, slot="simple")
    PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    execute(dsn, "INSERT INTO s VALUES (E'k\\t\\\\1', true, NULL, "
                 "E'a\\tb\\nc\\\\d\\\\N\\u0001\\u007f\\u2028\\\\\\\\\\b\\f\\r\\u000b\"é'), "
                 "('k2', NULL, -5, NULL), ('k3', false, 9007199254740993, '')")  # fmt: skip
    PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    PostgresCdcSourceJob(PostgresCdcSource(dsn, {"public.s": read}, slot="simple_reads",
                                           snapshot="initial_only"), brokers).run_until_caught_up()  # fmt: skip
    changed = {key: value for key, value, _ in values(brokers, changes)}
    assert changed[b"k\t\\1"]["note"] == 'a\tb\nc\\d\\N\x01\x7f\u2028\\\\\b\f\r\v"é'
    assert {key: value for key, value, _ in values(brokers, read)} == changed


def test_tables_whose_changes_would_have_no_key_are_refused_at_start(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    execute(dsn, "CREATE TABLE bare (v int)", "CREATE TABLE nothing (id int PRIMARY KEY)",
            "ALTER TABLE nothing REPLICA IDENTITY NOTHING",
            "CREATE TABLE parted (id int PRIMARY KEY) PARTITION BY RANGE (id)",
            "CREATE TABLE other (id int PRIMARY KEY, code int NOT NULL)",
            "CREATE UNIQUE INDEX other_code ON other (code)",
            "ALTER TABLE other REPLICA IDENTITY USING INDEX other_code",
            "CREATE TABLE gen (x int, id int GENERATED ALWAYS AS (x * 2) STORED PRIMARY KEY)")  # fmt: skip
    for table, message in (("bare", "public.bare has no primary key"),
                           ("nothing", "REPLICA IDENTITY NOTHING"),
                           ("missing", "public.missing does not exist"),
                           ("parted", "public.parted is partitioned"),
                           ("other", r"USING INDEX on \(code\), not its primary key"),
                           ("gen", "keyed by generated column")):  # fmt: skip
        source = PostgresCdcSource(dsn, {f"public.{table}": new_topic()}, slot=f"s_{table}")
        with pytest.raises(SourceError, match=message):
            PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    with psycopg.connect(dsn, autocommit=True) as conn:  # nothing made for a refused source
        assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE database = "
                            "current_database()").fetchone() == (0,)  # fmt: skip
        assert conn.execute("SELECT count(*) FROM pg_publication").fetchone() == (0,)
        conn.execute("UPDATE bare SET v = 1")  # (no publication made its updates refused)


def test_a_replica_identity_index_or_the_key_option_keys_a_table_without_primary_key(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    by_index, by_option = new_topic(), new_topic()
    execute(dsn, "CREATE TABLE codes (code text NOT NULL, v int)",
            "CREATE UNIQUE INDEX codes_code ON codes (code)",
            "ALTER TABLE codes REPLICA IDENTITY USING INDEX codes_code",
            "CREATE TABLE logs (name text, v int)", "ALTER TABLE logs REPLICA IDENTITY FULL")  # fmt: skip
    sources = [PostgresCdcSource(dsn, {"public.codes": by_index}, slot="codes"),
               PostgresCdcSource(dsn, {"public.logs": by_option}, slot="logs", key="name")]  # fmt: skip
    for source in sources:
        PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    execute(dsn, "INSERT INTO codes VALUES ('a', 1), ('b', 2)", "UPDATE codes SET v = 3",
            "DELETE FROM codes WHERE code = 'a'", "INSERT INTO logs VALUES ('x', 1)",
            "UPDATE logs SET v = 2", "DELETE FROM logs")  # fmt: skip
    for source in sources:
        PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    assert sorted(values(brokers, by_index), key=lambda r: (r[0], r[2])) == [
        (b"a", {"code": "a", "v": 1}, b"c"), (b"a", None, b"d"),
        (b"a", {"code": "a", "v": 3}, b"u"), (b"b", {"code": "b", "v": 2}, b"c"),
        (b"b", {"code": "b", "v": 3}, b"u")]  # fmt: skip
    assert values(brokers, by_option) == [(b"x", {"name": "x", "v": 1}, b"c"),
                                          (b"x", {"name": "x", "v": 2}, b"u"),
                                          (b"x", None, b"d")]  # fmt: skip


def test_the_publication_is_made_before_the_slot_then_completed_or_refused(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    a, b = new_topic(), new_topic()
    execute(dsn, "CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE b (id int PRIMARY KEY)",
            "CREATE PUBLICATION mine FOR TABLE a")  # fmt: skip
    source = PostgresCdcSource(dsn, {"public.a": a, "public.b": b}, publication="mine")
    PostgresCdcSourceJob(source, brokers).run_until_caught_up()  # (b added to it)
    execute(dsn, "INSERT INTO a VALUES (1)", "INSERT INTO b VALUES (2)")
    assert PostgresCdcSourceJob(source, brokers).run_until_caught_up().produced == 2
    execute(dsn, "CREATE PUBLICATION inserts FOR TABLE a WITH (publish = 'insert')")
    partial = PostgresCdcSource(dsn, {"public.a": new_topic()}, publication="inserts")
    with pytest.raises(SourceError, match="publication 'inserts' does not publish every"):
        PostgresCdcSourceJob(partial, brokers).run_until_caught_up()


def test_unchanged_toasted_values_come_from_the_old_row_or_are_marked(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    default, full = new_topic(), new_topic()
    big = "".join(f"{i:x}" for i in range(20_000))  # (stored out of line, not compressible)
    for table in ("plain", "whole"):
        execute(dsn, f"CREATE TABLE {table} (id int PRIMARY KEY, v int, doc text)",
                f"ALTER TABLE {table} ALTER doc SET STORAGE EXTERNAL")  # fmt: skip
    execute(dsn, "ALTER TABLE whole REPLICA IDENTITY FULL")
    sources = [PostgresCdcSource(dsn, {"public.plain": default}, slot="plain"),
               PostgresCdcSource(dsn, {"public.whole": full}, slot="whole")]  # fmt: skip
    for source in sources:
        PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    for table in ("plain", "whole"):
        execute(dsn, f"INSERT INTO {table} VALUES (1, 1, '{big}')",
                f"UPDATE {table} SET v = 2")  # fmt: skip
    for source in sources:
        PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    assert [v["doc"] for _, v, _ in values(brokers, default)] == [big, UNAVAILABLE]
    assert [v["doc"] for _, v, _ in values(brokers, full)] == [big, big]


def test_the_slot_moves_past_wal_without_changes_of_its_tables(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    execute(dsn, "CREATE TABLE mine (id int PRIMARY KEY)", "CREATE TABLE other (id int)")
    source = PostgresCdcSource(dsn, {"public.mine": new_topic()})
    PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    before = PostgresCdcSourceJob(source, brokers).slot_position()
    execute(dsn, "INSERT INTO other SELECT generate_series(1, 1000)")
    assert PostgresCdcSourceJob(source, brokers).run_until_caught_up().produced == 0
    after = PostgresCdcSourceJob(source, brokers).slot_position()
    assert before is not None and after is not None and lsn_int(after) > lsn_int(before)
