"""The PostgreSQL sources on a real server and the embedded broker: a table or query by an
incrementing and/or timestamp column (each row, or each version of a row, once; equal
timestamps cut by a small batch; a run that lost records of some partitions resumes
exactly; the database restarting under a run), and change data capture through logical
decoding (inserts, updates, deletes and key changes of two tables into two topics, ending
equal to the tables; a slot not advanced after a crash gives nothing twice; truncates
reported; a slot of another plugin refused)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from goka.connect import (
    PostgresCdcSource,
    PostgresCdcSourceJob,
    PostgresSource,
    PostgresSourceJob,
    SourceError,
    postgres_catalog,
)
from goka.connect.positions import POSITION_HEADER
from goka.connect.postgres_cdc import OP_HEADER
from goka.dev.postgres import LocalPostgres
from goka.errors import ConfigurationError
from goka.kafka.consumer import Record, read_to_end
from goka.partitioner import partition_for

from ..helpers import wait_for
from .records import forget_progress

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

psycopg = pytest.importorskip("psycopg")


def execute(dsn: str, *statements: str, params: Any = None) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement, params)


def records(brokers: str, topic: str) -> list[Record]:
    return list(read_to_end(brokers, topic, timeout=30))


def ids(brokers: str, topic: str, field: str = "id") -> Counter[Any]:
    return Counter(json.loads(r.value)[field] for r in records(brokers, topic) if r.value)


def last_values(found: list[Record]) -> dict[bytes, Any]:
    """Each key's last value, decoded (None: a tombstone)."""
    return {r.key or b"": None if r.value is None else json.loads(r.value) for r in found}


def table_rows(dsn: str, query: str) -> dict[bytes, dict[str, Any]]:
    with psycopg.connect(dsn) as conn:
        cursor = conn.execute(query)
        names = [d.name for d in cursor.description]
        return {str(r[0]).encode(): dict(zip(names, r, strict=True)) for r in cursor.fetchall()}


def test_incrementing_rows_each_once_with_positions_and_json_values(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    topic = new_topic(partitions=4)
    execute(dsn, "CREATE TABLE orders (id bigserial PRIMARY KEY, amount numeric(10,2), "
            "placed timestamptz, ref uuid, blob bytea, doc jsonb)",
            "INSERT INTO orders (amount, placed, ref, blob, doc) SELECT n * 1.5, "
            "'2026-01-01T00:00:00Z'::timestamptz + n * interval '1 minute', "
            "md5(n::text)::uuid, int4send(n::int), jsonb_build_object('n', n) "
            "FROM generate_series(1, 500) AS n")  # fmt: skip
    source = PostgresSource(dsn, topic, table="orders", incrementing_column="id", batch=120)
    totals = PostgresSourceJob(source, brokers).run_until_caught_up()
    assert (totals.records, totals.produced, totals.already) == (500, 500, 0)
    found = records(brokers, topic)
    assert Counter(int(r.key or b"") for r in found) == Counter(range(1, 501))
    for record in found:
        value = json.loads(record.value or b"")
        n = value["id"]
        assert record.partition == partition_for(str(n).encode(), 4)
        assert value["amount"] == n * 1.5 and value["doc"] == {"n": n}
        assert value["placed"].startswith("2026-01-01T") and len(value["ref"]) == 36
        assert value["blob"] == n.to_bytes(4, "big").hex()
        assert dict(record.headers)[POSITION_HEADER] == f"{topic}\t{n}\t0".encode()
    again = PostgresSourceJob(source, brokers).run_until_caught_up()
    assert again.produced == 0 and again.already == again.records < 120  # from the floor
    execute(dsn, "INSERT INTO orders (amount) SELECT n FROM generate_series(1, 70) AS n")
    more = PostgresSourceJob(source, brokers).run_until_caught_up()
    assert more.produced == 70
    assert ids(brokers, topic) == Counter(range(1, 571))


def test_timestamp_and_incrementing_give_each_version_of_a_row(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    topic = new_topic(partitions=3)
    execute(dsn, "CREATE TABLE users (id int PRIMARY KEY, name text, changed timestamp NOT NULL)",
            "INSERT INTO users SELECT n, 'v1', '2026-03-01'::timestamp + (n % 7) * "
            "interval '1 second' FROM generate_series(1, 300) AS n")  # fmt: skip
    source = PostgresSource(dsn, topic, table="users", timestamp_column="changed",
                            incrementing_column="id", batch=50)  # fmt: skip
    assert PostgresSourceJob(source, brokers).run_until_caught_up().produced == 300
    execute(dsn, "UPDATE users SET name = 'v2', changed = '2026-03-02' WHERE id % 10 = 0")
    assert PostgresSourceJob(source, brokers).run_until_caught_up().produced == 30
    assert last_values(records(brokers, topic)) == {
        k: {**v, "changed": v["changed"].isoformat()}
        for k, v in table_rows(dsn, "SELECT id, name, changed FROM users").items()
    }  # the newest version of every row, each version once
    versions = Counter(json.loads(r.value or b"")["id"] for r in records(brokers, topic))
    assert versions == Counter({i: 2 if i % 10 == 0 else 1 for i in range(1, 301)})
    stamp = records(brokers, topic)[0]
    assert stamp.timestamp == 1_772_323_200_000 + (json.loads(stamp.value or b"")["id"] % 7) * 1000


def test_timestamp_alone_breaks_ties_by_key_and_waits_for_the_delay(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    topic = new_topic(partitions=4)
    execute(dsn, "CREATE TABLE events (code text PRIMARY KEY, at timestamptz NOT NULL)",
            "INSERT INTO events SELECT 'e' || n, '2026-01-01T00:00:00Z'::timestamptz + "
            "(n / 40) * interval '1 ms' FROM generate_series(1, 400) AS n",
            "INSERT INTO events VALUES ('recent', now())")  # fmt: skip
    source = PostgresSource(dsn, topic, table="events", timestamp_column="at", key="code",
                            batch=7, delay=3600)  # fmt: skip
    totals = PostgresSourceJob(source, brokers).run_until_caught_up()
    assert totals.produced == 400  # 'recent' waits for the delay
    assert ids(brokers, topic, "code") == Counter(f"e{n}" for n in range(1, 401))
    with pytest.raises(ConfigurationError, match="tiebreak"):
        PostgresSource(dsn, topic, table="events", timestamp_column="at")


def test_a_run_that_lost_records_of_some_partitions_resumes_exactly(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    topic = new_topic(partitions=4)
    execute(dsn, "CREATE TABLE items (id int PRIMARY KEY, owner text)",
            "INSERT INTO items SELECT n, 'o' || (n % 17) FROM generate_series(1, 600) AS n")  # fmt: skip
    # As a crash may leave it: partitions 0 and 1 got rows up to 400, 2 up to 200, 3 none.
    reached = {0: 400, 1: 400, 2: 200, 3: 0}

    def first(row: dict[str, Any]) -> Any:
        return row if row["id"] <= reached[partition_for(row["owner"].encode(), 4)] else None

    options = {"table": "items", "incrementing_column": "id", "key": "owner", "batch": 64}
    PostgresSourceJob(PostgresSource(dsn, topic, transform=first, **options),
                      brokers).run_until_caught_up()  # fmt: skip
    forget_progress(brokers, topic)  # (the crash came before a flush noted it)
    assert sum(ids(brokers, topic).values()) < 600
    totals = PostgresSourceJob(PostgresSource(dsn, topic, **options), brokers).run_until_caught_up()
    assert ids(brokers, topic) == Counter(range(1, 601))
    assert totals.already > 0


def test_flat_map_skip_and_dead_letters_resume_alike(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    topic, dead = new_topic(partitions=2), new_topic(partitions=1)
    execute(dsn, "CREATE TABLE t (id int PRIMARY KEY, n int)",
            "INSERT INTO t SELECT n, n FROM generate_series(1, 100) AS n")  # fmt: skip

    def explode(row: dict[str, Any]) -> Any:
        if row["n"] % 25 == 0:
            raise ValueError(f"no {row['n']}")
        return [row, {**row, "copy": True}] if row["n"] % 10 == 0 else row

    source = PostgresSource(dsn, topic, table="t", incrementing_column="id", transform=explode,
                            on_error="dead-letter", dead_letter=dead, batch=30)  # fmt: skip
    totals = PostgresSourceJob(source, brokers).run_until_caught_up()
    assert (totals.produced, totals.dead_lettered) == (96 + 8, 4)
    letters = records(brokers, dead)
    assert sorted(json.loads(r.value or b"")["n"] for r in letters) == [25, 50, 75, 100]
    assert b"row id 25: ValueError: no 25" in dict(letters[0].headers)["goka-error"]
    again = PostgresSourceJob(source, brokers).run_until_caught_up()
    assert (again.produced, again.dead_lettered) == (0, 0)
    failing = PostgresSource(dsn, new_topic(), table="t", incrementing_column="id",
                             transform=explode)  # fmt: skip
    with pytest.raises(SourceError, match="row id 25: ValueError"):
        PostgresSourceJob(failing, brokers).run_until_caught_up()


def test_the_query_source_retries_while_the_database_restarts(
    brokers: str, new_topic: Callable[..., str], tmp_path: Any
) -> None:
    topic = new_topic(partitions=2)
    with LocalPostgres() as server:
        execute(server.dsn, "CREATE TABLE r (id int PRIMARY KEY)",
                "INSERT INTO r SELECT generate_series(1, 50)")  # fmt: skip
        source = PostgresSource(server.dsn, topic, query="SELECT id, id * 2 AS twice FROM r",
                                incrementing_column="id", batch=10)  # fmt: skip
        job = PostgresSourceJob(source, brokers)
        restarted: list[bool] = []
        original = job._query

        def query(conn: Any, after: Any, inclusive: bool) -> Any:
            if after is not None and after[0] >= 20 and not restarted:
                restarted.append(True)
                server.restart()
            return original(conn, after, inclusive)

        job._query = query  # type: ignore[method-assign]  # a restart between two queries
        assert job.run_until_caught_up().produced == 50
        assert restarted
    assert ids(brokers, topic) == Counter(range(1, 51))
    assert {json.loads(r.value or b"")["twice"] for r in records(brokers, topic)} == set(
        range(2, 101, 2)
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [({}, "incrementing_column and/or timestamp_column"),
     ({"incrementing_column": "id", "query": "SELECT 1"}, "one of them"),
     ({"incrementing_column": "id", "table": None, "query": "DELETE FROM t"}, "a SELECT"),
     ({"incrementing_column": "id", "batch": 0}, "batch must be a positive int"),
     ({"incrementing_column": "id", "delay": -1}, "delay must be a number"),
     ({"incrementing_column": "id", "on_error": "dead-letter"}, "go together")],
)  # fmt: skip
def test_invalid_query_sources_fail_at_once(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        PostgresSource("dbname=x", "t", **{"table": "t", **options})


# -- change data capture --------------------------------------------------------------------------
@pytest.fixture(params=["pgoutput", "wal2json"])
def decoder(request: pytest.FixtureRequest) -> str:
    """Each decoder in turn (wal2json where the server has it)."""
    if request.param == "wal2json":
        request.getfixturevalue("wal2json")
    return str(request.param)


def modes(decoder: str) -> Any:
    """A source's decoder option (wal2json has no snapshots)."""
    return {"decoder": decoder, **({"snapshot": "never"} if decoder == "wal2json" else {})}


def test_changes_of_two_tables_into_two_topics_end_equal_to_the_tables(
    brokers: str, new_topic: Callable[..., str], dsn: str, decoder: str
) -> None:
    accounts, lines = new_topic(partitions=4), new_topic(partitions=2)
    execute(dsn, "CREATE TABLE accounts (id int PRIMARY KEY, owner text, data jsonb)",
            "CREATE TABLE lines (account int, line int, qty int, PRIMARY KEY (account, line))")  # fmt: skip
    source = PostgresCdcSource(
        dsn, {"public.accounts": accounts, "public.lines": lines}, batch=50, **modes(decoder)
    )
    job = PostgresCdcSourceJob(source, brokers)
    assert job.run_until_caught_up().produced == 0  # the slot starts here
    assert job.slot_position() is not None
    execute(dsn, "SET synchronous_commit = off",  # (commits the WAL flushes later: the
            # bounded run must still see them)
            "INSERT INTO accounts SELECT n, 'o' || n, jsonb_build_object('n', n) "
            "FROM generate_series(1, 200) AS n",
            "INSERT INTO lines SELECT n % 20, n, n FROM generate_series(1, 100) AS n",
            "UPDATE accounts SET owner = 'changed' WHERE id % 3 = 0",
            "DELETE FROM accounts WHERE id % 5 = 0",
            "UPDATE accounts SET id = id + 1000 WHERE id = 7",  # a key change
            "UPDATE lines SET qty = qty * 10 WHERE line % 4 = 0",
            "DELETE FROM lines WHERE line % 9 = 0")  # fmt: skip
    totals = PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    assert totals.produced == 200 + 100 + 66 + 40 + 2 + 25 + 11
    found = records(brokers, accounts)
    want = table_rows(dsn, "SELECT id, owner, data::text AS data FROM accounts")
    if decoder == "wal2json":  # (which parses json columns; pgoutput gives them as text)
        want = {k: {**row, "data": json.loads(row["data"])} for k, row in want.items()}
    assert last_values(found) == {**want, **{str(i).encode(): None for i in range(5, 201, 5)},
                                  b"7": None}  # fmt: skip
    ops = Counter(dict(r.headers)[OP_HEADER] for r in found)
    assert ops == Counter({b"c": 200, b"u": 66 + 1, b"d": 40 + 1})
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT account, line, qty FROM lines").fetchall()
    got = {k: v for k, v in last_values(records(brokers, lines)).items() if v is not None}
    assert got == {json.dumps([a, n], separators=(",", ":")).encode():
                   {"account": a, "line": n, "qty": q} for a, n, q in rows}  # fmt: skip
    assert PostgresCdcSourceJob(source, brokers).run_until_caught_up().produced == 0


def test_a_slot_not_advanced_after_a_crash_gives_nothing_twice(
    brokers: str, new_topic: Callable[..., str], dsn: str
) -> None:
    topic = new_topic(partitions=4)
    execute(dsn, "CREATE TABLE k (id int PRIMARY KEY, v int)")
    source = PostgresCdcSource(dsn, {"public.k": topic}, batch=40)
    PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    for n in range(10):  # ten transactions
        execute(dsn, f"INSERT INTO k SELECT g, {n} FROM generate_series({n * 30}, "
                f"{n * 30 + 29}) AS g")  # fmt: skip

    class Crash(Exception):
        pass

    class Crashing(PostgresCdcSourceJob):  # produced and flushed, not confirmed
        def _advance(self, end: str) -> None:
            raise Crash(end)

    before = PostgresCdcSourceJob(source, brokers).slot_position()
    crashing = Crashing(source, brokers)
    with pytest.raises(Crash):
        crashing.run_until_caught_up()
    assert crashing.totals.produced == 60  # two transactions: more than 40 changes
    assert PostgresCdcSourceJob(source, brokers).slot_position() == before
    totals = PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    assert (totals.produced, totals.already) == (240, 60)
    assert ids(brokers, topic) == Counter(range(300))
    assert PostgresCdcSourceJob(source, brokers).slot_position() != before


def test_a_truncate_goes_to_every_partition_and_a_foreign_slot_is_refused(
    brokers: str, new_topic: Callable[..., str], dsn: str, decoder: str
) -> None:
    topics = {"z": new_topic(partitions=3), "y": new_topic(partitions=2),
              "x": new_topic(partitions=2, table=True)}  # (x: compacted)  # fmt: skip
    execute(dsn, *(f"CREATE TABLE {t} (id int PRIMARY KEY)" for t in topics))
    source = PostgresCdcSource(dsn, {f"public.{t}": topic for t, topic in topics.items()},
                               slot="zslot", **modes(decoder))  # fmt: skip
    PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    execute(dsn, "INSERT INTO z SELECT generate_series(1, 30)", "INSERT INTO y VALUES (1)",
            "INSERT INTO x VALUES (1)", "TRUNCATE z, y, x", "INSERT INTO z VALUES (100)")  # fmt: skip
    totals = PostgresCdcSourceJob(source, brokers).run_until_caught_up()
    assert totals.produced == 30 + 1 + 1 + 3 + 2 + 1
    assert len(totals.errors) == 1 and "its topic" in totals.errors[0]  # (x's: compacted)
    assert "public.x was truncated" in totals.errors[0]
    assert PostgresCdcSourceJob(source, brokers).run_until_caught_up().produced == 0
    for table, count in (("z", 3), ("y", 2), ("x", 0)):
        records = list(read_to_end(brokers, topics[table]))
        cut = [r for r in records if dict(r.headers)[OP_HEADER] == b"t"]
        assert sorted(r.partition for r in cut) == list(range(count)), table
        assert all((r.key, r.value, dict(r.headers)["goka-table"]) == (None, None,
                   f"public.{table}".encode()) for r in cut)  # fmt: skip
        for r in records:  # each partition: its inserts, the truncate, then the insert after
            mark = next((t.offset for t in cut if t.partition == r.partition), r.offset)
            assert (r.offset > mark) == (r.key == b"100"), r
    execute(dsn, "SELECT pg_create_logical_replication_slot('other', 'test_decoding')")
    other = PostgresCdcSource(dsn, {"public.z": new_topic()}, slot="other")
    with pytest.raises(SourceError, match="decodes with 'test_decoding'"):
        PostgresCdcSourceJob(other, brokers).run_until_caught_up()
    PostgresCdcSourceJob(source, brokers).reset()
    assert PostgresCdcSourceJob(source, brokers).slot_position() is None


@pytest.mark.parametrize(
    ("options", "message"),
    [({"tables": {}}, "tables must map"), ({"tables": {"z": "t"}}, "schema.table"),
     ({"slot": "Bad-Slot"}, "lower-case"), ({"batch": -1}, "batch must be"),
     ({"decoder": "test_decoding"}, "decoder must be one of pgoutput, wal2json"),
     ({"snapshot": "always"}, "snapshot must be one of initial, never"),
     ({"decoder": "wal2json"}, "with decoder='wal2json', set snapshot='never'"),
     ({"signal_table": "signals"}, "signal_table 'signals' must be schema.table"),
     ({"signal_table": "public.z"}, "none of the tables"),
     ({"signal_table": "public.s", "decoder": "wal2json", "snapshot": "never"},
      "with decoder='pgoutput'")],
)  # fmt: skip
def test_invalid_change_sources_fail_at_once(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        PostgresCdcSource("dbname=x", **{"tables": {"public.z": "t"}, **options})


def test_a_second_run_of_a_source_refuses_to_start_while_one_runs(
    brokers: str, new_topic: Callable[..., str], dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres_catalog, "HOLD_WAIT", 1.0)  # (it would wait 30 s for it)
    topic = new_topic()
    execute(dsn, "CREATE TABLE z (id int PRIMARY KEY)", "INSERT INTO z VALUES (1)")
    source = PostgresCdcSource(dsn, {"public.z": topic}, slot="once", watch=True,
                               poll_interval=0.05)  # fmt: skip
    lock = "SELECT %s(hashtextextended('goka-source:once', 0))"
    first, errors = PostgresCdcSourceJob(source, brokers), []
    running = threading.Thread(target=lambda: capture(first.run, errors))
    running.start()
    try:
        wait_for(lambda: first.totals.snapshot_rows == 1, what="the first run reading")
        second = PostgresCdcSourceJob(source, brokers)
        with pytest.raises(SourceError, match=r"another run of it holds slot 'once' \(server "
                                              r"process \d+\)"):  # fmt: skip
            second.run_until_caught_up()
        with pytest.raises(SourceError, match="another run of it holds slot"):
            second.reset()  # (not under a run)
        assert second.slot_position() is not None  # (a tool, on a connection of its own)
        # its connection lost, and the lock taken meanwhile: the run stops, not reconnects
        with psycopg.connect(dsn, autocommit=True) as taker:
            taker.execute("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = "
                          "'advisory' AND granted AND database = (SELECT oid FROM pg_database "
                          "WHERE datname = current_database())")  # fmt: skip
            taker.execute(lock % "pg_advisory_lock")
            execute(dsn, "INSERT INTO z VALUES (2)")
            running.join(30)
            assert not running.is_alive() and "another run of it holds slot" in str(errors)
    finally:
        first.stop()
        running.join(30)
    assert PostgresCdcSourceJob(source, brokers).run_until_caught_up().produced == 1
    assert ids(brokers, topic) == Counter([1, 2])


def capture(work: Callable[[], Any], errors: list[BaseException]) -> None:
    try:
        work()
    except Exception as exc:  # (the thread's error, for the test to see)
        errors.append(exc)
